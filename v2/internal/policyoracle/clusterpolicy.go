package policyoracle

import (
	"cmp"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cnp "sigs.k8s.io/network-policy-api/apis/v1beta1"
)

// verdict is what one tier of ClusterNetworkPolicies says of a connection.
type verdict int

const (
	noMatch verdict = iota
	accept
	deny
	pass
)

// The ClusterNetworkPolicy semantics of the API's documentation
// (policy.networking.k8s.io v1beta1, network-policy-api v0.3.0), as this
// oracle reads them:
//
//   - For a pod and a direction, the Admin tier is asked first: the rules
//     of the Admin policies whose subject selects the pod, by priority (lower
//     first; equal priorities by name: vcoil's choice where the API leaves
//     the order open), each policy's rules in their order. The first rule
//     whose peers and protocols match decides: Accept admits, Deny drops,
//     Pass leaves the tier.
//   - Then the NetworkPolicy tier: a pod its NetworkPolicies isolate in that
//     direction is admitted or dropped by them, finally.
//   - Then the Baseline tier, as the Admin one; Pass and no match admit.
//   - Host-network pods are neither subjects nor pod peers.
//   - Fail closed: a peer or protocol vcoil does not implement (domainNames,
//     node peers, named ports, a peer with no field the API knows) makes an
//     Accept rule match nothing and a Deny or Pass rule match every
//     connection of its direction.
//
// What no policy can block (a pod and its own node, a pod and itself) is
// decided before any tier, as for NetworkPolicies.

// tierVerdict returns the verdict of tier for traffic of pod p in the
// direction (ingress: into p, from peer; egress: out of p, to peer).
func (k *Kubernetes) tierVerdict(tier cnp.Tier, p *corev1.Pod, ingress bool, peer netip.Addr, c Connection) verdict {
	var pols []*cnp.ClusterNetworkPolicy
	for _, pol := range k.clusterPolicies {
		if pol.Spec.Tier == tier && k.subjectSelects(pol, p) {
			pols = append(pols, pol)
		}
	}
	slices.SortStableFunc(pols, func(a, b *cnp.ClusterNetworkPolicy) int {
		return cmp.Or(cmp.Compare(a.Spec.Priority, b.Spec.Priority), cmp.Compare(a.Name, b.Name))
	})
	for _, pol := range pols {
		if ingress {
			for _, r := range pol.Spec.Ingress {
				peersOK, peersKnown := k.ingressPeersMatch(r.From, peer)
				if v := k.ruleVerdict(r.Action, peersOK, peersKnown, r.Protocols, c); v != noMatch {
					return v
				}
			}
			continue
		}
		for _, r := range pol.Spec.Egress {
			peersOK, peersKnown := k.egressPeersMatch(r.To, peer)
			if v := k.ruleVerdict(r.Action, peersOK, peersKnown, r.Protocols, c); v != noMatch {
				return v
			}
		}
	}
	return noMatch
}

// ruleVerdict applies one rule whose peers matched (peersOK) and were all
// understood (peersKnown), with its protocols.
func (k *Kubernetes) ruleVerdict(action cnp.ClusterNetworkPolicyRuleAction, peersOK, peersKnown bool, protocols []cnp.ClusterNetworkPolicyProtocol, c Connection) verdict {
	protoOK, protoKnown := protocolsMatch(protocols, c)
	var v verdict
	switch action {
	case cnp.ClusterNetworkPolicyRuleActionAccept:
		v = accept
	case cnp.ClusterNetworkPolicyRuleActionDeny:
		v = deny
	case cnp.ClusterNetworkPolicyRuleActionPass:
		v = pass
	default:
		return noMatch
	}
	if !peersKnown || !protoKnown {
		// Fail closed.
		if v == accept {
			return noMatch
		}
		return v
	}
	if peersOK && protoOK {
		return v
	}
	return noMatch
}

// subjectSelects: the pods of the namespaces the namespace selector
// matches, or the pods the pod selector matches in the namespaces its
// namespace selector matches (empty selectors: every namespace, every pod).
func (k *Kubernetes) subjectSelects(pol *cnp.ClusterNetworkPolicy, p *corev1.Pod) bool {
	s := pol.Spec.Subject
	switch {
	case s.Namespaces != nil:
		return k.namespaceMatches(s.Namespaces, p.Namespace)
	case s.Pods != nil:
		return k.namespaceMatches(&s.Pods.NamespaceSelector, p.Namespace) && selectorMatches(&s.Pods.PodSelector, p.Labels)
	}
	return false
}

func (k *Kubernetes) namespaceMatches(sel *metav1.LabelSelector, name string) bool {
	ns := k.namespaces[name]
	return ns != nil && selectorMatches(sel, ns.Labels)
}

// podPeerMatches: a peer by namespaces or by pods matches the addresses of
// the pods they select (never a host-network pod's: it has no address in
// the oracle's pods).
func (k *Kubernetes) podPeerMatches(namespaces *metav1.LabelSelector, pods *cnp.NamespacedPod, a netip.Addr) bool {
	p := k.pods[a]
	if p == nil {
		return false
	}
	if namespaces != nil {
		return k.namespaceMatches(namespaces, p.Namespace)
	}
	return k.namespaceMatches(&pods.NamespaceSelector, p.Namespace) && selectorMatches(&pods.PodSelector, p.Labels)
}

// ingressPeersMatch returns whether a peer matches a, and whether every
// peer is one vcoil implements.
func (k *Kubernetes) ingressPeersMatch(peers []cnp.ClusterNetworkPolicyIngressPeer, a netip.Addr) (match, known bool) {
	known = true
	for _, peer := range peers {
		if peer.Namespaces == nil && peer.Pods == nil {
			known = false
			continue
		}
		if k.podPeerMatches(peer.Namespaces, peer.Pods, a) {
			match = true
		}
	}
	return match, known
}

func (k *Kubernetes) egressPeersMatch(peers []cnp.ClusterNetworkPolicyEgressPeer, a netip.Addr) (match, known bool) {
	known = true
	for _, peer := range peers {
		switch {
		case peer.Namespaces != nil || peer.Pods != nil:
			if k.podPeerMatches(peer.Namespaces, peer.Pods, a) {
				match = true
			}
		case len(peer.Networks) > 0:
			for _, n := range peer.Networks {
				pfx, err := netip.ParsePrefix(string(n))
				if err != nil {
					known = false
					continue
				}
				if pfx.Contains(a) {
					match = true
				}
			}
		default: // nodes, domainNames, or nothing vcoil knows
			known = false
		}
	}
	return match, known
}

// protocolsMatch: no protocols match every connection; else one of them
// must match its protocol and destination port (a number or a range).
func protocolsMatch(ps []cnp.ClusterNetworkPolicyProtocol, c Connection) (match, known bool) {
	if len(ps) == 0 {
		return true, true
	}
	known = true
	for _, p := range ps {
		var proto Protocol
		var port *cnp.Port
		switch {
		case p.TCP != nil:
			proto, port = TCP, p.TCP.DestinationPort
		case p.UDP != nil:
			proto, port = UDP, p.UDP.DestinationPort
		case p.SCTP != nil:
			proto, port = SCTP, p.SCTP.DestinationPort
		default: // a named port, or nothing vcoil knows
			known = false
			continue
		}
		if proto != c.Protocol {
			continue
		}
		switch {
		case port == nil:
			match = true
		case port.Range != nil:
			if int32(c.DstPort) >= port.Range.Start && int32(c.DstPort) <= port.Range.End {
				match = true
			}
		case int32(c.DstPort) == port.Number:
			match = true
		}
	}
	return match, known
}
