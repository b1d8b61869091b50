package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/e2e/lab/render"
	"github.com/vcoil/vcoil/v2/e2e/lab/topology"
	"github.com/vcoil/vcoil/v2/internal/poll"
)

// externalHostname is the external host's host name.
const externalHostname = "external"

// images are the tarballs imported into every node's containerd.
var images = []string{"pause.tar", "vcoil.tar", "coredns.tar", "agent.tar"}

// Up brings the lab up. A lab that is already up is left as it is; the
// remains of a failed or interrupted one are removed first. When Up fails it
// leaves what it made for inspection: lab-down removes it.
func (c Config) Up(ctx context.Context) error {
	start := time.Now()
	if c.upAlready() {
		return nil
	}
	if err := c.preflight(); err != nil {
		return err
	}
	if err := c.startClean(); err != nil {
		return err
	}

	done := c.step("certificates and configurations in %s", c.StateDir)
	if err := c.writeFiles(); err != nil {
		return err
	}
	if err := c.recordServiceProxy(); err != nil {
		return err
	}
	if err := c.recordDataplanes(); err != nil {
		return err
	}
	if err := c.recordIPFamily(); err != nil {
		return err
	}
	done()
	fabric, external := topology.FabricNet.String(), topology.ExternalIP.String()
	if c.Topology.Dual() {
		fabric += " and " + topology.FabricNet6.String()
		external += " and " + topology.ExternalIP6.String()
	}
	done = c.step("network namespaces: fabric %s with control plane, %d nodes, external host %s", fabric, c.Topology.Nodes, external)
	if err := c.buildNetwork(); err != nil {
		return err
	}
	done()
	done = c.step("node mount namespaces and cgroups")
	if err := c.makeNodeNamespaces(); err != nil {
		return err
	}
	done()
	if vpp := c.Topology.VPPNodes(); len(vpp) > 0 {
		done = c.step("VPP on %d node(s) (%s), holding the node's fabric address; the node's kernel reaches the fabric through it", len(vpp), c.VPPBin)
		if err := c.startVPPs(ctx); err != nil {
			return err
		}
		done()
	}

	done = c.step("control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler")
	runtimes := make(chan error, 1)
	cl, err := c.startControlPlane(ctx, runtimes)
	if err != nil {
		return err
	}
	done()
	done = c.step("nodes: containerd (images imported), kubelet%s", map[bool]string{true: ", kube-proxy (nftables mode)", false: " (no kube-proxy: vcoil serves the services)"}[c.KubeProxy])
	if err := c.startNodes(ctx, cl, runtimes); err != nil {
		return err
	}
	done()
	done = c.step("fabric router (routes to pod blocks and LoadBalancer addresses, as BIRD would) and the external host's agent")
	if err := c.startRouterAndAgent(); err != nil {
		return err
	}
	done()

	done = c.step("vcoil from its manifests (%s)", c.Overlay)
	if err := c.deployVcoil(ctx, cl); err != nil {
		return err
	}
	done()
	done = c.step("cluster DNS: CoreDNS at %s", render.JoinAddrs(c.Topology.DNSServiceIPs()))
	if err := c.deployCoreDNS(ctx, cl); err != nil {
		return err
	}
	done()
	return c.markUp(start)
}

