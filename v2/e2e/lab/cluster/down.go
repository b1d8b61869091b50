package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vcoil/vcoil/v2/e2e/lab/topology"
	"github.com/vcoil/vcoil/v2/internal/poll"
)

// Down removes the lab, whatever state lab-up left it in: it kills every lab
// process, drops the nodes' mount namespaces (and with them every mount the
// runtime and the kubelets made), deletes the network namespaces (and with
// them every link, route and firewall rule in them), removes the cgroups and
// the directories lab-up created, then the state directory. It ends with
// Check and returns errLeftovers, after printing them, when anything is left.
func (c Config) Down() error {
	_ = os.Remove(c.upMarker())
	var problems []string
	if left := c.killAll(); len(left) > 0 {
		problems = append(problems, fmt.Sprintf("processes that would not die: %v", left))
	}
	pins, _ := filepath.Glob(filepath.Join(c.mountNSDir(), "*"))
	for _, p := range pins {
		if err := unmount(p); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if err := unmount(c.mountNSDir()); err != nil {
		problems = append(problems, err.Error())
	}
	netns, _ := filepath.Glob("/run/netns/" + topology.Prefix + "-*")
	for _, ns := range netns {
		if _, err := run("ip", "netns", "delete", filepath.Base(ns)); err != nil {
			problems = append(problems, err.Error())
		}
	}
	// The kernel frees a cgroup only after its last task is fully gone.
	// Every cgroup gets at least one try, all of them 10 s at most.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, dir := range cgroupDirs() {
		if err := poll.Until(ctx, 10*time.Second, 100*time.Millisecond, func(context.Context) error {
			return removeCgroupTree(dir)
		}); err != nil {
			problems = append(problems, err.Error())
		}
	}
	for _, d := range c.createdDirs() {
		if err := os.Remove(d); err != nil && !os.IsNotExist(err) {
			problems = append(problems, fmt.Sprintf("remove %s (created by lab-up): %v", d, err))
		}
	}
	if ms, err := c.labMounts(); err == nil {
		for _, m := range ms {
			if isUnder(m, c.StateDir) {
				if err := unmount(m); err != nil {
					problems = append(problems, err.Error())
				}
			}
		}
	}
	if ms, _ := c.labMounts(); len(ms) == 0 {
		if err := os.RemoveAll(c.StateDir); err != nil {
			problems = append(problems, err.Error())
		}
	} else {
		problems = append(problems, fmt.Sprintf("kept %s: mounts remain under it: %v", c.StateDir, ms))
	}
	left := append(problems, c.Check()...)
	if len(left) > 0 {
		fmt.Fprintf(c.Out, "\n!!! lab-down LEFT THINGS BEHIND:\n")
		for _, l := range left {
			fmt.Fprintf(c.Out, "!!!   %s\n", l)
		}
		return errLeftovers
	}
	fmt.Fprintf(c.Out, "lab-down: clean (no lab process, mount, network namespace, cgroup, directory or state left)\n")
	return nil
}

// unmount detaches a mount if it is one; a path that is gone or not a mount
// point is fine.
func unmount(path string) error {
	err := syscall.Unmount(path, syscall.MNT_DETACH)
	if err == nil || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOENT) {
		return nil
	}
	return fmt.Errorf("unmount %s: %w", path, err)
}

// Check lists what the lab has left on the machine: its processes (and any
// kubelet, kube-proxy or containerd still running), mounts, network
// namespaces, cgroups, the state directory, and, as a guard, Kubernetes'
// firewall chains, vcoil's service table or lab links in the machine's own
// network namespace (which the lab never touches).
func (c Config) Check() []string {
	var left []string
	for _, p := range c.labProcesses() {
		left = append(left, "process "+p.String())
	}
	for _, p := range strayRuntimeProcesses() {
		left = append(left, "process "+p)
	}
	if ms, err := c.labMounts(); err != nil {
		left = append(left, "cannot read mounts: "+err.Error())
	} else {
		for _, m := range ms {
			left = append(left, "mount "+m)
		}
	}
	netns, _ := filepath.Glob("/run/netns/" + topology.Prefix + "-*")
	for _, ns := range netns {
		left = append(left, "network namespace "+ns)
	}
	for _, d := range cgroupDirs() {
		left = append(left, "cgroup "+d)
	}
	for _, d := range c.createdDirs() {
		if _, err := os.Stat(d); err == nil {
			left = append(left, "directory "+d)
		}
	}
	if _, err := os.Stat(c.StateDir); err == nil {
		left = append(left, "state directory "+c.StateDir)
	}
	if out, err := run("nft", "list", "tables"); err == nil {
		// Lines read "table FAMILY NAME".
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) == 3 && (f[2] == "kube-proxy" || f[2] == vcoilServicesTable) {
				left = append(left, "nftables table "+f[1]+" "+f[2]+" in the machine's network namespace")
			}
		}
	}
	if out, err := run("iptables-save"); err == nil && strings.Contains(out, ":KUBE-") {
		left = append(left, "iptables KUBE- chains in the machine's network namespace")
	}
	if out, err := run("ip", "-o", "link", "show"); err == nil {
		for _, l := range strings.Split(out, "\n") {
			for _, name := range []string{": p-node", ": p-cp@", ": ext0@"} {
				if strings.Contains(l, name) {
					left = append(left, "link in the machine's network namespace: "+strings.TrimSpace(l))
				}
			}
		}
	}
	return left
}

// strayRuntimeProcesses finds kubelets, kube-proxies and containerds from
// the lab's programs that run outside anything the lab knows of.
func strayRuntimeProcesses() []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil {
			continue
		}
		switch filepath.Base(exe) {
		case "kubelet", "kube-proxy", "containerd", "containerd-shim-runc-v2":
			out = append(out, fmt.Sprintf("%s (%s)", e.Name(), exe))
		}
	}
	return out
}
