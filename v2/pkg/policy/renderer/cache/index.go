package cache

import (
	"net/netip"
	"slices"

	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// ruleIndex answers "what does this rule list permit for peer a?" without
// scanning the list: CombineRules asks it for every pair of local pods, and
// most rules name a single peer address.
//
// It relies on the shape renderer.PodRules guarantees: Permit rules, then one
// rule matching everything, so the list means the union of its Permit rules
// (or everything if it ends with PermitAll or is empty).
type ruleIndex struct {
	// open is set when the list permits everything.
	open bool
	// byHost holds the union of the Permit rules whose peer is one address.
	byHost map[netip.Addr]space
	// wide holds the Permit rules whose peer is a wider network or any.
	wide []renderer.Rule
	// peer picks the rule's peer network: the source for rules on traffic
	// towards the pod, the destination for rules on traffic from it.
	peer func(*renderer.Rule) netip.Prefix
}

func srcOf(r *renderer.Rule) netip.Prefix { return r.SrcNetwork }
func dstOf(r *renderer.Rule) netip.Prefix { return r.DstNetwork }

func newRuleIndex(rules []renderer.Rule, peer func(*renderer.Rule) netip.Prefix) *ruleIndex {
	ix := &ruleIndex{peer: peer}
	if len(rules) == 0 || rules[len(rules)-1].Action == renderer.ActionPermit {
		ix.open = true
		return ix
	}
	for i := range rules[:len(rules)-1] {
		r := &rules[i]
		p := peer(r)
		if p.IsValid() && p.IsSingleIP() {
			if ix.byHost == nil {
				ix.byHost = make(map[netip.Addr]space)
			}
			s := ix.byHost[p.Addr()]
			s.add(r)
			ix.byHost[p.Addr()] = s
			continue
		}
		ix.wide = append(ix.wide, *r)
	}
	return ix
}

// mayPermit reports whether some traffic with peer a may be permitted; when
// it is false, allowed(a) is empty.
func (ix *ruleIndex) mayPermit(a netip.Addr) bool {
	if ix.open {
		return true
	}
	if _, ok := ix.byHost[a]; ok {
		return true
	}
	for i := range ix.wide {
		if p := ix.peer(&ix.wide[i]); !p.IsValid() || p.Contains(a) {
			return true
		}
	}
	return false
}

// widePermits reports whether the list permits everything or has a rule
// on a wider network that holds a.
func (ix *ruleIndex) widePermits(a netip.Addr) bool {
	if ix.open {
		return true
	}
	for i := range ix.wide {
		if p := ix.peer(&ix.wide[i]); !p.IsValid() || p.Contains(a) {
			return true
		}
	}
	return false
}

// allowed returns the traffic the list permits with peer a. The result may
// share storage with the index: read it, do not change it.
func (ix *ruleIndex) allowed(a netip.Addr) space {
	if ix.open {
		return space{all: true}
	}
	s := ix.byHost[a]
	cloned := false
	for i := range ix.wide {
		r := &ix.wide[i]
		if p := ix.peer(r); !p.IsValid() || p.Contains(a) {
			if !cloned {
				s, cloned = s.clone(), true
			}
			s.add(r)
		}
	}
	return s
}

// changedHosts compares two indexes of the same pod's rules. If they differ
// only in rules naming single peer addresses, it returns those addresses
// and true; otherwise false.
func changedHosts(a, b *ruleIndex) ([]netip.Addr, bool) {
	if a.open != b.open || !slices.Equal(a.wide, b.wide) {
		return nil, false
	}
	var out []netip.Addr
	for k, sa := range a.byHost {
		if sb, ok := b.byHost[k]; !ok || !sa.equal(&sb) {
			out = append(out, k)
		}
	}
	for k := range b.byHost {
		if _, ok := a.byHost[k]; !ok {
			out = append(out, k)
		}
	}
	return out, true
}
