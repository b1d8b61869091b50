// Package policyoracle holds the test oracles of vcoil's policy stack: an
// evaluator of Kubernetes NetworkPolicy and ClusterNetworkPolicy semantics
// written from the APIs' documentation, an evaluator of the renderer cache's output
// as a network stack would apply it, and a generator of random clusters to
// confront them. It is test support: vcoild never uses it.
//
// The Kubernetes evaluator deliberately shares no code with the processor
// and the configurator (not even label selector matching), so that the
// property test that compares the two evaluators checks the policy stack
// against an independent reading of the semantics. For the same reason the
// oracle imports no renderer and no dataplane, only the renderer API (the
// model they implement); the tests read a renderer's state into a Tables.
package policyoracle

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	cnp "sigs.k8s.io/network-policy-api/apis/v1beta1"
)

// Protocol of a connection; ICMP stands for every protocol without ports.
type Protocol string

const (
	TCP  Protocol = "TCP"
	UDP  Protocol = "UDP"
	SCTP Protocol = "SCTP"
	ICMP Protocol = "ICMP"
)

// Connection is the first packet of a new connection, after services were
// translated (NetworkPolicies apply to pod addresses, not service VIPs).
type Connection struct {
	Src, Dst         netip.Addr
	Protocol         Protocol
	SrcPort, DstPort uint16
}

// Kubernetes evaluates connections by the NetworkPolicy semantics of the
// Kubernetes documentation ("Network Policies" and the networking.k8s.io/v1
// API reference):
//
//   - A pod is isolated for ingress (egress) if a NetworkPolicy in its
//     namespace selects it with Ingress (Egress) in its effective
//     policyTypes; policyTypes defaults to Ingress, plus Egress when the
//     policy has egress rules. A non-isolated direction allows everything.
//   - An isolated direction allows a connection if some rule of some policy
//     selecting the pod for that direction matches it; policies are
//     additive. A rule matches when a peer matches (no peers: every peer) and
//     a port matches (no ports: every protocol and port).
//   - A connection is allowed when the source's egress and the
//     destination's ingress both allow it; replies of allowed connections are
//     always allowed.
//   - Traffic between a pod and its own node is always allowed, and a pod
//     cannot block itself (which includes reaching itself through a service,
//     seen with the node's NAT loopback as source).
//
// vcoil's reading of what the documentation leaves open (see docs/policy.md):
// ipBlocks match addresses, pod addresses included; a named port matches a
// container port of the destination pod with that name and protocol, so it
// never matches a destination outside the cluster; pods without an address,
// in the host network or terminated are not endpoints of any policy.
type Kubernetes struct {
	namespaces map[string]*corev1.Namespace
	pods       map[netip.Addr]*corev1.Pod
	policies   []*networkingv1.NetworkPolicy
	// clusterPolicies are the ClusterNetworkPolicies (clusterpolicy.go).
	clusterPolicies []*cnp.ClusterNetworkPolicy
	node            string
	nodeAddrs       []netip.Addr
	loopback        []netip.Addr
}

// NewKubernetes returns the evaluator for a cluster as seen from node (whose
// own addresses and NAT loopback are given).
func NewKubernetes(c *Cluster) *Kubernetes {
	k := &Kubernetes{
		namespaces:      make(map[string]*corev1.Namespace),
		pods:            make(map[netip.Addr]*corev1.Pod),
		policies:        c.Policies,
		clusterPolicies: c.ClusterPolicies,
		node:            c.Node,
		nodeAddrs:       c.NodeAddresses,
		loopback:        c.NATLoopback,
	}
	for _, n := range c.Namespaces {
		k.namespaces[n.Name] = n
	}
	for _, p := range c.Pods {
		for _, a := range PodAddresses(p) {
			k.pods[a] = p
		}
	}
	return k
}

// PodAddresses returns the addresses by which policies know a pod: none for
// pods in the host network, terminated, or not yet given an address.
func PodAddresses(p *corev1.Pod) []netip.Addr {
	if p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return nil
	}
	var out []netip.Addr
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// PodAt returns the pod with address a, or nil.
func (k *Kubernetes) PodAt(a netip.Addr) *corev1.Pod { return k.pods[a] }

