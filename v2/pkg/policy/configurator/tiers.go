package configurator

import (
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

// tiers returns the pod's Admin and Baseline rules of direction d, with
// the peers no policy can block accepted first when there is any; the
// previous slices themselves when they are equal.
func tiers(d renderer.Direction, p *Pod, always []netip.Addr, prevAdmin, prevBaseline []renderer.TierRule) (admin, baseline []renderer.TierRule) {
	baseline = GenerateTier(d, p.Baseline)
	admin = GenerateTier(d, p.Admin)
	if len(admin)+len(baseline) > 0 {
		admin = append(alwaysAccepted(d, always), admin...)
	}
	if slices.Equal(admin, prevAdmin) {
		admin = prevAdmin
	}
	if slices.Equal(baseline, prevBaseline) {
		baseline = prevBaseline
	}
	return admin, baseline
}
