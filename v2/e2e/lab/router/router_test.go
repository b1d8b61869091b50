package router

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

func node(name string, ips ...string) corev1.Node {
	addrs := []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: name}}
	for _, ip := range ips {
		addrs = append(addrs, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip})
	}
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: addrs}}
}

func block(name, node, cidr string) vcoilv2.AddressBlock {
	return vcoilv2.AddressBlock{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{vcoilv2.LabelNode: node}}, IPv4: ptr.To(cidr)}
}

func TestEachBlockIsRoutedViaItsNode(t *testing.T) {
	deleting := block("default-3", "node1", "198.19.0.96/27")
	deleting.DeletionTimestamp = &metav1.Time{}
	got := DesiredRoutes(
		[]vcoilv2.AddressBlock{
			block("default-0", "node1", "198.19.0.0/27"),
			block("default-1", "node2", "198.19.0.32/27"),
			block("default-2", "gone", "198.19.0.64/27"),
			deleting,
			{ObjectMeta: metav1.ObjectMeta{Name: "v6", Labels: map[string]string{vcoilv2.LabelNode: "node1"}}},
		},
		[]corev1.Node{node("node1", "198.18.0.11"), node("node2", "198.18.0.12")},
	)
	want := map[netip.Prefix]netip.Addr{
		netip.MustParsePrefix("198.19.0.0/27"):  netip.MustParseAddr("198.18.0.11"),
		netip.MustParsePrefix("198.19.0.32/27"): netip.MustParseAddr("198.18.0.12"),
	}
	if len(got) != len(want) {
		t.Fatalf("routes %v, want %v", got, want)
	}
	for dst, via := range want {
		if got[dst] != via {
			t.Errorf("%s via %s, want %s", dst, got[dst], via)
		}
	}
}