// markUp leaves the marker of a completed lab-up (IsUp), written last so
// that an interrupted Up is never taken for a lab that is up, and tells how
// to reach the lab.
func (c Config) markUp(start time.Time) error {
	if err := os.WriteFile(c.upMarker(), []byte(time.Now().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return err
	}
	c.say("the lab is up (%.0fs)", time.Since(start).Seconds())
	c.PrintAccess()
	return nil
}

// upAlready reports whether a healthy lab is up, which Up leaves as it is;
// an unhealthy one is announced, and Up replaces it.
func (c Config) upAlready() bool {
	if !c.IsUp() {
		return false
	}
	// Asked for another family (make test's dual-stack lab after an IPv4
	// demo), the lab must be made again: a family is chosen at start.
	if other := c.OtherIPFamily(); other != "" {
		c.say("the running lab's IP family is %s and %s is asked for (LAB_IP_FAMILY): replacing the lab, with everything running in it", other, c.Topology.IPFamily)
		return false
	}
	if problems := c.Health(); len(problems) == 0 {
		c.say("the lab is already up (it runs the images imported when it came up: make lab-reload runs changed code)")
		c.PrintAccess()
		return true
	}
	c.say("the lab is up but unhealthy: replacing it")
	return false
}

// startClean removes what an earlier lab left (a failed or interrupted
// one's namespaces, cgroups and state) and makes the lab's directories,
// without the logs of an earlier run, so that every log is this lab's.
func (c Config) startClean() error {
	if _, err := os.Stat(c.StateDir); err == nil || len(cgroupDirs()) > 0 || len(c.namespaceFiles()) > 0 {
		c.say("removing the remains of an earlier lab")
		if err := c.Down(); err != nil {
			return err
		}
	}
	for _, d := range []string{c.StateDir, c.pidDir(), c.LogDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	old, _ := filepath.Glob(filepath.Join(c.LogDir, "*.log"))
	for _, f := range old {
		_ = os.Remove(f)
	}
	return nil
}

// makeNodeNamespaces gives every node a mount namespace, a host name (UTS
// namespace) and cgroups of its own, the external host its host name, and
// records the namespaces for down.
func (c Config) makeNodeNamespaces() error {
	if err := c.ensureMountpoints(); err != nil {
		return err
	}
	if err := c.prepareMountNSDir(); err != nil {
		return err
	}
	for _, n := range c.Topology.NodeList() {
		if err := c.createNodeMountNS(n); err != nil {
			return err
		}
		if err := c.pinUTS(n.Name); err != nil {
			return err
		}
		if err := createNodeCgroups(n); err != nil {
			return err
		}
	}
	if err := c.pinUTS(externalHostname); err != nil {
		return err
	}
	return c.recordNamespaces()
}

// startControlPlane starts etcd, kube-apiserver, kube-controller-manager
// and kube-scheduler and returns a client of the apiserver once it answers.
// The nodes' runtimes start meanwhile, as soon as etcd is started, since
// their containerd and image imports take longest: their result comes on
// runtimes.
func (c Config) startControlPlane(ctx context.Context, runtimes chan<- error) (client.Client, error) {
	cp := c.controlPlane()
	if err := c.start(daemon{name: "etcd", netns: topology.ControlPlaneNetns, args: append([]string{c.Etcd}, render.EtcdArgs(cp)...)}); err != nil {
		return nil, err
	}
	go func() { runtimes <- c.startRuntimes() }()
	if err := waitEtcd(ctx); err != nil {
		return nil, c.failed(err, "etcd")
	}
	if err := c.start(daemon{name: "kube-apiserver", netns: topology.ControlPlaneNetns, args: append([]string{c.bin("kube-apiserver")}, render.APIServerArgs(cp)...)}); err != nil {
		return nil, err
	}
	cl, restCfg, err := c.Client()
	if err != nil {
		return nil, err
	}
	if err := waitAPIServer(ctx, restCfg); err != nil {
		return nil, c.failed(err, "kube-apiserver")
	}
	for name, args := range map[string][]string{
		"kube-controller-manager": render.ControllerManagerArgs(cp),
		"kube-scheduler":          render.SchedulerArgs(cp),
	} {
		if err := c.start(daemon{name: name, netns: topology.ControlPlaneNetns, args: append([]string{c.bin(name)}, args...)}); err != nil {
			return nil, err
		}
	}
	return cl, nil
}

// startNodes waits for the nodes' runtimes (startControlPlane started
// them), starts every node's kubelet (and kube-proxy when the lab runs it),
// and waits until the nodes have registered.
func (c Config) startNodes(ctx context.Context, cl client.Client, runtimes <-chan error) error {
	if err := <-runtimes; err != nil {
		return err
	}
	for _, n := range c.Topology.NodeList() {
		if err := c.start(daemon{name: n.Name + "-kubelet", netns: n.Netns, mountNS: c.mountNS(n), uts: c.utsNS(n.Name),
			args: append([]string{c.bin("kubelet")}, render.KubeletArgs(n, c.nodeFile(n, "kubelet.yaml"), c.nodeFile(n, "kubelet.kubeconfig"))...)}); err != nil {
			return err
		}
		if c.KubeProxy {
			if err := c.StartKubeProxy(n); err != nil {
				return err
			}
		}
	}
	if err := waitNodesRegistered(ctx, cl, c.Topology.Nodes); err != nil {
		return c.failed(err, "node1-kubelet")
	}
	return nil
}

// startRouterAndAgent starts the fabric's router, which routes to the pod
// blocks and to the LoadBalancer addresses the nodes export (it reads every
// node's namespace) as BIRD would, and the network test agent on the
// external host.
func (c Config) startRouterAndAgent() error {
	args := []string{c.Self, "router", "--kubeconfig", c.path("router.kubeconfig")}
	for _, n := range c.Topology.NodeList() {
		args = append(args, "--peer", netnsPath(n.Netns)+"="+render.JoinAddrs(n.IPs()))
	}
	if err := c.start(daemon{name: "router", netns: topology.FabricNetns, args: args}); err != nil {
		return err
	}
	return c.start(daemon{name: "external-agent", netns: topology.ExternalNetns, uts: c.utsNS(externalHostname),
		args: []string{c.Agent, "serve", "--tcp", fmt.Sprint(topology.AgentTCPPort), "--udp", fmt.Sprint(topology.AgentUDPPort), "--http", fmt.Sprint(topology.AgentHTTPPort)}})
}

// deployVcoil applies vcoil's overlay and the default pools, and waits until
// the controller, every vcoild and every node are ready.
func (c Config) deployVcoil(ctx context.Context, cl client.Client) error {
	if err := c.installVcoil(ctx, cl); err != nil {
		return err
	}
	// vcoild is ready once it holds its node subnet, from the default pool,
	// which only the controller's webhook lets in.
	if err := waitDeployment(ctx, cl, "kube-system", "vcoil-controller", 3*time.Minute); err != nil {
		return c.failed(err, "node1-kubelet")
	}
	if err := createDefaultPools(ctx, cl, c.Topology); err != nil {
		return err
	}
	for ds, nodes := range c.daemonSets() {
		if err := waitDaemonSet(ctx, cl, "kube-system", ds, nodes, 3*time.Minute); err != nil {
			return c.failed(err, "node1-kubelet")
		}
	}
	if err := waitNodesReady(ctx, cl, c.Topology.Nodes, 2*time.Minute); err != nil {
		return c.failed(err, "node1-kubelet")
	}
	return nil
}

// deployCoreDNS applies CoreDNS and waits until it is available.
func (c Config) deployCoreDNS(ctx context.Context, cl client.Client) error {
	dns, err := decodeYAML(render.CoreDNSManifests(c.CoreDNSReplicas, c.Topology.DNSServiceIPs()))
	if err != nil {
		return err
	}
	if err := apply(ctx, cl, dns); err != nil {
		return err
	}
	if err := waitDeployment(ctx, cl, "kube-system", "coredns", 3*time.Minute); err != nil {
		return c.failed(err, "node1-kubelet")
	}
	return nil
}

// startRuntimes starts every node's containerd and imports the images into
// it, the nodes in parallel.
func (c Config) startRuntimes() error {
	nodes := c.Topology.NodeList()
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.startRuntime(n)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c Config) startRuntime(n topology.Node) error {
	name := n.Name + "-containerd"
	if err := c.start(daemon{name: name, netns: n.Netns, mountNS: c.mountNS(n), uts: c.utsNS(n.Name),
		args: []string{"containerd", "--config", c.nodeFile(n, "containerd.toml")}}); err != nil {
		return err
	}
	if err := poll.Until(context.Background(), time.Minute, pollInterval, func(context.Context) error {
		cmd := c.ctr(n, "version")
		_, err := run(cmd[0], cmd[1:]...)
		return err
	}); err != nil {
		return c.failed(fmt.Errorf("%s answering: %w", name, err), name)
	}
	return c.importImages(n)
}

// ctr is a ctr command against the node's containerd.
func (c Config) ctr(n topology.Node, args ...string) []string {
	return append([]string{"nsenter", "--net=" + netnsPath(n.Netns), "--mount=" + c.mountNS(n), "--",
		"ctr", "--address", render.ContainerdSocket, "--namespace", "k8s.io"}, args...)
}

// importImages imports the lab's image tarballs into the node's containerd.
func (c Config) importImages(n topology.Node) error {
	var tarballs []string
	for _, img := range images {
		tarballs = append(tarballs, filepath.Join(c.ImagesDir, img))
	}
	for _, tar := range append(tarballs, c.ExtraImages...) {
		cmd := c.ctr(n, "images", "import", tar)
		if _, err := run(cmd[0], cmd[1:]...); err != nil {
			return fmt.Errorf("node %s: import %s: %w", n.Name, tar, err)
		}
	}
	return nil
}

// failed adds where to look to an error.
func (c Config) failed(err error, log string) error {
	return fmt.Errorf("%w\n    see %s (all logs: %s); make lab-down removes the lab", err, c.logFile(log), c.LogDir)
}

// preflight checks that everything lab-up needs is there, before anything
// is made.
func (c Config) preflight() error {
	if os.Geteuid() != 0 {
		return errors.New("the lab needs root (network namespaces, mounts, cgroups)")
	}
	if err := c.checkVPP(); err != nil {
		return err
	}
	var missing []string
	for _, f := range []string{c.bin("kube-apiserver"), c.bin("kube-controller-manager"), c.bin("kube-scheduler"), c.bin("kubelet"), c.bin("kube-proxy"), c.kubectl(), c.Etcd, c.Agent, c.Self} {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, f)
		}
	}
	for _, img := range images {
		if _, err := os.Stat(filepath.Join(c.ImagesDir, img)); err != nil {
			missing = append(missing, filepath.Join(c.ImagesDir, img))
		}
	}
	for _, tar := range c.ExtraImages {
		if _, err := os.Stat(tar); err != nil {
			missing = append(missing, tar)
		}
	}
	for _, p := range []string{"ip", "nsenter", "unshare", "mount", "containerd", "containerd-shim-runc-v2", "runc", "ctr", "nft", "iptables", "sysctl"} {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing (make lab-up builds and installs them): %v", missing)
	}
	return nil
}

