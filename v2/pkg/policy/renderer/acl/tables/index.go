package tables

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

// diffPeers compares two rule lists sorted with their peer network as the
// first key (as the lists of one pod, old and new, are). If they differ only
// in rules naming single peer addresses, it returns those addresses and
// true; otherwise false. Lists that permit everything always report false.
func diffPeers(a, b []renderer.Rule, peer func(*renderer.Rule) netip.Prefix) ([]netip.Addr, bool) {
	if openList(a) || openList(b) {
		return nil, false
	}
	var out []netip.Addr
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		var p netip.Prefix
		switch {
		case i == len(a):
			p = peer(&b[j])
		case j == len(b):
			p = peer(&a[i])
		default:
			p = peer(&a[i])
			if q := peer(&b[j]); renderer.CompareNetworks(q, p) < 0 {
				p = q
			}
		}
		ei, ej := groupEnd(a, i, p, peer), groupEnd(b, j, p, peer)
		if !slices.Equal(a[i:ei], b[j:ej]) {
			if !p.IsValid() || !p.IsSingleIP() {
				return nil, false
			}
			out = append(out, p.Addr())
		}
		i, j = ei, ej
	}
	return out, true
}

func openList(rules []renderer.Rule) bool {
	return len(rules) == 0 || rules[len(rules)-1].Action == renderer.ActionPermit
}

// groupEnd returns the end of the run of rules from k whose peer is p (k
// itself when rules[k] has another peer).
func groupEnd(rules []renderer.Rule, k int, p netip.Prefix, peer func(*renderer.Rule) netip.Prefix) int {
	for k < len(rules) && peer(&rules[k]) == p {
		k++
	}
	return k
}

// updateHosts brings ix up to date with rules where only the rules naming
// the peer addresses hosts changed (see diffPeers).
func (ix *ruleIndex) updateHosts(rules []renderer.Rule, hosts []netip.Addr) {
	for _, h := range hosts {
		lo, hi := peerRange(rules, renderer.HostNetwork(h), ix.peer)
		if lo == hi {
			delete(ix.byHost, h)
			continue
		}
		var s space
		for k := lo; k < hi; k++ {
			s.add(&rules[k])
		}
		if ix.byHost == nil {
			ix.byHost = make(map[netip.Addr]space)
		}
		ix.byHost[h] = s
	}
}
