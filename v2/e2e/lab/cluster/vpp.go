package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/vcoil/vcoil/v2/e2e/lab/render"
	"github.com/vcoil/vcoil/v2/e2e/lab/topology"
	"github.com/vcoil/vcoil/v2/internal/poll"
)

// daemonSets are vcoild's DaemonSets with the number of nodes each serves:
// vcoil-daemon the Linux nodes, vcoil-daemon-vpp (overlay lab-vpp) the VPP
// nodes.
func (c Config) daemonSets() map[string]int32 {
	out := map[string]int32{}
	for _, n := range c.Topology.NodeList() {
		name := "vcoil-daemon"
		if n.Dataplane == topology.DataplaneVPP {
			name = "vcoil-daemon-vpp"
		}
		out[name]++
	}
	return out
}

// recordDataplanes writes the nodes' dataplanes and the VPP binary, for
// the commands that run later without lab-up's flags.
func (c Config) recordDataplanes() error {
	data := strings.Join(c.Topology.Dataplanes, ",") + "\n" + c.VPPBin + "\n"
	return os.WriteFile(c.dataplanesFile(), []byte(data), 0o644)
}

// RecordedDataplanes returns what recordDataplanes wrote: the dataplanes
// (nil for an all-Linux lab or no lab) and the VPP binary.
func (c Config) RecordedDataplanes() (dataplanes []string, vppBin string) {
	b, err := os.ReadFile(c.dataplanesFile())
	if err != nil {
		return nil, ""
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) > 0 && lines[0] != "" {
		dataplanes = strings.Split(lines[0], ",")
	}
	if len(lines) > 1 {
		vppBin = lines[1]
	}
	return dataplanes, vppBin
}

// recordIPFamily writes the lab's IP family, for the commands that run
// later without lab-up's flags.
func (c Config) recordIPFamily() error {
	return os.WriteFile(c.ipFamilyFile(), []byte(c.Topology.IPFamily+"\n"), 0o644)
}

// RecordedIPFamily returns what recordIPFamily wrote ("" without a lab).
func (c Config) RecordedIPFamily() string {
	b, err := os.ReadFile(c.ipFamilyFile())
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// OtherIPFamily returns the running lab's IP family when it is not the one
// c asks for (--ip-family), else "". A lab recorded without a family is
// an IPv4 lab.
func (c Config) OtherIPFamily() string {
	running := c.RecordedIPFamily()
	if running == "" {
		running = topology.IPFamilyIPv4
	}
	if !c.IsUp() || running == c.Topology.IPFamily {
		return ""
	}
	return running
}

// vppDaemonName names a node's VPP supervisor (its pid file and log).
func vppDaemonName(n topology.Node) string { return n.Name + "-vpp" }

func (c Config) vppDir(n topology.Node) string { return c.path("vpp", n.Name) }

// checkVPP fails when the lab has VPP nodes but no usable VPP binary, or
// would run kube-proxy beside VPP (whose pods the kernel never sees).
func (c Config) checkVPP() error {
	if !c.Topology.HasVPP() {
		return nil
	}
	if c.VPPBin == "" {
		return errors.New("VPP nodes need a VPP 25.10 binary: set VCOIL_VPP_BIN=/path/to/vpp (vcoil never builds VPP; docs/lab.md says how to get one)")
	}
	if fi, err := os.Stat(c.VPPBin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("VCOIL_VPP_BIN=%s is not an executable file", c.VPPBin)
	}
	if c.KubeProxy {
		return errors.New("kube-proxy cannot serve VPP nodes (their pods' traffic never enters the kernel): leave LAB_KUBE_PROXY unset with LAB_DATAPLANE=vpp")
	}
	return nil
}

// startVPPs starts every VPP node's VPP under a supervisor (`lab
// vpp-supervise`) that restarts it when it dies, in the node's network and
// mount namespaces, and waits until each node's kernel reaches the fabric
// through it: the kubelet needs that to reach the apiserver.
func (c Config) startVPPs(ctx context.Context) error {
	for _, n := range c.Topology.VPPNodes() {
		dir := c.vppDir(n)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		cli, conf := filepath.Join(dir, "startup.cli"), filepath.Join(dir, "startup.conf")
		if err := os.WriteFile(cli, []byte(render.VPPStartupCLI(n)), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(conf, []byte(render.VPPStartupConf(n, cli, c.logFile(n.Name+"-vpp-internal"))), 0o644); err != nil {
			return err
		}
		if err := c.start(daemon{name: vppDaemonName(n), netns: n.Netns, mountNS: c.mountNS(n), uts: c.utsNS(n.Name),
			args: []string{c.Self, "vpp-supervise", "--pid-file", render.VPPPidfile(c.StateDir, n), "--probe", topology.FabricIP.String(), "--", c.VPPBin, "-c", conf}}); err != nil {
			return err
		}
	}
	for _, n := range c.Topology.VPPNodes() {
		if err := poll.Until(ctx, time.Minute, pollInterval, func(context.Context) error {
			_, err := run("nsenter", "--net="+netnsPath(n.Netns), "--", "ping", "-c", "1", "-W", "1", topology.FabricIP.String())
			return err
		}); err != nil {
			return c.failed(fmt.Errorf("node %s reaching the fabric through its VPP: %w", n.Name, err), vppDaemonName(n))
		}
	}
	return nil
}

// VPPCLI runs vppctl against a VPP node's VPP (vppctl is found beside
// VCOIL_VPP_BIN's binary, as a VPP build leaves it).
func (c Config) VPPCLI(node string, args ...string) (string, error) {
	for _, n := range c.Topology.VPPNodes() {
		if n.Name != node {
			continue
		}
		vppctl := filepath.Join(filepath.Dir(c.VPPBin), "vppctl")
		if _, err := exec.LookPath(vppctl); err != nil {
			return "", fmt.Errorf("no vppctl beside %s", c.VPPBin)
		}
		argv := append([]string{"nsenter", "--mount=" + c.mountNS(n), "--", vppctl, "-s", render.VPPRunDir + "/cli.sock"}, args...)
		return run(argv[0], argv[1:]...)
	}
	var names []string
	for _, n := range c.Topology.VPPNodes() {
		names = append(names, n.Name)
	}
	return "", fmt.Errorf("%s is not a VPP node (VPP nodes: %s)", node, strings.Join(names, ", "))
}
