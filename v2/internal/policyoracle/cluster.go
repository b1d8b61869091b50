package policyoracle

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	cnp "sigs.k8s.io/network-policy-api/apis/v1beta1"
)

// Cluster is the state a node's policy stack sees, as plain values.
type Cluster struct {
	// Node is the name of the node whose rules are evaluated.
	Node          string
	NodeAddresses []netip.Addr
	NATLoopback   []netip.Addr
	Namespaces    []*corev1.Namespace
	Pods          []*corev1.Pod
	Policies      []*networkingv1.NetworkPolicy
	// ClusterPolicies are the ClusterNetworkPolicies (both tiers).
	ClusterPolicies []*cnp.ClusterNetworkPolicy
	// External are addresses outside the cluster, to sample connections with.
	External []netip.Addr
}

// Addresses returns every address worth sampling: pods, this node,
// its NAT loopback and the external ones.
func (c *Cluster) Addresses() []netip.Addr {
	var out []netip.Addr
	for _, p := range c.Pods {
		out = append(out, PodAddresses(p)...)
	}
	out = append(out, c.NodeAddresses...)
	out = append(out, c.NATLoopback...)
	out = append(out, c.External...)
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

// String prints the cluster compactly, for failure messages.
func (c *Cluster) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "node %s addresses %v NAT loopback %v\n", c.Node, c.NodeAddresses, c.NATLoopback)
	for _, n := range c.Namespaces {
		fmt.Fprintf(&b, "namespace %s %v\n", n.Name, n.Labels)
	}
	for _, p := range c.Pods {
		var ports []string
		for _, ct := range p.Spec.Containers {
			for _, cp := range ct.Ports {
				ports = append(ports, fmt.Sprintf("%s=%s/%d", cp.Name, cp.Protocol, cp.ContainerPort))
			}
		}
		fmt.Fprintf(&b, "pod %s/%s node=%s ips=%v hostNetwork=%v phase=%s labels=%v ports=%v\n",
			p.Namespace, p.Name, p.Spec.NodeName, PodAddresses(p), p.Spec.HostNetwork, p.Status.Phase, p.Labels, ports)
	}
	for _, pol := range c.Policies {
		fmt.Fprintf(&b, "policy %s/%s %s\n", pol.Namespace, pol.Name, pol.Spec.String())
	}
	for _, pol := range c.ClusterPolicies {
		spec, _ := json.Marshal(pol.Spec)
		fmt.Fprintf(&b, "cluster policy %s %s\n", pol.Name, spec)
	}
	return b.String()
}

// Clone returns a copy of c whose slices can be changed independently (the
// objects are shared: replace them, never modify them).
func (c *Cluster) Clone() *Cluster {
	d := *c
	d.Namespaces = slices.Clone(c.Namespaces)
	d.Pods = slices.Clone(c.Pods)
	d.Policies = slices.Clone(c.Policies)
	d.ClusterPolicies = slices.Clone(c.ClusterPolicies)
	return &d
}

// Generator makes random clusters small enough to check exhaustively and
// varied enough to reach every feature: namespaces with labels; labelled
// pods on this node and others, with named container ports, some dual-stack,
// some pending, in the host network or terminated; policies with pod and
// namespace selectors (empty ones included), ipBlocks with excepts, numbered,
// named and ranged ports, ingress, egress, both or default policyTypes.
type Generator struct {
	rng *rand.Rand
	// Large makes clusters of up to 4 namespaces, 25 pods and 8 policies
	// instead of 3, 9 and 4.
	Large bool
	// ClusterPolicies adds up to 4 ClusterNetworkPolicies of both tiers to
	// clusters (7 when Large), and makes a third of Mutate's changes
	// theirs.
	ClusterPolicies bool
}

// NewGenerator returns a generator drawing from rng.
func NewGenerator(rng *rand.Rand) *Generator { return &Generator{rng: rng} }

const localNode = "node-a"

