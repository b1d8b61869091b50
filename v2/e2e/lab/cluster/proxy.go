package cluster

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vcoil/vcoil/v2/e2e/lab/topology"
	"github.com/vcoil/vcoil/v2/internal/poll"
)

// The service proxies a lab can run: vcoil's own renderer (in vcoild), or
// kube-proxy in nftables mode with vcoil's renderer off. A node never runs
// both: their rules would fight over the same packets.
const (
	ProxyVcoil     = "vcoil"
	ProxyKubeProxy = "kube-proxy"
)

// kubeProxyTables are kube-proxy's nftables tables in a node's namespace
// (nftables mode), and vcoilServicesTable is vcoil's (inet family).
var kubeProxyTables = [][2]string{{"ip", "kube-proxy"}, {"ip6", "kube-proxy"}}

const vcoilServicesTable = "vcoil-services"

// serviceProxy says which proxy this configuration runs.
func (c Config) serviceProxy() string {
	if c.KubeProxy {
		return ProxyKubeProxy
	}
	return ProxyVcoil
}

// recordServiceProxy writes which proxy the lab runs, for status and
// health, which run later without lab-up's flags.
func (c Config) recordServiceProxy() error {
	return os.WriteFile(c.proxyFile(), []byte(c.serviceProxy()+"\n"), 0o644)
}

// ServiceProxy tells which proxy the running lab was brought up with.
func (c Config) ServiceProxy() string {
	b, err := os.ReadFile(c.proxyFile())
	if err != nil {
		return c.serviceProxy()
	}
	return strings.TrimSpace(string(b))
}

func kubeProxyName(n topology.Node) string { return n.Name + "-kube-proxy" }

// StartKubeProxy runs kube-proxy (nftables mode) on the node, in its
// network and mount namespaces, as lab-up does with LAB_KUBE_PROXY=1.
func (c Config) StartKubeProxy(n topology.Node) error {
	return c.start(daemon{name: kubeProxyName(n), netns: n.Netns, mountNS: c.mountNS(n), uts: c.utsNS(n.Name),
		args: []string{c.bin("kube-proxy"), "--config=" + c.nodeFile(n, "kube-proxy.yaml")}})
}

// KubeProxyPID returns the PID of the node's kube-proxy, if it runs.
func (c Config) KubeProxyPID(n topology.Node) (int, bool) {
	if !c.alive(kubeProxyName(n)) {
		return 0, false
	}
	pid, _, _ := readPidFile(c.path("pids", kubeProxyName(n)))
	// nsenter execs kube-proxy: the recorded PID is kube-proxy's.
	return pid, true
}

// StopKubeProxy kills the node's kube-proxy and removes its nftables
// tables, so that the node's packets meet no stale kube-proxy rule once
// vcoil renders services there again. A node without kube-proxy is fine.
func (c Config) StopKubeProxy(n topology.Node) error {
	if pid, ok := c.KubeProxyPID(n); ok {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return fmt.Errorf("stop kube-proxy on %s: %w", n.Name, err)
		}
		// Its tables go once it can no longer write them.
		if err := poll.Until(context.Background(), 10*time.Second, 20*time.Millisecond, func(context.Context) error {
			if c.alive(kubeProxyName(n)) {
				return fmt.Errorf("kube-proxy %d still runs", pid)
			}
			return nil
		}); err != nil {
			return fmt.Errorf("stop kube-proxy on %s: %w", n.Name, err)
		}
	}
	_ = os.Remove(c.path("pids", kubeProxyName(n)))
	return DeleteKubeProxyTables(n)
}

// DeleteKubeProxyTables removes kube-proxy's nftables tables from the
// node's network namespace, if there are any.
func DeleteKubeProxyTables(n topology.Node) error {
	for _, t := range kubeProxyTables {
		if out, err := run("nsenter", "--net="+netnsPath(n.Netns), "--", "nft", "delete", "table", t[0], t[1]); err != nil &&
			!strings.Contains(out, "No such file or directory") {
			return fmt.Errorf("delete nftables table %s %s on %s: %w", t[0], t[1], n.Name, err)
		}
	}
	return nil
}

// withServiceProxyArgs turns vcoil's service renderer off in vcoild's
// DaemonSet when kube-proxy serves the lab's services (vcoild renders them
// by default).
func (c Config) withServiceProxyArgs(objs []*unstructured.Unstructured) error {
	if !c.KubeProxy {
		return nil
	}
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" || o.GetName() != "vcoil-daemon" {
			continue
		}
		// In place: kustomize's objects hold Go ints, which the copying
		// accessors refuse.
		containers, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "template", "spec", "containers")
		list, _ := containers.([]any)
		if len(list) == 0 {
			return fmt.Errorf("vcoild's DaemonSet in %s has no containers", c.Overlay)
		}
		vcoild, ok := list[0].(map[string]any)
		if !ok {
			return fmt.Errorf("vcoild's container in %s is not an object", c.Overlay)
		}
		args, _ := vcoild["args"].([]any)
		vcoild["args"] = append(args, "--service-proxy=false")
		return nil
	}
	return fmt.Errorf("the overlay %s has no DaemonSet vcoil-daemon", c.Overlay)
}

// withVPPServiceArgs gives the VPP nodes' vcoild the service renderer
// VPPServices names; cnat serves both families, so in a dual-stack lab it
// gets the IPv6 service CIDR beside the overlay's IPv4 one.
func (c Config) withVPPServiceArgs(objs []*unstructured.Unstructured) error {
	switch c.VPPServices {
	case "", "nat44":
		return nil
	case "cnat":
	default:
		return fmt.Errorf("VPP service renderer %q: want nat44 or cnat", c.VPPServices)
	}
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" || o.GetName() != "vcoil-daemon-vpp" {
			continue
		}
		containers, _, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "template", "spec", "containers")
		list, _ := containers.([]any)
		if len(list) == 0 {
			return fmt.Errorf("vcoild's VPP DaemonSet in %s has no containers", c.Overlay)
		}
		vcoild, ok := list[0].(map[string]any)
		if !ok {
			return fmt.Errorf("vcoild's VPP container in %s is not an object", c.Overlay)
		}
		args, _ := vcoild["args"].([]any)
		args = append(args, "--vpp-service-renderer=cnat")
		if c.Topology.Dual() {
			args = append(args, "--service-cidr="+topology.ServiceCIDR6.String())
		}
		vcoild["args"] = args
		return nil
	}
	return fmt.Errorf("the overlay %s has no DaemonSet vcoil-daemon-vpp (VPP service renderer %s)", c.Overlay, c.VPPServices)
}
