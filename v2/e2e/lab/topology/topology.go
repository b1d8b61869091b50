// Package topology names the local cluster's namespaces, nodes and addresses.
// It is pure data: every other part of the lab (the network it builds, the
// certificates, the configurations, the e2e suite through lab.env) reads its
// addresses from here.
//
// The addresses come from ranges reserved for documentation and benchmarks,
// never from the machine's own network (192.0.2.0/24):
//
//	198.18.0.0/24   the fabric: .1 the fabric router, .2 the control plane, .11... the nodes
//	198.18.16.0/20  Service ClusterIPs (.1 kubernetes, .10 cluster DNS)
//	198.18.32.0/24  the default LoadBalancer AddressPool (default-lb)
//	198.18.64.0/24  left free: the e2e suite's own small pools
//	198.19.0.0/16   the default AddressPool (blocks of 32 addresses)
//	203.0.113.0/24  the external network: .1 the fabric, .10 the external host
//
// A dual-stack lab (IPFamilyDual) adds IPv6 from the documentation range
// 2001:db8::/32, mirroring the IPv4 plan (the machine's own IPv6 network is
// elsewhere, and nothing of the lab is routed out of it):
//
//	2001:db8:18::/64       the fabric: ::1, ::2 the control plane, ::11... the nodes
//	2001:db8:18:16::/112   Service ClusterIPs (::a cluster DNS)
//	2001:db8:18:32::/120   the default LoadBalancer AddressPool's IPv6 subnet
//	2001:db8:19::/112      the default AddressPool's IPv6 subnet (16 host bits, as 198.19.0.0/16)
//	2001:db8:113::/64      the external network: ::1 the fabric, ::10 the external host
package topology

import (
	"fmt"
	"net/netip"
)

// Prefix starts the name of everything the lab creates on the machine:
// network namespaces, cgroups.
const Prefix = "vcoil-lab"

// Fixed addresses and ranges of the lab.
var (
	FabricNet      = netip.MustParsePrefix("198.18.0.0/24")
	FabricIP       = netip.MustParseAddr("198.18.0.1")
	ControlPlaneIP = netip.MustParseAddr("198.18.0.2")
	// DeadNameserver is the nameserver in the nodes' resolv.conf: nothing
	// answers there, so no DNS query leaves the lab.
	DeadNameserver = netip.MustParseAddr("198.18.0.254")
	firstNodeHost  = 11

	ExternalNet = netip.MustParsePrefix("203.0.113.0/24")
	ExternalGW  = netip.MustParseAddr("203.0.113.1")
	ExternalIP  = netip.MustParseAddr("203.0.113.10")

	ServiceCIDR  = netip.MustParsePrefix("198.18.16.0/20")
	APIServiceIP = netip.MustParseAddr("198.18.16.1")
	DNSServiceIP = netip.MustParseAddr("198.18.16.10")

	PodPool = netip.MustParsePrefix("198.19.0.0/16")
	// LBPool is the default-lb AddressPool's: Services of type
	// LoadBalancer get their addresses from it, and the fabric router
	// learns them from the nodes that announce them.
	LBPool = netip.MustParsePrefix("198.18.32.0/24")
)

// The IPv6 addresses and ranges of a dual-stack lab.
var (
	FabricNet6      = netip.MustParsePrefix("2001:db8:18::/64")
	FabricIP6       = netip.MustParseAddr("2001:db8:18::1")
	ControlPlaneIP6 = netip.MustParseAddr("2001:db8:18::2")

	ExternalNet6 = netip.MustParsePrefix("2001:db8:113::/64")
	ExternalGW6  = netip.MustParseAddr("2001:db8:113::1")
	ExternalIP6  = netip.MustParseAddr("2001:db8:113::10")

	ServiceCIDR6  = netip.MustParsePrefix("2001:db8:18:16::/112")
	DNSServiceIP6 = netip.MustParseAddr("2001:db8:18:16::a")

	// PodPool6 has as many host bits as PodPool: the Nth IPv4 block pairs
	// with the Nth IPv6 block.
	PodPool6 = netip.MustParsePrefix("2001:db8:19::/112")
	LBPool6  = netip.MustParsePrefix("2001:db8:18:32::/120")
)

// The IP families a lab can have.
const (
	// IPFamilyIPv4: everything IPv4 only (the default).
	IPFamilyIPv4 = "ipv4"
	// IPFamilyDual: nodes, pods, Services, the external host and the
	// cluster DNS in both families, IPv4 first.
	IPFamilyDual = "dual"
)

const (
	// BlockSizeBits of the default AddressPool: blocks of 32 addresses.
	BlockSizeBits = 5
	APIServerPort = 6443
	ClusterDomain = "cluster.local"
	// MaxNodes keeps node addresses inside the fabric's /24.
	MaxNodes = 50

	// Ports of the agent on the external host (and of the demo's pods).
	AgentTCPPort  = 8080
	AgentUDPPort  = 8081
	AgentHTTPPort = 8082
)

// The dataplanes a node can run: vcoild's Linux dataplane, or VPP (the
// node's own VPP holds its fabric address; see docs/lab.md).
const (
	DataplaneLinux = "linux"
	DataplaneVPP   = "vpp"
)

