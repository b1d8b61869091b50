package processor

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/vcoil/vcoil/v2/pkg/policy/configurator"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// parsedPolicy is a NetworkPolicy with its selectors, blocks and ports
// parsed: everything that depends on the policy object alone.
type parsedPolicy struct {
	id              configurator.PolicyID
	podSelector     labels.Selector
	isolatesIngress bool
	isolatesEgress  bool
	ingress         []parsedRule
	egress          []parsedRule
	// problems are the parts that could not be parsed and were left out
	// (each then permits nothing); the apiserver's validation should make
	// this empty.
	problems []error
}

type parsedRule struct {
	// allPeers is set when the rule has no from/to: every address.
	allPeers bool
	peers    []parsedPeer
	// allPorts is set when the rule has no ports.
	allPorts bool
	numbered []configurator.Port
	named    []namedPort
}

type parsedPeer struct {
	// block is set for an ipBlock peer; the selectors are then unused.
	block *configurator.IPBlock
	// namespaceSelector is nil when the peer selects pods of the policy's
	// own namespace.
	namespaceSelector labels.Selector
	// podSelector is nil when a peer with a namespaceSelector selects all
	// pods of those namespaces.
	podSelector labels.Selector
}

type namedPort struct {
	protocol renderer.Protocol
	name     string
}

func parsePolicy(np *networkingv1.NetworkPolicy) *parsedPolicy {
	pp := &parsedPolicy{id: configurator.PolicyID{Namespace: np.Namespace, Name: np.Name}}
	var err error
	pp.podSelector, err = metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		pp.problems = append(pp.problems, fmt.Errorf("podSelector: %w", err))
		pp.podSelector = labels.Nothing()
	}
	// Without policyTypes, Ingress is implied and Egress is implied by
	// egress rules (NetworkPolicySpec.policyTypes).
	if len(np.Spec.PolicyTypes) == 0 {
		pp.isolatesIngress = true
		pp.isolatesEgress = len(np.Spec.Egress) > 0
	}
	for _, t := range np.Spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			pp.isolatesIngress = true
		case networkingv1.PolicyTypeEgress:
			pp.isolatesEgress = true
		}
	}
	if pp.isolatesIngress {
		for i, r := range np.Spec.Ingress {
			pp.ingress = append(pp.ingress, pp.parseRule(fmt.Sprintf("ingress[%d]", i), r.From, r.Ports))
		}
	}
	if pp.isolatesEgress {
		for i, r := range np.Spec.Egress {
			pp.egress = append(pp.egress, pp.parseRule(fmt.Sprintf("egress[%d]", i), r.To, r.Ports))
		}
	}
	return pp
}

func (pp *parsedPolicy) parseRule(field string, peers []networkingv1.NetworkPolicyPeer, ports []networkingv1.NetworkPolicyPort) parsedRule {
	r := parsedRule{allPeers: len(peers) == 0, allPorts: len(ports) == 0}
	for i, peer := range peers {
		p, err := parsePeer(peer)
		if err != nil {
			pp.problems = append(pp.problems, fmt.Errorf("%s.peers[%d]: %w", field, i, err))
			continue
		}
		r.peers = append(r.peers, p)
	}
	for i, port := range ports {
		proto, ok := protocolOf(ptrOr(port.Protocol, ""))
		if !ok {
			pp.problems = append(pp.problems, fmt.Errorf("%s.ports[%d]: unsupported protocol %q", field, i, *port.Protocol))
			continue
		}
		switch {
		case port.Port == nil:
			r.numbered = append(r.numbered, configurator.Port{Protocol: proto, Ports: renderer.AnyPort})
		case port.Port.Type == intstr.String:
			r.named = append(r.named, namedPort{protocol: proto, name: port.Port.StrVal})
		default:
			first := port.Port.IntVal
			last := first
			if port.EndPort != nil {
				last = *port.EndPort
			}
			if first < 1 || last > 65535 || last < first {
				pp.problems = append(pp.problems, fmt.Errorf("%s.ports[%d]: bad port range %d-%d", field, i, first, last))
				continue
			}
			r.numbered = append(r.numbered, configurator.Port{
				Protocol: proto,
				Ports:    renderer.PortRange{First: uint16(first), Last: uint16(last)},
			})
		}
	}
	return r
}

func parsePeer(peer networkingv1.NetworkPolicyPeer) (parsedPeer, error) {
	if peer.IPBlock != nil {
		n, err := netip.ParsePrefix(peer.IPBlock.CIDR)
		if err != nil {
			return parsedPeer{}, fmt.Errorf("ipBlock.cidr: %w", err)
		}
		b := &configurator.IPBlock{Network: unmapPrefix(n).Masked()}
		for i, e := range peer.IPBlock.Except {
			x, err := netip.ParsePrefix(e)
			if err != nil {
				return parsedPeer{}, fmt.Errorf("ipBlock.except[%d]: %w", i, err)
			}
			b.Except = append(b.Except, unmapPrefix(x).Masked())
		}
		return parsedPeer{block: b}, nil
	}
	var p parsedPeer
	if peer.NamespaceSelector != nil {
		s, err := metav1.LabelSelectorAsSelector(peer.NamespaceSelector)
		if err != nil {
			return parsedPeer{}, fmt.Errorf("namespaceSelector: %w", err)
		}
		p.namespaceSelector = s
	}
	if peer.PodSelector != nil {
		s, err := metav1.LabelSelectorAsSelector(peer.PodSelector)
		if err != nil {
			return parsedPeer{}, fmt.Errorf("podSelector: %w", err)
		}
		p.podSelector = s
	}
	if p.namespaceSelector == nil && p.podSelector == nil {
		return parsedPeer{}, fmt.Errorf("no podSelector, namespaceSelector or ipBlock")
	}
	return p, nil
}

func unmapPrefix(p netip.Prefix) netip.Prefix {
	if !p.Addr().Is4In6() {
		return p
	}
	bits := p.Bits() - 96
	if bits < 0 {
		bits = 0
	}
	return netip.PrefixFrom(p.Addr().Unmap(), bits)
}

func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// selects reports whether peer p of a policy in namespace policyNS selects a
// pod in namespace podNS with the given labels. ns is the pod's namespace,
// nil when it is unknown: then no namespaceSelector matches it.
func (p *parsedPeer) selects(policyNS, podNS string, podLabels map[string]string, ns *corev1.Namespace) bool {
	if p.block != nil {
		return false
	}
	if p.namespaceSelector == nil {
		return podNS == policyNS && p.podSelector.Matches(labels.Set(podLabels))
	}
	if ns == nil || !p.namespaceSelector.Matches(labels.Set(ns.Labels)) {
		return false
	}
	return p.podSelector == nil || p.podSelector.Matches(labels.Set(podLabels))
}
