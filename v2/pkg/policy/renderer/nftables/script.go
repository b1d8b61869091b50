package nftables

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/pkg/nft"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// steps is a plan as the kernel gets it: objects to create (before),
// element changes, objects to delete (after). New groups are complete
// before any address jumps to them, and groups are deleted only after no
// address jumps to them, so that each step is safe on its own.
//
// The element changes go into an nft script (a table's creation or
// replacement, one transaction with the objects) or over netlink (every
// other change): nft loads the elements of every interval set of the
// namespace before any element command, which costs a quarter of a second
// at a thousand pods (docs/policy.md); a netlink batch is one transaction
// too and costs what it changes.
type steps struct {
	before, after string
	ops           []nft.ElementOp
}

// text is the whole as one nft script.
func (s *steps) text(table string) string {
	var b strings.Builder
	b.WriteString(s.before)
	nft.WriteElements(&b, nft.TableID{Family: knftables.InetFamily, Name: table}, s.ops)
	b.WriteString(s.after)
	return b.String()
}

// script writes the plan's steps.
func (p *plan) script(r *Renderer) (*steps, error) {
	st := &steps{}
	var b strings.Builder
	objects := func(build func(tx *knftables.Transaction)) error {
		tx := r.k.t.NewTransaction()
		build(tx)
		if tx.NumOperations() == 0 {
			return nil
		}
		text, err := nft.Script(tx)
		if err != nil {
			return err
		}
		b.WriteString(text)
		return nil
	}
	elements := func(verb, set string, elems []string) {
		for _, e := range elems {
			key, value := nft.SplitElement(e)
			st.ops = append(st.ops, nft.ElementOp{Delete: verb == "delete", Set: set, Key: key, Value: value})
		}
	}
	err := objects(func(tx *knftables.Transaction) {
		if p.purge {
			tx.Delete(&knftables.Table{})
		}
		if p.base {
			tx.Add(&knftables.Table{Comment: knftables.PtrTo(formatComment)})
			tx.Add(nft.NewFormatSet(formatKind, formatVersion))
			for s, names := range slotMaps {
				for f, name := range names {
					tx.Add(&knftables.Map{Name: name, Type: addrType(f) + " : verdict",
						Comment: knftables.PtrTo("local pods' " + slot(s).kind().String() + " " + slot(s).dir().String() + " groups")})
				}
			}
			for f, name := range selfSets {
				set := &knftables.Set{Name: name, Type: addrType(f) + " . " + addrType(f),
					Comment: knftables.PtrTo("local pods with egress rules, each to itself (hairpin)")}
				tx.Add(set)
				// Refilled below from the egress maps: the set may be new
				// over an adopted table of an earlier layout.
				tx.Flush(set)
			}
			for f, name := range srcSets {
				set := &knftables.Set{Name: name, Type: addrType(f), Flags: []knftables.SetFlag{knftables.IntervalFlag},
					Comment: knftables.PtrTo("the sources local pods may send from")}
				tx.Add(set)
				// Refilled below: an adopted table's may be of another layout.
				tx.Flush(set)
			}
			tx.Add(&knftables.Counter{Name: counterUnknownSource,
				Comment: knftables.PtrTo("packets from local pods' interfaces with a source no local pod may use")})
			for _, c := range []struct {
				name string
				hook knftables.BaseChainHook
				prio knftables.BaseChainPriority
			}{
				{chainForward, knftables.ForwardHook, knftables.FilterPriority + "+10"},
				{chainPostrouting, knftables.PostroutingHook, knftables.SNATPriority + "+10"},
			} {
				ch := &knftables.Chain{Name: c.name, Type: knftables.PtrTo(knftables.FilterType), Hook: &c.hook, Priority: &c.prio}
				tx.Add(ch)
				tx.Flush(ch)
				for _, rule := range baseRules(r.cfg.PodIfPrefix)[c.name] {
					tx.Add(&knftables.Rule{Chain: c.name, Rule: rule, Comment: knftables.PtrTo(ruleID(rule))})
				}
			}
		}
	})
	if err != nil {
		return nil, err
	}
	if p.base {
		// Before the groups, whose drops add to them. Their counts start
		// again with the base: an adopted table's may hold addresses of
		// pods gone since.
		b.WriteString(deniedSetScript(r.cfg.Table))
		for _, names := range deniedSets {
			for _, name := range names {
				fmt.Fprintf(&b, "flush set inet %s %s\n", r.cfg.Table, name)
			}
		}
	}
	err = objects(func(tx *knftables.Transaction) {
		for _, g := range p.created {
			for _, s := range g.sets() {
				set := &knftables.Set{Name: s.name, Type: s.typ}
				if s.interval {
					set.Flags = []knftables.SetFlag{knftables.IntervalFlag}
				}
				if s.comment != "" {
					set.Comment = knftables.PtrTo(s.comment)
				}
				tx.Add(set)
			}
			tx.Add(&knftables.Counter{Name: g.name, Comment: knftables.PtrTo("packets the group's " + g.kind.String() + " " + g.dir.String() + " rules denied")})
			for _, c := range sortedCounters(dropCounters(g.kind, g.name, g.cc)) {
				tx.Add(&knftables.Counter{Name: c, Comment: knftables.PtrTo("packets a run of the group's " + g.kind.String() + " " + g.dir.String() + " rules denied")})
			}
			tx.Add(&knftables.Chain{Name: g.name, Comment: knftables.PtrTo(g.kind.String() + " " + g.dir.String())})
			for _, rule := range chainRules(g.kind, g.name, g.dir, g.layouts, r.cfg.LogDrops) {
				tx.Add(&knftables.Rule{Chain: g.name, Rule: rule, Comment: knftables.PtrTo(ruleID(rule))})
			}
		}
	})
	if err != nil {
		return nil, err
	}
	st.before = b.String()
	b.Reset()
	// Deletions first, so that a set's interval can grow into one that a
	// deleted element held.
	for _, ch := range p.changed {
		have, want := ch.g.cc.elements(ch.g.kind, ch.g.name), ch.cc.elements(ch.g.kind, ch.g.name)
		for _, set := range sortedKeys(have) {
			elements("delete", set, minus(have[set], want[set]))
		}
	}
	var dels, adds [nSlots][2][]string
	var selfDels, selfAdds [2][]string
	egress := map[netip.Addr]bool{} // addresses whose egress slots change
	for _, a := range p.assign {
		f := familyOf(a.addr)
		if a.old != nil {
			dels[a.slot][f] = append(dels[a.slot][f], a.addr.String())
		}
		if a.new != nil {
			adds[a.slot][f] = append(adds[a.slot][f], a.addr.String()+" : jump "+a.new.name)
		}
		if a.slot.dir() == renderer.Egress {
			egress[a.addr] = true
		}
	}
	if p.base {
		// The self sets were flushed: every egress address after the plan.
		for a := range p.egressAfter(r) {
			selfAdds[familyOf(a)] = append(selfAdds[familyOf(a)], selfElem(a))
		}
	} else {
		after := p.egressAfterOf(r, egress)
		for a := range egress {
			before := false
			for s := range r.elems {
				before = before || (slot(s).dir() == renderer.Egress && r.elems[s][a] != nil)
			}
			switch {
			case before && !after[a]:
				selfDels[familyOf(a)] = append(selfDels[familyOf(a)], selfElem(a))
			case !before && after[a]:
				selfAdds[familyOf(a)] = append(selfAdds[familyOf(a)], selfElem(a))
			}
		}
	}
	for f := range 2 {
		slices.Sort(selfDels[f])
		slices.Sort(selfAdds[f])
	}
	// A pod leaving takes its sources with it after its map elements, a
	// pod coming brings them before (below); the one netlink batch or nft
	// transaction makes the order moot, and the steps keep it anyway.
	var srcHave, srcWant [2][]string
	for f := range p.srcs {
		if !p.base {
			srcHave[f] = intervalElems(r.srcs[f])
		}
		srcWant[f] = intervalElems(p.srcs[f])
	}
	for d := range dels {
		for f := range dels[d] {
			elements("delete", slotMaps[d][f], dels[d][f])
		}
	}
	// An address that leaves its NetworkPolicy group takes its denied
	// count with it, so that a pod given the address later starts from
	// none. Adding first makes the delete valid whether or not a drop
	// added the element.
	var deniedGone [2][2][]string
	for _, a := range p.assign {
		if a.slot.kind() == kindNetworkPolicy && a.old != nil && a.new == nil {
			d, f := a.slot.dir(), familyOf(a.addr)
			deniedGone[d][f] = append(deniedGone[d][f], a.addr.String())
		}
	}
	for d := range deniedGone {
		for f, gone := range deniedGone[d] {
			elements("add", deniedSets[d][f], gone)
			elements("delete", deniedSets[d][f], gone)
		}
	}
	for f := range srcSets {
		elements("delete", srcSets[f], minus(srcHave[f], srcWant[f]))
	}
	for f := range selfDels {
		elements("delete", selfSets[f], selfDels[f])
	}
	for _, g := range p.created {
		el := g.cc.elements(g.kind, g.name)
		for _, set := range sortedKeys(el) {
			elements("add", set, el[set])
		}
	}
	for _, ch := range p.changed {
		have, want := ch.g.cc.elements(ch.g.kind, ch.g.name), ch.cc.elements(ch.g.kind, ch.g.name)
		for _, set := range sortedKeys(want) {
			elements("add", set, minus(want[set], have[set]))
		}
	}
	for f := range srcSets {
		elements("add", srcSets[f], minus(srcWant[f], srcHave[f]))
	}
	for f := range selfAdds {
		elements("add", selfSets[f], selfAdds[f])
	}
	for d := range adds {
		for f := range adds[d] {
			elements("add", slotMaps[d][f], adds[d][f])
		}
	}
	if !p.purge {
		err = objects(func(tx *knftables.Transaction) {
			for _, g := range p.deleted {
				ch := &knftables.Chain{Name: g.name}
				tx.Flush(ch)
				tx.Delete(ch)
				for _, s := range g.sets() {
					tx.Delete(&knftables.Set{Name: s.name})
				}
				tx.Delete(&knftables.Counter{Name: g.name})
				for _, c := range sortedCounters(dropCounters(g.kind, g.name, g.cc)) {
					tx.Delete(&knftables.Counter{Name: c})
				}
			}
		})
		if err != nil {
			return nil, err
		}
	}
	st.after = b.String()
	return st, nil
}