// IsLocalPod reports whether a is the address of a pod on the evaluator's node.
func (k *Kubernetes) IsLocalPod(a netip.Addr) bool {
	p := k.pods[a]
	return p != nil && p.Spec.NodeName == k.node
}

// Allowed is the cluster-wide verdict.
func (k *Kubernetes) Allowed(c Connection) bool {
	return k.EgressAllows(c) && k.IngressAllows(c)
}

// NodeVerdict is the part of the verdict that the evaluator's node enforces:
// the egress of a local source and the ingress of a local destination.
// responsible is false when neither end is a local pod.
func (k *Kubernetes) NodeVerdict(c Connection) (allowed, responsible bool) {
	srcLocal, dstLocal := k.IsLocalPod(c.Src), k.IsLocalPod(c.Dst)
	if !srcLocal && !dstLocal {
		return false, false
	}
	return (!srcLocal || k.EgressAllows(c)) && (!dstLocal || k.IngressAllows(c)), true
}

// EgressAllows reports whether the source's egress policies allow c.
func (k *Kubernetes) EgressAllows(c Connection) bool {
	src := k.pods[c.Src]
	if src == nil || k.pods[c.Dst] == src {
		return true
	}
	if src.Spec.NodeName == k.node && slices.Contains(k.nodeAddrs, c.Dst) {
		return true
	}
	return k.tiers(src, false, c.Dst, c, func() (isolated, allowed bool) {
		for _, pol := range k.policies {
			if !k.selectsPod(pol, src) || !hasType(pol, networkingv1.PolicyTypeEgress) {
				continue
			}
			isolated = true
			for _, r := range pol.Spec.Egress {
				if k.peersMatch(pol, r.To, c.Dst) && k.portsMatch(r.Ports, c, k.pods[c.Dst]) {
					return true, true
				}
			}
		}
		return isolated, false
	})
}

// IngressAllows reports whether the destination's ingress policies allow c.
func (k *Kubernetes) IngressAllows(c Connection) bool {
	dst := k.pods[c.Dst]
	if dst == nil || k.pods[c.Src] == dst {
		return true
	}
	if dst.Spec.NodeName == k.node && (slices.Contains(k.nodeAddrs, c.Src) || slices.Contains(k.loopback, c.Src)) {
		return true
	}
	return k.tiers(dst, true, c.Src, c, func() (isolated, allowed bool) {
		for _, pol := range k.policies {
			if !k.selectsPod(pol, dst) || !hasType(pol, networkingv1.PolicyTypeIngress) {
				continue
			}
			isolated = true
			for _, r := range pol.Spec.Ingress {
				if k.peersMatch(pol, r.From, c.Src) && k.portsMatch(r.Ports, c, dst) {
					return true, true
				}
			}
		}
		return isolated, false
	})
}

// tiers decides a direction of pod p: the Admin tier of its
// ClusterNetworkPolicies, then its NetworkPolicies (np: whether they
// isolate p in the direction, and whether they admit c), then the Baseline
// tier.
func (k *Kubernetes) tiers(p *corev1.Pod, ingress bool, peer netip.Addr, c Connection, np func() (isolated, allowed bool)) bool {
	switch k.tierVerdict(cnp.AdminTier, p, ingress, peer, c) {
	case accept:
		return true
	case deny:
		return false
	}
	if isolated, allowed := np(); isolated {
		return allowed
	}
	return k.tierVerdict(cnp.BaselineTier, p, ingress, peer, c) != deny
}

// hasType applies the policyTypes default of the API reference.
func hasType(pol *networkingv1.NetworkPolicy, t networkingv1.PolicyType) bool {
	if len(pol.Spec.PolicyTypes) == 0 {
		return t == networkingv1.PolicyTypeIngress || len(pol.Spec.Egress) > 0
	}
	return slices.Contains(pol.Spec.PolicyTypes, t)
}

// selectsPod: spec.podSelector selects pods of the policy's namespace; an
// empty selector selects all of them.
func (k *Kubernetes) selectsPod(pol *networkingv1.NetworkPolicy, p *corev1.Pod) bool {
	return p.Namespace == pol.Namespace && selectorMatches(&pol.Spec.PodSelector, p.Labels)
}

