package configurator

import (
	"net/netip"
	"slices"

	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// GenerateRules implements GenerateRules of the Contiv/VPP design
// (docs/background.md#generaterules): it turns the policies of one pod for
// direction d into the pod's rule list for d. The renderer.Ingress list names
// the peer as source (the destination is "any", i.e. the pod); the
// renderer.Egress list names the peer as destination.
//
// If no policy isolates the pod in that direction the list is empty: the pod
// is open. Otherwise it is the Permit rules of every match, sorted by
// Rule.Compare without duplicates, ended by DenyAll; or just PermitAll when
// some match permits everything. alwaysPermitted are peers that no policy can
// block (the node's own addresses, and for Ingress its NAT loopback);
// they are permitted in an isolated list, every protocol and port.
//
// ipBlock excepts are subtracted (SubtractSubnets) rather than denied, and
// port ranges (endPort) stay ranges, one rule each.
func GenerateRules(d renderer.Direction, policies []*Policy, alwaysPermitted []netip.Addr) []renderer.Rule {
	return generateRules(d, policies, alwaysPermitted, nil)
}

// generateRules is GenerateRules that returns previous itself when the
// rules equal it, so that a pod whose rules did not change costs no
// allocation and renderers can tell by identity.
func generateRules(d renderer.Direction, policies []*Policy, alwaysPermitted []netip.Addr, previous []renderer.Rule) []renderer.Rule {
	isolated := false
	var runs []*generated
	n := 1 + len(alwaysPermitted)
	for _, p := range policies {
		if !p.isolates(d) {
			continue
		}
		isolated = true
		g := p.rules(d)
		if g.all {
			if len(previous) == 1 && previous[0] == renderer.PermitAll {
				return previous
			}
			return []renderer.Rule{renderer.PermitAll}
		}
		runs = append(runs, g)
		n += len(g.rules)
	}
	if !isolated {
		return nil
	}
	if len(alwaysPermitted) > 0 {
		extra := make([]renderer.Rule, 0, len(alwaysPermitted))
		for _, a := range alwaysPermitted {
			extra = append(extra, peerRule(d, renderer.HostNetwork(a), nil))
		}
		runs = append(runs, newGenerated(extra))
	}
	return mergeRuns(runs, n, previous)
}

func (p *Policy) isolates(d renderer.Direction) bool {
	if d == renderer.Ingress {
		return p.IsolatesIngress
	}
	return p.IsolatesEgress
}

// generated is a policy's rules for one direction, sorted and without
// duplicates, with their sort keys; remembered in the Policy so that a
// policy shared by many pods is turned into rules once.
type generated struct {
	from  *Match // the first match they were generated from: a Policy copied with other matches does not reuse them
	n     int
	rules []renderer.Rule
	keys  []renderer.SortKey
	all   bool // the policy permits everything; rules is empty
}

func newGenerated(rules []renderer.Rule) *generated {
	renderer.SortRules(rules)
	g := &generated{rules: slices.Compact(rules)}
	g.keys = make([]renderer.SortKey, len(g.rules))
	for i := range g.rules {
		g.keys[i] = g.rules[i].SortKey()
	}
	return g
}

// rules returns the policy's Permit rules for direction d.
func (p *Policy) rules(d renderer.Direction) *generated {
	matches := p.Ingress
	if d == renderer.Egress {
		matches = p.Egress
	}
	var from *Match
	if len(matches) > 0 {
		from = &matches[0]
	}
	if g := p.generated[d]; g != nil && g.from == from && g.n == len(matches) {
		return g
	}
	rules := make([]renderer.Rule, 0, countRules(matches))
	all := false
	for i := range matches {
		if rules, all = appendMatchRules(rules, d, &matches[i]); all {
			rules = nil
			break
		}
	}
	g := newGenerated(rules)
	g.from, g.n, g.all = from, len(matches), all
	p.generated[d] = g
	return g
}

// countRules is the number of rules matches give (an ipBlock with excepts
// counted as one network), to allocate once.
func countRules(matches []Match) int {
	n := 0
	for i := range matches {
		m := &matches[i]
		peers := len(m.Blocks)
		for _, pod := range m.Pods {
			peers += len(pod.IPs)
		}
		n += max(peers, 1) * max(len(m.Ports), 1)
	}
	return n
}

// mergeRuns merges sorted runs into one sorted list without duplicates and
// ends it with DenyAll. It returns previous if the list equals it.
func mergeRuns(runs []*generated, capacity int, previous []renderer.Rule) []renderer.Rule {
	var out []renderer.Rule // nil while the list equals previous[:n]
	n := 0
	emit := func(r *renderer.Rule) {
		if out == nil {
			if n < len(previous) && previous[n] == *r {
				n++
				return
			}
			out = make([]renderer.Rule, n, capacity)
			copy(out, previous[:n])
		}
		out = append(out, *r)
	}
	heads := make([]int, len(runs))
	var last *renderer.SortKey
	for {
		best := -1
		var bestKey *renderer.SortKey
		for i, g := range runs {
			if heads[i] == len(g.keys) {
				continue
			}
			if k := &g.keys[heads[i]]; best < 0 || k.Compare(bestKey) < 0 {
				best, bestKey = i, k
			}
		}
		if best < 0 {
			break
		}
		if last == nil || *last != *bestKey {
			emit(&runs[best].rules[heads[best]])
			last = bestKey
		}
		heads[best]++
	}
	deny := renderer.DenyAll
	emit(&deny)
	if out != nil {
		return out
	}
	if n == len(previous) {
		return previous
	}
	return slices.Clone(previous[:n])
}

// appendMatchRules appends the Permit rules of one match and reports whether
// the match permits all traffic.
func appendMatchRules(rules []renderer.Rule, d renderer.Direction, m *Match) ([]renderer.Rule, bool) {
	if m.AllPeers {
		if len(m.Ports) == 0 {
			return rules, true
		}
		for _, port := range m.Ports {
			rules = append(rules, peerRule(d, renderer.AnyNetwork, &port))
		}
		return rules, false
	}
	for _, pod := range m.Pods {
		for _, ip := range pod.IPs {
			rules = appendPeerRules(rules, d, renderer.HostNetwork(ip), m.Ports)
		}
	}
	for _, b := range m.Blocks {
		for _, n := range SubtractSubnets(b.Network, b.Except) {
			rules = appendPeerRules(rules, d, n, m.Ports)
		}
	}
	return rules, false
}

func appendPeerRules(rules []renderer.Rule, d renderer.Direction, peer netip.Prefix, ports []Port) []renderer.Rule {
	if len(ports) == 0 {
		return append(rules, peerRule(d, peer, nil))
	}
	for i := range ports {
		rules = append(rules, peerRule(d, peer, &ports[i]))
	}
	return rules
}

// peerRule is the Permit rule for traffic with peer on port (nil: every
// protocol and port): the peer is the source of traffic into the pod and the
// destination of traffic out of it.
func peerRule(d renderer.Direction, peer netip.Prefix, port *Port) renderer.Rule {
	r := renderer.Rule{Action: renderer.ActionPermit, SrcPort: renderer.AnyPort, DstPort: renderer.AnyPort}
	if port != nil {
		r.Protocol = port.Protocol
		r.DstPort = port.Ports
	}
	if d == renderer.Ingress {
		r.SrcNetwork = peer
	} else {
		r.DstNetwork = peer
	}
	return r
}