// egressAfter is the set of the addresses in some egress map once the plan
// is applied.
func (p *plan) egressAfter(r *Renderer) map[netip.Addr]bool {
	all := map[netip.Addr]bool{}
	for s := range r.elems {
		if slot(s).dir() == renderer.Egress {
			for a := range r.elems[s] {
				all[a] = true
			}
		}
	}
	for _, a := range p.assign {
		all[a.addr] = true
	}
	return p.egressAfterOf(r, all)
}

// egressAfterOf is egressAfter restricted to the addresses of addrs.
func (p *plan) egressAfterOf(r *Renderer, addrs map[netip.Addr]bool) map[netip.Addr]bool {
	type key struct {
		s slot
		a netip.Addr
	}
	in := map[key]bool{}
	for a := range addrs {
		for s := range r.elems {
			if slot(s).dir() == renderer.Egress && r.elems[s][a] != nil {
				in[key{slot(s), a}] = true
			}
		}
	}
	for _, a := range p.assign {
		if !addrs[a.addr] {
			continue
		}
		if a.slot.dir() == renderer.Egress {
			in[key{a.slot, a.addr}] = a.new != nil
		}
	}
	out := map[netip.Addr]bool{}
	for k, ok := range in {
		if ok {
			out[k.a] = true
		}
	}
	return out
}

func sortedKeys(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// minus is a without the elements of b.
func minus(a, b []string) []string {
	in := make(map[string]bool, len(b))
	for _, e := range b {
		in[e] = true
	}
	var out []string
	for _, e := range a {
		if !in[e] {
			out = append(out, e)
		}
	}
	return out
}

func sortedCounters(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for c := range m {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}
