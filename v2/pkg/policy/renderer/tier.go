package renderer

import (
	"fmt"
	"net/netip"
)

// TierAction is what a rule of a ClusterNetworkPolicy tier does with a
// connection it matches.
type TierAction uint8

const (
	// TierAccept admits the connection: no tier below is asked.
	TierAccept TierAction = iota
	// TierDeny drops it.
	TierDeny
	// TierPass leaves the tier: the next tier decides.
	TierPass
)

func (a TierAction) String() string {
	switch a {
	case TierAccept:
		return "accept"
	case TierDeny:
		return "deny"
	case TierPass:
		return "pass"
	}
	return fmt.Sprintf("tier-action(%d)", a)
}

// TierRule is one rule of an Admin or Baseline tier (docs/policy.md,
// "ClusterNetworkPolicy"): the traffic Match matches (its Action is not
// used) gets Action. Policy and Name say where it comes from, for operators
// (counters, kubectl vcoil); renderers match and act by Match and Action
// alone.
type TierRule struct {
	Match  Rule
	Action TierAction
	// Policy is the ClusterNetworkPolicy's name ("" for the rules vcoil
	// adds itself: the traffic no policy can block).
	Policy string
	// Name is the rule's name in the policy, or its index when it has none.
	Name string
}

// Tiers are one direction of a pod's policies, tier by tier: Admin rules in
// evaluation order; its NetworkPolicy rule list (a list of the shape
// PodRules documents, empty when no NetworkPolicy isolates the pod in the
// direction); Baseline rules in evaluation order.
type Tiers struct {
	Admin         []TierRule
	NetworkPolicy []Rule
	Baseline      []TierRule
}

// Compile turns t into one list of Permit and Deny rules that decides
// every packet as the tiers do when applied with first-match semantics, and
// ends with a rule matching everything: for stacks without "go to the next
// tier", VPP's ACLs. The NetworkPolicy list of an isolated pod decides
// finally; else the Baseline rules do, Pass and no match permitting. An
// Admin Pass rule is replaced, at its place, by the list of the tiers below
// restricted to what it matches (each of their rules intersected with it):
// that list ends with a rule matching everything, so the Pass rule's
// traffic never reaches the Admin rules after it.
func (t Tiers) Compile() []Rule {
	rules, _ := t.compile(nil)
	return rules
}

// CompileWithOrigins is Compile, with the origin of each rule: the tier
// rule or NetworkPolicy list whose action it has (an Admin Pass's rules
// have those of the tiers below). np are the origins of t's NetworkPolicy
// list, (*Origin)(nil) for none; the Baseline's final permit and an Admin
// or Baseline rule of vcoild's own (no Policy) have none either. Equal
// origins are one pointer, so that a caller can compare them cheaply.
func (t Tiers) CompileWithOrigins(d Direction, np *Origin) ([]Rule, []*Origin) {
	return t.compile(&origins{d: d, np: np, byPolicy: map[tierPolicy]*Origin{}})
}

// Origin is where a rule of a compiled list or table comes from, for
// counting the packets it denies: one ClusterNetworkPolicy of a tier, or
// the NetworkPolicies that isolate the pod a NetworkPolicy list is for.
type Origin struct {
	// Tier is "admin", "baseline" or "networkpolicy".
	Tier      string
	Direction Direction
	// Policies are the ClusterNetworkPolicy (one name) or the
	// NetworkPolicies ("namespace/name").
	Policies []string
}

type tierPolicy struct {
	tier   string
	policy string
}

// origins makes the origins of one compilation.
type origins struct {
	d        Direction
	np       *Origin
	byPolicy map[tierPolicy]*Origin
}

func (o *origins) of(tier string, r TierRule) *Origin {
	if r.Policy == "" {
		return nil
	}
	k := tierPolicy{tier, r.Policy}
	if x := o.byPolicy[k]; x != nil {
		return x
	}
	x := &Origin{Tier: tier, Direction: o.d, Policies: []string{r.Policy}}
	o.byPolicy[k] = x
	return x
}

