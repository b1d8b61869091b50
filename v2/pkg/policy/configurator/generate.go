package configurator

import (
	"net/netip"
	"slices"

	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// PolicyType is a direction from the pod's point of view, as in a
// NetworkPolicy's policyTypes.
type PolicyType uint8

const (
	// PolicyIngress is traffic into the pod.
	PolicyIngress PolicyType = iota
	// PolicyEgress is traffic out of the pod.
	PolicyEgress
)

func (t PolicyType) String() string {
	if t == PolicyEgress {
		return "Egress"
	}
	return "Ingress"
}

// GenerateRules implements the seed's GenerateRules: it turns the policies of
// one pod for one direction (the pod's point of view) into the rule list of
// the opposite direction from the vswitch point of view. Policies for
// PolicyIngress give the renderer's Egress list (the peer is the source,
// the destination is "any", i.e. the pod); policies for PolicyEgress give its
// Ingress list (the peer is the destination).
//
// If no policy isolates the pod in that direction the list is empty: the pod
// is open. Otherwise it is the Permit rules of every match, sorted by
// Rule.Compare without duplicates, ended by DenyAll; or just PermitAll when
// some match permits everything. alwaysPermitted are peers that no policy can
// block (the node's own addresses, and for PolicyIngress its NAT loopback);
// they are permitted in an isolated list, every protocol and port.
//
// ipBlock excepts are subtracted (SubtractSubnets) rather than denied, and
// port ranges (endPort) stay ranges, one rule each.
func GenerateRules(t PolicyType, policies []*Policy, alwaysPermitted []netip.Addr) []renderer.Rule {
	isolated := false
	var rules []renderer.Rule
	for _, p := range policies {
		var matches []Match
		if t == PolicyIngress {
			if !p.IsolatesIngress {
				continue
			}
			matches = p.Ingress
		} else {
			if !p.IsolatesEgress {
				continue
			}
			matches = p.Egress
		}
		isolated = true
		for i := range matches {
			var all bool
			rules, all = appendMatchRules(rules, t, &matches[i])
			if all {
				return []renderer.Rule{renderer.PermitAll}
			}
		}
	}
	if !isolated {
		return nil
	}
	for _, a := range alwaysPermitted {
		rules = append(rules, peerRule(t, renderer.HostNetwork(a), nil))
	}
	slices.SortFunc(rules, renderer.Rule.Compare)
	rules = slices.Compact(rules)
	return append(rules, renderer.DenyAll)
}

// appendMatchRules appends the Permit rules of one match and reports whether
// the match permits all traffic.
func appendMatchRules(rules []renderer.Rule, t PolicyType, m *Match) ([]renderer.Rule, bool) {
	if m.AllPeers {
		if len(m.Ports) == 0 {
			return rules, true
		}
		for _, port := range m.Ports {
			rules = append(rules, peerRule(t, renderer.AnyNetwork, &port))
		}
		return rules, false
	}
	for _, pod := range m.Pods {
		for _, ip := range pod.IPs {
			rules = appendPeerRules(rules, t, renderer.HostNetwork(ip), m.Ports)
		}
	}
	for _, b := range m.Blocks {
		for _, n := range SubtractSubnets(b.Network, b.Except) {
			rules = appendPeerRules(rules, t, n, m.Ports)
		}
	}
	return rules, false
}

func appendPeerRules(rules []renderer.Rule, t PolicyType, peer netip.Prefix, ports []Port) []renderer.Rule {
	if len(ports) == 0 {
		return append(rules, peerRule(t, peer, nil))
	}
	for i := range ports {
		rules = append(rules, peerRule(t, peer, &ports[i]))
	}
	return rules
}

// peerRule is the Permit rule for traffic with peer on port (nil: every
// protocol and port): the peer is the source of traffic into the pod and the
// destination of traffic out of it.
func peerRule(t PolicyType, peer netip.Prefix, port *Port) renderer.Rule {
	r := renderer.Rule{Action: renderer.ActionPermit, SrcPort: renderer.AnyPort, DstPort: renderer.AnyPort}
	if port != nil {
		r.Protocol = port.Protocol
		r.DstPort = port.Ports
	}
	if t == PolicyIngress {
		r.SrcNetwork = peer
	} else {
		r.DstNetwork = peer
	}
	return r
}