var (
	nodes       = []string{localNode, "node-b", "node-c"}
	labelKeys   = []string{"app", "tier", "env"}
	labelValues = []string{"x", "y", "z"}
	portNames   = []string{"http", "dns", "metrics"}
	portNumbers = []int32{53, 80, 443, 8080, 9090}
	protocols   = []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}
	// blockCIDRs cover pods (10.0.0.0/24, fd00::/64), this node, the NAT
	// loopback and external addresses, in nested sizes.
	blockCIDRs = []string{
		"10.0.0.0/24", "10.0.0.0/28", "10.0.0.0/26", "10.0.0.16/28", "10.0.0.0/8", "0.0.0.0/0",
		"172.16.0.0/24", "192.168.0.0/24", "fd00::/64", "fd00::/120", "::/0", "2001:db8::/32",
	}
)

// SamplePorts are the destination ports sampled for TCP, UDP and SCTP: every
// port the generator uses and the ports around every range boundary.
var SamplePorts = []uint16{1, 52, 53, 54, 79, 80, 81, 442, 443, 444, 8079, 8080, 8081, 9089, 9090, 9091, 65535}

// Cluster returns a random cluster.
func (g *Generator) Cluster() *Cluster {
	c := &Cluster{
		Node:          localNode,
		NodeAddresses: []netip.Addr{netip.MustParseAddr("192.168.0.1"), netip.MustParseAddr("fd01::1")},
		NATLoopback:   []netip.Addr{netip.MustParseAddr("10.0.0.254"), netip.MustParseAddr("fd00::fe")},
		External: []netip.Addr{
			netip.MustParseAddr("172.16.0.9"), netip.MustParseAddr("8.8.8.8"),
			netip.MustParseAddr("192.168.0.2"), netip.MustParseAddr("2001:db8::9"),
		},
	}
	namespaces, pods, policies := 3, 9, 4
	if g.Large {
		namespaces, pods, policies = 4, 25, 8
	}
	for i := range 1 + g.rng.IntN(namespaces) {
		c.Namespaces = append(c.Namespaces, g.Namespace(fmt.Sprintf("ns%d", i)))
	}
	for i := range 2 + g.rng.IntN(pods-1) {
		c.Pods = append(c.Pods, g.Pod(c, i))
	}
	for i := range g.rng.IntN(policies + 1) {
		c.Policies = append(c.Policies, g.Policy(c, i))
	}
	if g.ClusterPolicies {
		for i := range g.rng.IntN(policies/4*3 + 2) {
			c.ClusterPolicies = append(c.ClusterPolicies, g.ClusterPolicy(i))
		}
	}
	return c
}

// ClusterPolicy returns ClusterNetworkPolicy number i: either tier, a
// priority of few values (so that equal ones are ordered by name), a
// subject of namespaces or pods, rules of every action with pod, namespace
// and network peers and protocols with and without ports; now and then a
// peer or port vcoil does not implement, to check failing closed.
func (g *Generator) ClusterPolicy(i int) *cnp.ClusterNetworkPolicy {
	pol := &cnp.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cluster%d", i)}}
	pol.Spec.Tier = []cnp.Tier{cnp.AdminTier, cnp.BaselineTier}[g.pick(2)]
	pol.Spec.Priority = int32(g.pick(3))
	if g.pick(2) == 0 {
		pol.Spec.Subject.Namespaces = g.selector()
	} else {
		pol.Spec.Subject.Pods = &cnp.NamespacedPod{NamespaceSelector: *g.selector(), PodSelector: *g.selector()}
	}
	actions := []cnp.ClusterNetworkPolicyRuleAction{
		cnp.ClusterNetworkPolicyRuleActionAccept, cnp.ClusterNetworkPolicyRuleActionDeny, cnp.ClusterNetworkPolicyRuleActionPass,
	}
	for j := range g.pick(4) {
		r := cnp.ClusterNetworkPolicyIngressRule{Action: actions[g.pick(3)], Protocols: g.clusterProtocols()}
		if j%2 == 0 {
			r.Name = fmt.Sprintf("in%d", j)
		}
		for range 1 + g.pick(2) {
			var p cnp.ClusterNetworkPolicyIngressPeer
			if g.pick(2) == 0 {
				p.Namespaces = g.selector()
			} else {
				p.Pods = &cnp.NamespacedPod{NamespaceSelector: *g.selector(), PodSelector: *g.selector()}
			}
			r.From = append(r.From, p)
		}
		pol.Spec.Ingress = append(pol.Spec.Ingress, r)
	}
	for j := range g.pick(4) {
		r := cnp.ClusterNetworkPolicyEgressRule{Action: actions[g.pick(3)], Protocols: g.clusterProtocols()}
		if j%2 == 0 {
			r.Name = fmt.Sprintf("out%d", j)
		}
		for range 1 + g.pick(2) {
			var p cnp.ClusterNetworkPolicyEgressPeer
			switch k := g.pick(13); {
			case k < 4:
				p.Namespaces = g.selector()
			case k < 8:
				p.Pods = &cnp.NamespacedPod{NamespaceSelector: *g.selector(), PodSelector: *g.selector()}
			case k < 12:
				for range 1 + g.pick(2) {
					p.Networks = append(p.Networks, cnp.CIDR(blockCIDRs[g.pick(len(blockCIDRs))]))
				}
			default:
				p.Nodes = g.selector()
			}
			r.To = append(r.To, p)
		}
		pol.Spec.Egress = append(pol.Spec.Egress, r)
	}
	return pol
}

