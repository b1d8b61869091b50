package configurator

import (
	"encoding/binary"
	"net/netip"
	"slices"

	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// GenerateTier turns the ClusterNetworkPolicies of one tier of a pod, in
// evaluation order, into the renderer's tier rules of direction d: each
// policy's rules in order, each rule's match expanded into 6-tuples with
// the rule's action (their order among themselves does not matter, as
// they share the action).
func GenerateTier(d renderer.Direction, policies []*ClusterPolicy) []renderer.TierRule {
	n := 0
	for _, p := range policies {
		n += len(p.tierRules(d))
	}
	if n == 0 {
		return nil
	}
	out := make([]renderer.TierRule, 0, n)
	for _, p := range policies {
		out = append(out, p.tierRules(d)...)
	}
	return out
}

// tierRules returns the policy's renderer rules of direction d, made once.
func (p *ClusterPolicy) tierRules(d renderer.Direction) []renderer.TierRule {
	if g := p.generated[d]; g != nil {
		return g
	}
	rules := p.Ingress
	if d == renderer.Egress {
		rules = p.Egress
	}
	out := []renderer.TierRule{}
	for i := range rules {
		r := &rules[i]
		matches, all := appendMatchRules(nil, d, &r.Match)
		if all {
			matches = []renderer.Rule{renderer.PermitAll}
		}
		matches = aggregatePeers(d, matches)
		renderer.SortRules(matches)
		for _, m := range slices.Compact(matches) {
			out = append(out, renderer.TierRule{Match: m, Action: r.Action, Policy: p.Name, Name: r.Name})
		}
	}
	p.generated[d] = out
	return out
}

// alwaysAccepted are the Admin rules ahead of every ClusterNetworkPolicy:
// the peers no policy can block.
func alwaysAccepted(d renderer.Direction, peers []netip.Addr) []renderer.TierRule {
	out := make([]renderer.TierRule, 0, len(peers))
	for _, a := range peers {
		out = append(out, renderer.TierRule{Match: peerRule(d, renderer.HostNetwork(a), nil), Action: renderer.TierAccept, Name: "always"})
	}
	return out
}

// tierMemo shares the tier rules of equal sequences of ClusterPolicies
// between pods: a ClusterNetworkPolicy's rules do not depend on the pod it
// selects, so every pod of one set of policies gets the very same slices
// (which the renderers recognize by identity) and memory holds them once.
type tierMemo struct {
	next    uint64
	entries map[string][]renderer.TierRule
}

// key names a sequence of policies of tier tier and direction d.
func (m *tierMemo) key(tier byte, d renderer.Direction, policies []*ClusterPolicy) string {
	b := make([]byte, 0, 2+8*len(policies))
	b = append(b, tier, byte(d))
	for _, p := range policies {
		if p.seq == 0 {
			m.next++
			p.seq = m.next
		}
		b = binary.LittleEndian.AppendUint64(b, p.seq)
	}
	return string(b)
}

// maxTierMemo bounds the memo: past it, it starts again empty (a policy
// replaced leaves its sequences behind).
const maxTierMemo = 4096

// tier returns GenerateTier of the policies, with the rules of always
// first for an Admin tier (admin set) of a pod with tier rules (has set).
func (m *tierMemo) tier(admin bool, d renderer.Direction, policies []*ClusterPolicy, always []renderer.TierRule, has bool) []renderer.TierRule {
	if !has {
		return nil
	}
	t := byte('b')
	if admin {
		t = 'a'
	}
	k := m.key(t, d, policies)
	if r, ok := m.entries[k]; ok {
		return r
	}
	r := GenerateTier(d, policies)
	if admin {
		r = append(slices.Clip(always), r...)
	}
	if len(m.entries) >= maxTierMemo {
		clear(m.entries)
	}
	if m.entries == nil {
		m.entries = map[string][]renderer.TierRule{}
	}
	m.entries[k] = r
	return r
}

// tiers returns the pod's Admin and Baseline rules of direction d, with
// the peers no policy can block accepted first when there is any rule.
func (m *tierMemo) tiers(d renderer.Direction, p *Pod, always []netip.Addr) (admin, baseline []renderer.TierRule) {
	has := func(ps []*ClusterPolicy) bool {
		for _, cp := range ps {
			if len(cp.tierRules(d)) > 0 {
				return true
			}
		}
		return false
	}
	hasBaseline := has(p.Baseline)
	if !hasBaseline && !has(p.Admin) {
		return nil, nil
	}
	baseline = m.tier(false, d, p.Baseline, nil, hasBaseline)
	admin = m.tier(true, d, p.Admin, alwaysAccepted(d, always), true)
	return admin, baseline
}

// aggregatePeers merges the peers of rules that differ only in their peer
// network into the fewest prefixes (renderer.AggregatePrefixes): a rule's order
// among the rules of its own action does not matter, and a peer that
// selects every pod of many namespaces costs a few dozen rules, not one
// per pod (VPP's ACLs hold every rule; nftables sets hold them as
// elements).
func aggregatePeers(d renderer.Direction, rules []renderer.Rule) []renderer.Rule {
	type shape struct {
		proto            renderer.Protocol
		srcPort, dstPort renderer.PortRange
		action           renderer.Action
	}
	peer := func(r *renderer.Rule) *netip.Prefix {
		if d == renderer.Ingress {
			return &r.SrcNetwork
		}
		return &r.DstNetwork
	}
	groups := map[shape][]netip.Prefix{}
	var order []shape
	var out []renderer.Rule
	for i := range rules {
		r := &rules[i]
		p := *peer(r)
		if !p.IsValid() {
			out = append(out, *r)
			continue
		}
		k := shape{r.Protocol, r.SrcPort, r.DstPort, r.Action}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], p)
	}
	if len(out) == len(rules) {
		return rules
	}
	for _, k := range order {
		for _, p := range renderer.AggregatePrefixes(groups[k]) {
			r := renderer.Rule{Protocol: k.proto, SrcPort: k.srcPort, DstPort: k.dstPort, Action: k.action}
			*peer(&r) = p
			out = append(out, r)
		}
	}
	return out
}