func (k *Kubernetes) peersMatch(pol *networkingv1.NetworkPolicy, peers []networkingv1.NetworkPolicyPeer, a netip.Addr) bool {
	if len(peers) == 0 {
		return true
	}
	for _, peer := range peers {
		if k.peerMatches(pol, &peer, a) {
			return true
		}
	}
	return false
}

func (k *Kubernetes) peerMatches(pol *networkingv1.NetworkPolicy, peer *networkingv1.NetworkPolicyPeer, a netip.Addr) bool {
	if peer.IPBlock != nil {
		cidr, err := netip.ParsePrefix(peer.IPBlock.CIDR)
		if err != nil || !cidr.Contains(a) {
			return false
		}
		for _, e := range peer.IPBlock.Except {
			if x, err := netip.ParsePrefix(e); err == nil && x.Contains(a) {
				return false
			}
		}
		return true
	}
	p := k.pods[a]
	if p == nil {
		return false
	}
	if peer.NamespaceSelector == nil {
		// podSelector alone: pods in the policy's own namespace.
		return p.Namespace == pol.Namespace && selectorMatches(peer.PodSelector, p.Labels)
	}
	ns := k.namespaces[p.Namespace]
	if ns == nil || !selectorMatches(peer.NamespaceSelector, ns.Labels) {
		return false
	}
	// Both selectors: the pods matching podSelector in those namespaces;
	// namespaceSelector alone: all their pods.
	return peer.PodSelector == nil || selectorMatches(peer.PodSelector, p.Labels)
}

// portsMatch checks the ports of a rule against c; dst is the destination
// pod (nil outside the cluster), on which named ports are looked up.
func (k *Kubernetes) portsMatch(ports []networkingv1.NetworkPolicyPort, c Connection, dst *corev1.Pod) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		proto := TCP
		if p.Protocol != nil {
			proto = Protocol(*p.Protocol)
		}
		if proto != c.Protocol {
			continue
		}
		if p.Port == nil {
			return true
		}
		if p.Port.Type == intstr.Int {
			first, last := p.Port.IntVal, p.Port.IntVal
			if p.EndPort != nil {
				last = *p.EndPort
			}
			if int32(c.DstPort) >= first && int32(c.DstPort) <= last {
				return true
			}
			continue
		}
		if dst != nil && namedPort(dst, p.Port.StrVal, proto) == int32(c.DstPort) {
			return true
		}
	}
	return false
}

// namedPort returns the number of the container port with that name and
// protocol, or -1. Init containers count when they run beside the others
// (sidecars: restartPolicy Always).
func namedPort(p *corev1.Pod, name string, proto Protocol) int32 {
	containers := slices.Clone(p.Spec.Containers)
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			containers = append(containers, c)
		}
	}
	for _, c := range containers {
		for _, cp := range c.Ports {
			cpProto := TCP
			if cp.Protocol != "" {
				cpProto = Protocol(cp.Protocol)
			}
			if cp.Name == name && cpProto == proto {
				return cp.ContainerPort
			}
		}
	}
	return -1
}

// selectorMatches evaluates a label selector: matchLabels and every
// matchExpressions requirement must hold. A nil or empty selector matches
// everything (callers handle the cases where nil means something else).
func selectorMatches(s *metav1.LabelSelector, l map[string]string) bool {
	if s == nil {
		return true
	}
	for k, v := range s.MatchLabels {
		if got, ok := l[k]; !ok || got != v {
			return false
		}
	}
	for _, e := range s.MatchExpressions {
		v, ok := l[e.Key]
		switch e.Operator {
		case metav1.LabelSelectorOpIn:
			if !ok || !slices.Contains(e.Values, v) {
				return false
			}
		case metav1.LabelSelectorOpNotIn:
			if ok && slices.Contains(e.Values, v) {
				return false
			}
		case metav1.LabelSelectorOpExists:
			if !ok {
				return false
			}
		case metav1.LabelSelectorOpDoesNotExist:
			if ok {
				return false
			}
		default:
			return false
		}
	}
	return true
}
