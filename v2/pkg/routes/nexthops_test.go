package routes_test

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/routes"
)

func k8sNode(name string, ips ...string) corev1.Node {
	addrs := []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}}
	for _, ip := range ips {
		addrs = append(addrs, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: addrs}}
}

func addressBlock(name, node, cidr string) vcoilv2.AddressBlock {
	return vcoilv2.AddressBlock{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{vcoilv2.LabelNode: node}}, IPv4: ptr.To(cidr)}
}

func TestDualStackBlocksAreRoutedPerFamily(t *testing.T) {
	dual := addressBlock("default-0", "node1", "198.19.0.0/27")
	dual.IPv6 = ptr.To("2001:db8:19::/123")
	only6 := vcoilv2.AddressBlock{ObjectMeta: metav1.ObjectMeta{Name: "v6-0", Labels: map[string]string{vcoilv2.LabelNode: "node2"}}, IPv6: ptr.To("2001:db8:19::20/123")}
	// node3 has no IPv6 address: its IPv6 subnet gets no route.
	v4node := addressBlock("default-2", "node3", "198.19.0.64/27")
	v4node.IPv6 = ptr.To("2001:db8:19::40/123")
	got := routes.BlockNextHops([]vcoilv2.AddressBlock{dual, only6, v4node}, []corev1.Node{
		k8sNode("node1", "198.18.0.11", "2001:db8:18::11"), k8sNode("node2", "198.18.0.12", "2001:db8:18::12"), k8sNode("node3", "198.18.0.13"),
	})
	want := map[netip.Prefix]netip.Addr{
		netip.MustParsePrefix("198.19.0.0/27"):       netip.MustParseAddr("198.18.0.11"),
		netip.MustParsePrefix("2001:db8:19::/123"):   netip.MustParseAddr("2001:db8:18::11"),
		netip.MustParsePrefix("2001:db8:19::20/123"): netip.MustParseAddr("2001:db8:18::12"),
		netip.MustParsePrefix("198.19.0.64/27"):      netip.MustParseAddr("198.18.0.13"),
	}
	assertNextHops(t, got, want)
}

// The next hop is the node's first InternalIP of the family; its other
// addresses, and blocks of nodes that are not there, give no route.
func TestBlocksAreRoutedViaTheFirstInternalIPOfAKnownNode(t *testing.T) {
	n := k8sNode("node1", "198.18.0.11", "198.18.0.99")
	n.Status.Addresses = append([]corev1.NodeAddress{{Type: corev1.NodeExternalIP, Address: "203.0.113.1"}}, n.Status.Addresses...)
	got := routes.BlockNextHops(
		[]vcoilv2.AddressBlock{addressBlock("default-0", "node1", "198.19.0.0/27"), addressBlock("default-1", "gone", "198.19.0.32/27")},
		[]corev1.Node{n},
	)
	assertNextHops(t, got, map[netip.Prefix]netip.Addr{
		netip.MustParsePrefix("198.19.0.0/27"): netip.MustParseAddr("198.18.0.11"),
	})
}

func assertNextHops(t *testing.T, got, want map[netip.Prefix]netip.Addr) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("routes %v, want %v", got, want)
	}
	for dst, via := range want {
		if got[dst] != via {
			t.Errorf("%s via %s, want %s", dst, got[dst], via)
		}
	}
}
