package suite

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// family is one IP family of the cluster. In a dual-stack cluster the suite
// runs its connectivity matrix once per family (the IPv6 rows in a group
// of their own), and its policy and Egress cases over IPv6 as well.
type family struct{ v6 bool }

var (
	ipv4 = family{}
	ipv6 = family{v6: true}
)

func (f family) String() string {
	if f.v6 {
		return "IPv6"
	}
	return "IPv4"
}

// k8s is the family as Services name it.
func (f family) k8s() corev1.IPFamily {
	if f.v6 {
		return corev1.IPv6Protocol
	}
	return corev1.IPv4Protocol
}

func (f family) has(a netip.Addr) bool { return a.IsValid() && a.Unmap().Is6() == f.v6 && !a.Is4In6() }

// first is the first of addrs of the family, or the zero Addr.
func (f family) first(addrs ...string) netip.Addr {
	for _, s := range addrs {
		if a, err := netip.ParseAddr(s); err == nil && f.has(a) {
			return a
		}
	}
	return netip.Addr{}
}

// group is the report group of the family's rows: IPv4's keep the names
// they have in a single-stack cluster.
func (f family) group(g string) string {
	if f.v6 {
		return g + " (IPv6)"
	}
	return g
}

// prefix starts the names of the objects the suite makes for the family,
// so that both families' Services live side by side.
func (f family) prefix() string {
	if f.v6 {
		return "v6-"
	}
	return ""
}

// podIP is the pod's address of the family.
func (f family) podIP(p *corev1.Pod) netip.Addr {
	addrs := []string{p.Status.PodIP}
	for _, a := range p.Status.PodIPs {
		addrs = append(addrs, a.IP)
	}
	return f.first(addrs...)
}

// nodeIP is the node's first InternalIP of the family.
func (f family) nodeIP(n *corev1.Node) netip.Addr {
	var addrs []string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			addrs = append(addrs, a.Address)
		}
	}
	return f.first(addrs...)
}

// families are the IP families the suite's pods and both its nodes have an
// address of, IPv4 first: the families every row can run in.
func (w *world) families() []family {
	var out []family
	for _, f := range []family{ipv4, ipv6} {
		if f.podIP(w.a1).IsValid() && f.podIP(w.b1).IsValid() && f.nodeIP(w.nodeA).IsValid() && f.nodeIP(w.nodeB).IsValid() {
			out = append(out, f)
		}
	}
	return out
}

// external is HOST:PORT of the TCP echo server outside the cluster in the
// family: VCOIL_E2E_EXTERNAL for IPv4, VCOIL_E2E_EXTERNAL6 for IPv6 (the
// same host's other address); "" when there is none.
func (s settings) externalOf(f family) string {
	if f.v6 {
		return s.external6
	}
	return s.external
}

// noServicesOf says why Services of family f cannot be checked on the
// suite's nodes, or "" when they can: a VPP node whose vcoild renders
// Services with NAT44-ED (the default) serves IPv4 alone; with the cnat
// renderer (--vpp-service-renderer=cnat) it serves both families.
func (k *cluster) noServicesOf(t *testing.T, w *world, f family) string {
	t.Helper()
	if vpp := k.vppNodesOf(t, w, f, false); len(vpp) > 0 {
		return fmt.Sprintf("IPv6 Services are not served on VPP nodes with the NAT44 renderer (%s): NAT44-ED translates IPv4 only (docs/vpp-services.md)", strings.Join(vpp, ", "))
	}
	return ""
}

// noHostPortsOf says why hostPorts of family f cannot be checked: VPP nodes
// serve them with NAT44-ED, IPv4 only, whatever their Service renderer.
func (k *cluster) noHostPortsOf(t *testing.T, w *world, f family) string {
	t.Helper()
	if vpp := k.vppNodesOf(t, w, f, true); len(vpp) > 0 {
		return fmt.Sprintf("IPv6 hostPorts are not served on VPP nodes (%s): vcoild's VPP dataplane maps hostPorts with NAT44-ED, IPv4 only (docs/vpp.md)", strings.Join(vpp, ", "))
	}
	return ""
}

// vppNodesOf lists the suite's two nodes whose vcoild runs the VPP
// dataplane and cannot serve family f: for IPv6, every VPP node when
// hostPorts, else those without the cnat renderer; none for IPv4.
func (k *cluster) vppNodesOf(t *testing.T, w *world, f family, hostPorts bool) []string {
	t.Helper()
	if !f.v6 {
		return nil
	}
	var pods corev1.PodList
	if err := k.c.List(ctx(t, 30*time.Second), &pods, client.MatchingLabels{"app.kubernetes.io/name": "vcoild"}); err != nil {
		t.Fatal(err)
	}
	var vpp []string
	for _, p := range pods.Items {
		if (p.Spec.NodeName != w.nodeA.Name && p.Spec.NodeName != w.nodeB.Name) || p.DeletionTimestamp != nil || len(p.Spec.Containers) == 0 {
			continue
		}
		args := p.Spec.Containers[0].Args
		if !slices.Contains(args, "--dataplane=vpp") || slices.Contains(vpp, p.Spec.NodeName) {
			continue
		}
		if hostPorts || !slices.Contains(args, "--vpp-service-renderer=cnat") {
			vpp = append(vpp, p.Spec.NodeName)
		}
	}
	slices.Sort(vpp)
	return vpp
}
