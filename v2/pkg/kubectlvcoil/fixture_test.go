package kubectlvcoil

import (
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

var (
	addr   = netip.MustParseAddr
	prefix = netip.MustParsePrefix
	// now is the fixture's clock: node1's state was collected 2 s before.
	now = time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
)

func fixturePools() []vcoilv2.AddressPool {
	return []vcoilv2.AddressPool{
		{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: vcoilv2.AddressPoolSpec{Usage: vcoilv2.UsagePods, BlockSizeBits: 5,
			Subnets: []vcoilv2.SubnetSet{{IPv4: ptr.To("10.64.0.0/24"), IPv6: ptr.To("fd00:10:64::/120")}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "default-lb"}, Spec: vcoilv2.AddressPoolSpec{Usage: vcoilv2.UsageLoadBalancer,
			Subnets: []vcoilv2.SubnetSet{{IPv4: ptr.To("203.0.113.0/28")}}}},
		// An empty usage is Pods (an object stored before the field).
		{ObjectMeta: metav1.ObjectMeta{Name: "batch"}, Spec: vcoilv2.AddressPoolSpec{BlockSizeBits: 4,
			Subnets: []vcoilv2.SubnetSet{{IPv4: ptr.To("10.65.0.0/26")}, {IPv4: ptr.To("10.65.1.0/27")}}}},
	}
}

func block(name, pool, node, v4, v6 string, index int64, nodeSubnet bool) vcoilv2.AddressBlock {
	b := vcoilv2.AddressBlock{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{vcoilv2.LabelPool: pool, vcoilv2.LabelNode: node}},
		Index: index, NodeSubnet: nodeSubnet}
	if v4 != "" {
		b.IPv4 = ptr.To(v4)
	}
	if v6 != "" {
		b.IPv6 = ptr.To(v6)
	}
	return b
}

func fixtureBlocks() []vcoilv2.AddressBlock {
	return []vcoilv2.AddressBlock{
		block("default-0", "default", "node1", "10.64.0.0/27", "fd00:10:64::/123", 0, true),
		block("default-1", "default", "node2", "10.64.0.32/27", "fd00:10:64::20/123", 1, true),
		block("default-2", "default", "node1", "10.64.0.64/27", "fd00:10:64::40/123", 2, false),
		block("batch-0", "batch", "node2", "10.65.0.0/28", "", 0, false),
	}
}

func fixtureServices() []corev1.Service {
	lb := func(ns, name, ip string) corev1.Service {
		s := corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer}}
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
		return s
	}
	return []corev1.Service{
		lb("shop", "web", "203.0.113.1"),
		lb("shop", "api", "203.0.113.2"),
		// Not from a vcoil pool: not counted.
		lb("other", "elsewhere", "198.51.100.7"),
		{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "internal"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}},
	}
}