func (t Tiers) compile(o *origins) ([]Rule, []*Origin) {
	var out []Rule
	var from []*Origin
	add := func(r Rule, x *Origin) {
		out = append(out, r)
		if o != nil {
			from = append(from, x)
		}
	}
	lower := t.NetworkPolicy
	var lowerFrom []*Origin
	if o != nil {
		lowerFrom = make([]*Origin, len(lower))
		for i := range lowerFrom {
			lowerFrom[i] = o.np
		}
	}
	if len(lower) == 0 {
		lower = make([]Rule, 0, len(t.Baseline)+1)
		lowerFrom = lowerFrom[:0]
		for _, r := range t.Baseline {
			m := r.Match
			m.Action = ActionPermit
			if r.Action == TierDeny {
				m.Action = ActionDeny
			}
			lower = append(lower, m)
			if o != nil {
				lowerFrom = append(lowerFrom, o.of("baseline", r))
			}
		}
		lower = append(lower, PermitAll)
		if o != nil {
			lowerFrom = append(lowerFrom, nil)
		}
	}
	for _, r := range t.Admin {
		m := r.Match
		switch r.Action {
		case TierAccept:
			m.Action = ActionPermit
			add(m, o.ofIf("admin", r))
		case TierDeny:
			m.Action = ActionDeny
			add(m, o.ofIf("admin", r))
		case TierPass:
			for i, l := range lower {
				if x, ok := Intersect(m, l); ok {
					add(x, at(lowerFrom, i))
				}
			}
		}
	}
	for i, l := range lower {
		add(l, at(lowerFrom, i))
	}
	return out, from
}

// ofIf is of for a compilation that makes origins.
func (o *origins) ofIf(tier string, r TierRule) *Origin {
	if o == nil {
		return nil
	}
	return o.of(tier, r)
}

func at(l []*Origin, i int) *Origin {
	if l == nil {
		return nil
	}
	return l[i]
}

// Intersect returns the rule matching what both a and b match, with b's
// action, and false when nothing is matched by both. The intersection of
// two 6-tuples is one: the narrower of two nested networks, the overlap of
// two port ranges, the one protocol of the two (every protocol being the
// wider).
func Intersect(a, b Rule) (Rule, bool) {
	out := Rule{Action: b.Action}
	switch {
	case a.Protocol == b.Protocol || b.Protocol == ProtocolAny:
		out.Protocol = a.Protocol
	case a.Protocol == ProtocolAny:
		out.Protocol = b.Protocol
	default:
		return Rule{}, false
	}
	var ok bool
	if out.SrcNetwork, ok = intersectNetworks(a.SrcNetwork, b.SrcNetwork); !ok {
		return Rule{}, false
	}
	if out.DstNetwork, ok = intersectNetworks(a.DstNetwork, b.DstNetwork); !ok {
		return Rule{}, false
	}
	if out.SrcNetwork.IsValid() && out.DstNetwork.IsValid() && out.SrcNetwork.Addr().Is4() != out.DstNetwork.Addr().Is4() {
		return Rule{}, false
	}
	if out.SrcPort, ok = intersectPorts(a.SrcPort, b.SrcPort); !ok {
		return Rule{}, false
	}
	if out.DstPort, ok = intersectPorts(a.DstPort, b.DstPort); !ok {
		return Rule{}, false
	}
	if out.Protocol == ProtocolAny {
		// A rule of every protocol cannot restrict ports: a and b of
		// every protocol had none.
		out.SrcPort, out.DstPort = AnyPort, AnyPort
	}
	return out, true
}

// intersectNetworks: the zero prefix is every address of both families.
func intersectNetworks(a, b netip.Prefix) (netip.Prefix, bool) {
	switch {
	case !a.IsValid():
		return b, true
	case !b.IsValid():
		return a, true
	case a.Addr().Is4() != b.Addr().Is4():
		return netip.Prefix{}, false
	case a.Bits() >= b.Bits() && b.Contains(a.Addr()):
		return a, true
	case b.Bits() >= a.Bits() && a.Contains(b.Addr()):
		return b, true
	}
	return netip.Prefix{}, false
}

func intersectPorts(a, b PortRange) (PortRange, bool) {
	out := PortRange{First: max(a.First, b.First), Last: min(a.Last, b.Last)}
	return out, out.First <= out.Last
}