// Topology is one lab: how many worker nodes it has and their dataplanes.
type Topology struct {
	Nodes int
	// IPFamily is IPFamilyIPv4 (also when empty) or IPFamilyDual.
	IPFamily string
	// Dataplanes are given to the nodes in turn: [vpp] makes every node a
	// VPP node, [linux vpp] alternates, node1 on Linux. Empty: all Linux.
	Dataplanes []string
}

// New checks the node count and the dataplanes.
func New(nodes int, dataplanes ...string) (Topology, error) {
	if nodes < 1 || nodes > MaxNodes {
		return Topology{}, fmt.Errorf("%d nodes: the lab has 1 to %d", nodes, MaxNodes)
	}
	for _, d := range dataplanes {
		if d != DataplaneLinux && d != DataplaneVPP {
			return Topology{}, fmt.Errorf("dataplane %q: want %s or %s", d, DataplaneLinux, DataplaneVPP)
		}
	}
	return Topology{Nodes: nodes, Dataplanes: dataplanes}, nil
}

// WithIPFamily returns t with the IP family set: ipv4 (or empty) or dual.
func (t Topology) WithIPFamily(family string) (Topology, error) {
	switch family {
	case "", IPFamilyIPv4:
		t.IPFamily = IPFamilyIPv4
	case IPFamilyDual:
		t.IPFamily = IPFamilyDual
	default:
		return t, fmt.Errorf("IP family %q: want %s or %s (a single-stack IPv6 lab is not built)", family, IPFamilyIPv4, IPFamilyDual)
	}
	return t, nil
}

// Dual tells whether the lab is dual-stack.
func (t Topology) Dual() bool { return t.IPFamily == IPFamilyDual }

// ServiceCIDRs are the Service ranges, IPv4 first.
func (t Topology) ServiceCIDRs() []netip.Prefix {
	if t.Dual() {
		return []netip.Prefix{ServiceCIDR, ServiceCIDR6}
	}
	return []netip.Prefix{ServiceCIDR}
}

// DNSServiceIPs are the cluster DNS's ClusterIPs, IPv4 first.
func (t Topology) DNSServiceIPs() []netip.Addr {
	if t.Dual() {
		return []netip.Addr{DNSServiceIP, DNSServiceIP6}
	}
	return []netip.Addr{DNSServiceIP}
}

// ControlPlaneIPs are the control plane's fabric addresses, IPv4 first.
func (t Topology) ControlPlaneIPs() []netip.Addr {
	if t.Dual() {
		return []netip.Addr{ControlPlaneIP, ControlPlaneIP6}
	}
	return []netip.Addr{ControlPlaneIP}
}

// HasVPP tells whether any node runs VPP.
func (t Topology) HasVPP() bool {
	return len(t.VPPNodes()) > 0
}

// VPPNodes are the nodes that run VPP.
func (t Topology) VPPNodes() []Node {
	var out []Node
	for _, n := range t.NodeList() {
		if n.Dataplane == DataplaneVPP {
			out = append(out, n)
		}
	}
	return out
}

// Node is one worker node.
type Node struct {
	// Name is the Kubernetes node name ("node1").
	Name string
	// Netns is the node's network namespace ("vcoil-lab-node1").
	Netns string
	// IP is the node's InternalIP on the fabric.
	IP netip.Addr
	// IP6 is the node's IPv6 InternalIP in a dual-stack lab, else invalid.
	IP6 netip.Addr
	// Port is the name of the node's link on the fabric bridge.
	Port string
	// Dataplane is DataplaneLinux or DataplaneVPP.
	Dataplane string
}

// NodeList returns the worker nodes, node1 first.
func (t Topology) NodeList() []Node {
	nodes := make([]Node, t.Nodes)
	for i := range nodes {
		name := fmt.Sprintf("node%d", i+1)
		nodes[i] = Node{
			Name:      name,
			Netns:     Prefix + "-" + name,
			IP:        netip.AddrFrom4([4]byte{198, 18, 0, byte(firstNodeHost + i)}),
			Port:      "p-" + name,
			Dataplane: DataplaneLinux,
		}
		if len(t.Dataplanes) > 0 {
			nodes[i].Dataplane = t.Dataplanes[i%len(t.Dataplanes)]
		}
		if t.Dual() {
			// ::11 for .11: the same digits, read as hexadecimal.
			nodes[i].IP6 = netip.MustParseAddr(fmt.Sprintf("2001:db8:18::%d", firstNodeHost+i))
		}
	}
	return nodes
}

// IPs are the node's InternalIPs, IPv4 first.
func (n Node) IPs() []netip.Addr {
	if n.IP6.IsValid() {
		return []netip.Addr{n.IP, n.IP6}
	}
	return []netip.Addr{n.IP}
}

// Network namespaces besides the nodes'.
const (
	FabricNetns       = Prefix + "-fabric"
	ControlPlaneNetns = Prefix + "-cp"
	ExternalNetns     = Prefix + "-ext"
)

// Netns lists every network namespace of the lab.
func (t Topology) Netns() []string {
	out := []string{FabricNetns, ControlPlaneNetns, ExternalNetns}
	for _, n := range t.NodeList() {
		out = append(out, n.Netns)
	}
	return out
}

// APIServerURL is where the apiserver listens, reachable from every lab
// namespace.
func APIServerURL() string {
	return fmt.Sprintf("https://%s:%d", ControlPlaneIP, APIServerPort)
}
