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
	ranges := []netip.Prefix{FabricNet, ExternalNet, ServiceCIDR, PodPool, LBPool, suiteSpare,
		FabricNet6, ExternalNet6, ServiceCIDR6, PodPool6, LBPool6,
		// The machine's own IPv6 network and the unique local range it
		// comes from.
		netip.MustParsePrefix("fd00::/8")}
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
	if !ServiceCIDR.Contains(APIServiceIP) || !ServiceCIDR.Contains(DNSServiceIP) || !ExternalNet.Contains(ExternalIP) ||
		!ServiceCIDR6.Contains(DNSServiceIP6) || !ExternalNet6.Contains(ExternalIP6) || !ExternalNet6.Contains(ExternalGW6) ||
		!FabricNet6.Contains(FabricIP6) || !FabricNet6.Contains(ControlPlaneIP6) {
		t.Error("a fixed address is outside its range")
	}
	// A dual-stack pool pairs blocks by index: both subnets need the same
	// number of host bits.
	if 32-PodPool.Bits() != 128-PodPool6.Bits() {
		t.Errorf("pod pools %s and %s differ in host bits", PodPool, PodPool6)
	}
}

func TestDualStackNodesGetAddressesOfBothFamilies(t *testing.T) {
	v4, err := New(3)
	if err != nil {
		t.Fatal(err)
	}
	if v4, err = v4.WithIPFamily(""); err != nil || v4.Dual() {
		t.Fatalf("default family: dual=%v, %v", v4.Dual(), err)
	}
	if n := v4.NodeList()[0]; n.IP6.IsValid() || len(n.IPs()) != 1 || len(v4.ServiceCIDRs()) != 1 {
		t.Errorf("IPv4 lab: node %+v, service ranges %v", n, v4.ServiceCIDRs())
	}
	dual, err := v4.WithIPFamily(IPFamilyDual)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[netip.Addr]bool{FabricIP6: true, ControlPlaneIP6: true}
	for _, n := range dual.NodeList() {
		if !FabricNet6.Contains(n.IP6) || seen[n.IP6] {
			t.Errorf("node %s: IPv6 address %s is not a free host address of %s", n.Name, n.IP6, FabricNet6)
		}
		seen[n.IP6] = true
		if ips := n.IPs(); len(ips) != 2 || !ips[0].Is4() || !ips[1].Is6() {
			t.Errorf("node %s: addresses %v, want IPv4 then IPv6", n.Name, ips)
		}
	}
	if n := dual.NodeList()[1]; n.IP6.String() != "2001:db8:18::12" {
		t.Errorf("node2's IPv6 address %s, want 2001:db8:18::12 (mirrors 198.18.0.12)", n.IP6)
	}
	if got := dual.ServiceCIDRs(); len(got) != 2 || got[1] != ServiceCIDR6 {
		t.Errorf("service ranges %v", got)
	}
	if _, err := v4.WithIPFamily("ipv6"); err == nil {
		t.Error("single-stack IPv6 accepted")
	}
}