// clusterProtocols returns up to 3 protocols of a ClusterNetworkPolicy
// rule; one in 20 is a named port.
func (g *Generator) clusterProtocols() []cnp.ClusterNetworkPolicyProtocol {
	var out []cnp.ClusterNetworkPolicyProtocol
	for range g.pick(3) {
		var port *cnp.Port
		switch g.pick(3) {
		case 1:
			port = &cnp.Port{Number: portNumbers[g.pick(len(portNumbers))]}
		case 2:
			first := portNumbers[g.pick(len(portNumbers))]
			port = &cnp.Port{Range: &cnp.PortRange{Start: first, End: first + int32(g.pick(9000))}}
		}
		var p cnp.ClusterNetworkPolicyProtocol
		switch k := g.pick(20); {
		case k == 0:
			p.DestinationNamedPort = portNames[g.pick(len(portNames))]
		case k < 9:
			p.TCP = &cnp.ClusterNetworkPolicyProtocolTCP{DestinationPort: port}
		case k < 17:
			p.UDP = &cnp.ClusterNetworkPolicyProtocolUDP{DestinationPort: port}
		default:
			p.SCTP = &cnp.ClusterNetworkPolicyProtocolSCTP{DestinationPort: port}
		}
		out = append(out, p)
	}
	return out
}

// Namespace returns a namespace with random labels, plus the name label the
// apiserver always sets.
func (g *Generator) Namespace(name string) *corev1.Namespace {
	l := g.labels()
	l["kubernetes.io/metadata.name"] = name
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

func (g *Generator) labels() map[string]string {
	l := make(map[string]string)
	for _, k := range labelKeys {
		if g.rng.IntN(2) == 0 {
			l[k] = labelValues[g.rng.IntN(len(labelValues))]
		}
	}
	return l
}

func (g *Generator) pick(n int) int { return g.rng.IntN(n) }

// Pod returns pod number i of c: random namespace, node, labels and ports;
// mostly running with an IPv4 address (10.0.0.i+1), sometimes also IPv6,
// sometimes pending, in the host network or terminated.
func (g *Generator) Pod(c *Cluster, i int) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: c.Namespaces[g.pick(len(c.Namespaces))].Name,
			Name:      fmt.Sprintf("pod%d", i),
			Labels:    g.labels(),
		},
		Spec: corev1.PodSpec{NodeName: nodes[g.pick(len(nodes))]},
	}
	ct := corev1.Container{Name: "c"}
	for _, k := range g.rng.Perm(len(portNames))[:g.pick(len(portNames)+1)] {
		ct.Ports = append(ct.Ports, corev1.ContainerPort{
			Name:          portNames[k],
			ContainerPort: portNumbers[g.pick(len(portNumbers))],
			Protocol:      protocols[g.pick(len(protocols))],
		})
	}
	p.Spec.Containers = []corev1.Container{ct}
	g.SetState(p, i)
	return p
}