// fixtureState is node1's state: a Linux node with two pods, a Service
// one of them backs, a policy isolating it and an nftables table.
func fixtureState() *nodestate.State {
	return &nodestate.State{
		APIVersion: nodestate.APIVersion, Node: "node1", Dataplane: "linux", Version: "v2.3.0",
		Collected:   now.Add(-2 * time.Second),
		NodeSubnet:  []netip.Prefix{prefix("10.64.0.0/27"), prefix("fd00:10:64::/123")},
		NATLoopback: []netip.Addr{addr("10.64.0.30"), addr("fd00:10:64::1f")},
		Blocks: []nodestate.Block{
			{Name: "default-0", Pool: "default", Prefixes: []netip.Prefix{prefix("10.64.0.0/27"), prefix("fd00:10:64::/123")}, NodeSubnet: true, InUse: 3, Free: 27},
			{Name: "default-2", Pool: "default", Prefixes: []netip.Prefix{prefix("10.64.0.64/27"), prefix("fd00:10:64::40/123")}, InUse: 1, Free: 31, Draining: true},
		},
		Pods: []nodestate.Pod{
			{Namespace: "shop", Name: "web-1", ContainerID: "4f1c0e9a7b2d11aa22bb33cc", IfName: "eth0", IPs: []netip.Addr{addr("10.64.0.5"), addr("fd00:10:64::5")},
				Pool: "default", Block: "default-0", Interface: &nodestate.Interface{Kind: "veth", Name: "vc4f1c0e9a7b2d", Index: 17}},
			{Namespace: "shop", Name: "client", ContainerID: "9e8d7c6b5a4f", IfName: "eth0", IPs: []netip.Addr{addr("10.64.0.66")},
				Pool: "default", Block: "default-2", Interface: &nodestate.Interface{Kind: "veth", Name: "vc9e8d7c6b5a4f", Index: 21}},
		},
		Services: &nodestate.Services{Renderer: "nftables",
			Sync: nodestate.Sync{Last: now.Add(-5 * time.Second), Duration: 0.012, Attempted: now.Add(-5 * time.Second)},
			Frontends: []nodestate.Frontend{
				{Service: "shop/web", PortName: "http", Kind: nodestate.FrontendClusterIP, Address: addr("10.96.0.10"), Port: 80, Protocol: "TCP",
					Backends: []nodestate.Backend{{Address: addr("10.64.0.5"), Port: 8080, Node: "node1", Local: true}, {Address: addr("10.64.0.40"), Port: 8080, Node: "node2"}}},
				{Service: "shop/empty", Kind: nodestate.FrontendClusterIP, Address: addr("10.96.0.11"), Port: 80, Protocol: "TCP", NoBackends: "reject"},
				{Service: "shop/web", PortName: "http", Kind: nodestate.FrontendLoadBalancer, Address: addr("203.0.113.1"), Port: 80, Protocol: "TCP", Local: true, Affinity: 10800,
					Backends: []nodestate.Backend{{Address: addr("10.64.0.5"), Port: 8080, Node: "node1", Local: true}},
					FromNode: &nodestate.NodeTraffic{Backends: []nodestate.Backend{{Address: addr("10.64.0.5"), Port: 8080, Node: "node1", Local: true}, {Address: addr("10.64.0.40"), Port: 8080, Node: "node2"}}}},
			},
			Rejected: []nodestate.Rejected{{Service: "shop/odd", Reason: "port 0 is not a port"}},
		},
		Policies: &nodestate.Policies{Renderer: "nftables",
			Sync:          nodestate.Sync{Last: now.Add(-7 * time.Second), Duration: 0.004, Attempted: now.Add(-1 * time.Second), Error: "nft: busy", Errors: 1},
			AlwaysAllowed: []netip.Addr{addr("198.18.0.1"), addr("10.64.0.30")},
			Denied: []nodestate.Denied{
				{Tier: "admin", Policy: "no-metadata", Direction: "egress", Packets: 12},
				{Tier: "networkpolicy", Group: "g0", Direction: "ingress", Packets: 3},
				{Tier: "networkpolicy", Policy: "default/web-ingress", Direction: "ingress", Packets: 3},
			},
			Pods: []nodestate.PodRules{
				{Namespace: "shop", Name: "client", IPs: []netip.Addr{addr("10.64.0.66")},
					AdminEgress: []nodestate.TierRule{
						{Rule: nodestate.Rule{Action: "accept", Protocol: "any", Dst: prefix("198.18.0.1/32")}},
						{Rule: nodestate.Rule{Action: "deny", Protocol: "any", Dst: prefix("169.254.169.254/32")}, Policy: "no-metadata", RuleName: "metadata"},
					},
					BaselineEgress: []nodestate.TierRule{
						{Rule: nodestate.Rule{Action: "pass", Protocol: "tcp", Dst: prefix("10.64.0.0/16"), DstPorts: &nodestate.PortRange{First: 443, Last: 443}}, Policy: "tenants", RuleName: "0"},
					}},
				{Namespace: "shop", Name: "web-1", IPs: []netip.Addr{addr("10.64.0.5"), addr("fd00:10:64::5")}, Ingress: []nodestate.Rule{
					{Action: "permit", Protocol: "tcp", Src: prefix("10.64.0.66/32"), DstPorts: &nodestate.PortRange{First: 8080, Last: 8080}},
					{Action: "deny", Protocol: "any"},
				}, AdminIngress: []nodestate.TierRule{
					{Rule: nodestate.Rule{Action: "pass", Protocol: "any", Src: prefix("10.64.0.0/26")}, Policy: "tenants", RuleName: "same-team"},
				}},
			}},
		Egress: &nodestate.Egress{Pods: []nodestate.EgressPod{
			{Namespace: "shop", Name: "client", Egresses: []nodestate.EgressUse{{Egress: "shop/nat", Encapsulation: "fou", Router: addr("10.96.0.50"),
				Routers: []netip.Addr{addr("10.96.0.50"), addr("fd00:10:96::50")}, Destinations: []netip.Prefix{prefix("0.0.0.0/0"), prefix("::/0")}}}},
			{Namespace: "shop", Name: "web-1", Error: "egress shop/missing not found"},
		}},
		NFTables: []nodestate.NFTable{{Family: "inet", Name: "vcoil-policy", Text: "table inet vcoil-policy {\n\tchain forward {\n\t}\n}\n"}},
		Errors:   []string{"egress: not running"},
	}
}

func fixturePod() *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1"}, Spec: corev1.PodSpec{NodeName: "node1"}}
	p.Status.PodIPs = []corev1.PodIP{{IP: "10.64.0.5"}, {IP: "fd00:10:64::5"}}
	return p
}
