package topology

import (
	"net/netip"
	"testing"
)

func TestNodesGetDistinctAddressesOnTheFabric(t *testing.T) {
	topo, err := New(MaxNodes)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[netip.Addr]bool{FabricIP: true, ControlPlaneIP: true, DeadNameserver: true}
	for _, n := range topo.NodeList() {
		if !FabricNet.Contains(n.IP) || seen[n.IP] || n.IP == FabricNet.Addr() {
			t.Errorf("node %s: address %s is not a free host address of %s", n.Name, n.IP, FabricNet)
		}
		seen[n.IP] = true
		if len(n.Netns) > 15 && len(n.Port) > 15 {
			t.Errorf("node %s: link name %s too long", n.Name, n.Port)
		}
	}
	if n := topo.NodeList()[0]; n.Name != "node1" || n.IP.String() != "198.18.0.11" || n.Netns != "vcoil-lab-node1" {
		t.Errorf("first node %+v", n)
	}
}

func TestNodeCountIsBounded(t *testing.T) {
	for _, n := range []int{0, -1, MaxNodes + 1} {
		if _, err := New(n); err == nil {
			t.Errorf("New(%d) accepted", n)
		}
	}
}

func TestRangesDoNotOverlapAndAvoidTheMachinesNetwork(t *testing.T) {
	machine := netip.MustParsePrefix("192.0.2.0/24")
	// The e2e suite's own small pools use 198.18.64.0/24 (its default
	// VCOIL_E2E_SPARE_CIDR).
	suiteSpare := netip.MustParsePrefix("198.18.64.0/24")
	ranges := []netip.Prefix{FabricNet, ExternalNet, ServiceCIDR, PodPool, LBPool, suiteSpare}
	for i, a := range ranges {
		if a.Overlaps(machine) {
			t.Errorf("%s overlaps the machine's network", a)
		}
		for _, b := range ranges[i+1:] {
			if a.Overlaps(b) {
				t.Errorf("%s overlaps %s", a, b)
			}
		}
	}
	if !ServiceCIDR.Contains(APIServiceIP) || !ServiceCIDR.Contains(DNSServiceIP) || !ExternalNet.Contains(ExternalIP) {
		t.Error("a fixed address is outside its range")
	}
}