// SetState gives pod number i a random state: running (with an address, 10%
// dual-stack), pending without an address, in the host network, or
// terminated.
func (g *Generator) SetState(p *corev1.Pod, i int) {
	p.Status = corev1.PodStatus{}
	p.Spec.HostNetwork = false
	v4 := fmt.Sprintf("10.0.0.%d", i+1)
	switch r := g.pick(20); {
	case r == 0:
		p.Status.Phase = corev1.PodPending
	case r == 1:
		p.Spec.HostNetwork = true
		p.Status.Phase = corev1.PodRunning
		addr := "192.168.0.1"
		if p.Spec.NodeName != localNode {
			addr = "192.168.0.2"
		}
		p.Status.PodIPs = []corev1.PodIP{{IP: addr}}
	case r == 2:
		p.Status.Phase = corev1.PodSucceeded
		p.Status.PodIPs = []corev1.PodIP{{IP: v4}}
	default:
		p.Status.Phase = corev1.PodRunning
		p.Status.PodIPs = []corev1.PodIP{{IP: v4}}
		if g.pick(3) == 0 {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: fmt.Sprintf("fd00::%x", i+1)})
		}
	}
	if len(p.Status.PodIPs) > 0 {
		p.Status.PodIP = p.Status.PodIPs[0].IP
	}
}

// Policy returns policy number i of c.
func (g *Generator) Policy(c *Cluster, i int) *networkingv1.NetworkPolicy {
	pol := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: c.Namespaces[g.pick(len(c.Namespaces))].Name,
			Name:      fmt.Sprintf("policy%d", i),
		},
	}
	pol.Spec.PodSelector = *g.selector()
	switch g.pick(4) {
	case 1:
		pol.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	case 2:
		pol.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	case 3:
		pol.Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	}
	for range g.pick(4) {
		pol.Spec.Ingress = append(pol.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: g.peers(), Ports: g.ports()})
	}
	for range g.pick(4) {
		pol.Spec.Egress = append(pol.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: g.peers(), Ports: g.ports()})
	}
	return pol
}

// selector returns a random label selector; a third of them are empty.
func (g *Generator) selector() *metav1.LabelSelector {
	s := &metav1.LabelSelector{}
	switch g.pick(3) {
	case 0:
	case 1:
		s.MatchLabels = map[string]string{labelKeys[g.pick(len(labelKeys))]: labelValues[g.pick(len(labelValues))]}
	case 2:
		ops := []metav1.LabelSelectorOperator{
			metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn,
			metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist,
		}
		e := metav1.LabelSelectorRequirement{Key: labelKeys[g.pick(len(labelKeys))], Operator: ops[g.pick(len(ops))]}
		if e.Operator == metav1.LabelSelectorOpIn || e.Operator == metav1.LabelSelectorOpNotIn {
			for _, k := range g.rng.Perm(len(labelValues))[:1+g.pick(2)] {
				e.Values = append(e.Values, labelValues[k])
			}
		}
		s.MatchExpressions = []metav1.LabelSelectorRequirement{e}
	}
	return s
}

func (g *Generator) peers() []networkingv1.NetworkPolicyPeer {
	var out []networkingv1.NetworkPolicyPeer
	for range g.pick(4) {
		var p networkingv1.NetworkPolicyPeer
		switch g.pick(4) {
		case 0:
			p.PodSelector = g.selector()
		case 1:
			p.NamespaceSelector = g.selector()
		case 2:
			p.PodSelector = g.selector()
			p.NamespaceSelector = g.selector()
		case 3:
			p.IPBlock = g.ipBlock()
		}
		out = append(out, p)
	}
	return out
}