// Health lists what is wrong with a lab that should be up: dead daemons.
func (c Config) Health() []string {
	var problems []string
	names := []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "router", "external-agent"}
	for _, n := range c.Topology.NodeList() {
		names = append(names, n.Name+"-containerd", n.Name+"-kubelet")
		if n.Dataplane == topology.DataplaneVPP {
			names = append(names, vppDaemonName(n))
		}
		if c.ServiceProxy() == ProxyKubeProxy {
			names = append(names, kubeProxyName(n))
		}
	}
	for _, name := range names {
		if !c.alive(name) {
			problems = append(problems, name+" is not running (log: "+c.logFile(name)+")")
		}
	}
	return problems
}

// PrintAccess tells how to reach the lab and which proxy serves its
// services.
func (c Config) PrintAccess() {
	proxy := "vcoil (vcoild's service renderer; no kube-proxy)"
	if c.ServiceProxy() == ProxyKubeProxy {
		proxy = "kube-proxy (nftables mode; vcoild --service-proxy=false)"
	}
	fmt.Fprintf(c.Out, `
  services:    served by %s
  kubectl:     make lab-kubectl ARGS="get nodes -o wide"
               or: %s get pods -A
               or: ip netns exec %s %s --kubeconfig %s get nodes
  a program:   %s exec -- COMMAND   (runs COMMAND in the control plane's network namespace, KUBECONFIG set)
  lab.env:     %s
  logs:        %s
  remove:      make lab-down
`, proxy, c.path("kubectl"), topology.ControlPlaneNetns, c.kubectl(), c.AdminKubeconfig(), c.Self, c.EnvFile(), c.LogDir)
}