// ipBlock returns a CIDR with 0-2 excepts strictly inside it, each around
// one of the addresses the tests sample.
func (g *Generator) ipBlock() *networkingv1.IPBlock {
	cidr := netip.MustParsePrefix(blockCIDRs[g.pick(len(blockCIDRs))])
	b := &networkingv1.IPBlock{CIDR: cidr.String()}
	var inside []netip.Addr
	for _, a := range candidateAddresses() {
		if cidr.Contains(a) {
			inside = append(inside, a)
		}
	}
	for range g.pick(3) {
		if len(inside) == 0 || cidr.Bits() == cidr.Addr().BitLen() {
			break
		}
		a := inside[g.pick(len(inside))]
		bits := cidr.Bits() + 1 + g.pick(a.BitLen()-cidr.Bits())
		b.Except = append(b.Except, netip.PrefixFrom(a, bits).Masked().String())
	}
	return b
}

// candidateAddresses are addresses that clusters use, for excepts.
func candidateAddresses() []netip.Addr {
	var out []netip.Addr
	for i := 1; i <= 26; i++ {
		out = append(out, netip.MustParseAddr(fmt.Sprintf("10.0.0.%d", i)), netip.MustParseAddr(fmt.Sprintf("fd00::%x", i)))
	}
	return append(out,
		netip.MustParseAddr("10.0.0.254"), netip.MustParseAddr("fd00::fe"),
		netip.MustParseAddr("192.168.0.1"), netip.MustParseAddr("192.168.0.2"),
		netip.MustParseAddr("172.16.0.9"), netip.MustParseAddr("2001:db8::9"))
}

func (g *Generator) ports() []networkingv1.NetworkPolicyPort {
	var out []networkingv1.NetworkPolicyPort
	for range g.pick(4) {
		var p networkingv1.NetworkPolicyPort
		if k := g.pick(4); k < 3 {
			proto := protocols[k]
			p.Protocol = &proto
		}
		switch g.pick(4) {
		case 0:
		case 1:
			v := intstr.FromInt32(portNumbers[g.pick(len(portNumbers))])
			p.Port = &v
		case 2:
			first := portNumbers[g.pick(len(portNumbers))]
			v := intstr.FromInt32(first)
			p.Port = &v
			end := first + int32(g.pick(9000))
			p.EndPort = &end
		case 3:
			v := intstr.FromString(portNames[g.pick(len(portNames))])
			p.Port = &v
		}
		out = append(out, p)
	}
	return out
}

// Sink receives changes; the policy cache is one.
type Sink interface {
	SetPod(ctx context.Context, pod *corev1.Pod) error
	DeletePod(ctx context.Context, namespace, name string) error
	SetNamespace(ctx context.Context, ns *corev1.Namespace) error
	SetPolicy(ctx context.Context, policy *networkingv1.NetworkPolicy) error
	DeletePolicy(ctx context.Context, namespace, name string) error
	SetClusterPolicy(ctx context.Context, policy *cnp.ClusterNetworkPolicy) error
	DeleteClusterPolicy(ctx context.Context, name string) error
}

// Change is one random change made to a cluster, to replay into a Sink.
type Change struct {
	Description string
	Apply       func(ctx context.Context, s Sink) error
}

// Mutate changes c in one random way (a pod's labels or state, a pod added
// or deleted, a namespace's labels, a policy added, replaced or deleted) and
// returns the change. Objects are replaced, never modified.
func (g *Generator) Mutate(c *Cluster) Change {
	if g.ClusterPolicies && g.pick(3) == 0 {
		return g.mutateClusterPolicies(c)
	}
	switch k := g.pick(8); {
	case k <= 1 && len(c.Pods) > 0:
		i := g.pick(len(c.Pods))
		p := c.Pods[i].DeepCopy()
		if k == 0 {
			p.Labels = g.labels()
		} else {
			g.SetState(p, podIndex(p))
		}
		c.Pods[i] = p
		return Change{fmt.Sprintf("update pod %s/%s", p.Namespace, p.Name), func(ctx context.Context, s Sink) error { return s.SetPod(ctx, p) }}
	case k == 2 && len(c.Pods) > 0:
		i := g.pick(len(c.Pods))
		p := c.Pods[i]
		c.Pods = slices.Delete(c.Pods, i, i+1)
		return Change{fmt.Sprintf("delete pod %s/%s", p.Namespace, p.Name), func(ctx context.Context, s Sink) error { return s.DeletePod(ctx, p.Namespace, p.Name) }}
	case k == 3:
		next := 0
		for _, p := range c.Pods {
			next = max(next, podIndex(p)+1)
		}
		if next >= 250 {
			break
		}
		p := g.Pod(c, next)
		c.Pods = append(c.Pods, p)
		return Change{fmt.Sprintf("add pod %s/%s", p.Namespace, p.Name), func(ctx context.Context, s Sink) error { return s.SetPod(ctx, p) }}
	case k == 4:
		i := g.pick(len(c.Namespaces))
		n := g.Namespace(c.Namespaces[i].Name)
		c.Namespaces[i] = n
		return Change{fmt.Sprintf("relabel namespace %s", n.Name), func(ctx context.Context, s Sink) error { return s.SetNamespace(ctx, n) }}
	case k == 5 && len(c.Policies) > 0:
		i := g.pick(len(c.Policies))
		p := c.Policies[i]
		c.Policies = slices.Delete(c.Policies, i, i+1)
		return Change{fmt.Sprintf("delete policy %s/%s", p.Namespace, p.Name), func(ctx context.Context, s Sink) error { return s.DeletePolicy(ctx, p.Namespace, p.Name) }}
	case k == 6 && len(c.Policies) > 0:
		i := g.pick(len(c.Policies))
		p := g.Policy(c, 0)
		p.Namespace, p.Name = c.Policies[i].Namespace, c.Policies[i].Name
		c.Policies[i] = p
		return Change{fmt.Sprintf("replace policy %s/%s", p.Namespace, p.Name), func(ctx context.Context, s Sink) error { return s.SetPolicy(ctx, p) }}
	}
	next := 0
	for _, p := range c.Policies {
		var n int
		if _, err := fmt.Sscanf(p.Name, "policy%d", &n); err == nil {
			next = max(next, n+1)
		}
	}
	p := g.Policy(c, next)
	c.Policies = append(c.Policies, p)
	return Change{fmt.Sprintf("add policy %s/%s", p.Namespace, p.Name), func(ctx context.Context, s Sink) error { return s.SetPolicy(ctx, p) }}
}

// mutateClusterPolicies adds, replaces or deletes a ClusterNetworkPolicy.
func (g *Generator) mutateClusterPolicies(c *Cluster) Change {
	k := g.pick(3)
	if k < 2 && len(c.ClusterPolicies) > 0 {
		i := g.pick(len(c.ClusterPolicies))
		old := c.ClusterPolicies[i]
		if k == 0 {
			c.ClusterPolicies = slices.Delete(c.ClusterPolicies, i, i+1)
			return Change{"delete cluster policy " + old.Name, func(ctx context.Context, s Sink) error { return s.DeleteClusterPolicy(ctx, old.Name) }}
		}
		p := g.ClusterPolicy(0)
		p.Name = old.Name
		c.ClusterPolicies[i] = p
		return Change{"replace cluster policy " + p.Name, func(ctx context.Context, s Sink) error { return s.SetClusterPolicy(ctx, p) }}
	}
	next := 0
	for _, p := range c.ClusterPolicies {
		var n int
		if _, err := fmt.Sscanf(p.Name, "cluster%d", &n); err == nil {
			next = max(next, n+1)
		}
	}
	p := g.ClusterPolicy(next)
	c.ClusterPolicies = append(c.ClusterPolicies, p)
	return Change{"add cluster policy " + p.Name, func(ctx context.Context, s Sink) error { return s.SetClusterPolicy(ctx, p) }}
}

func podIndex(p *corev1.Pod) int {
	var n int
	fmt.Sscanf(p.Name, "pod%d", &n)
	return n
}
