package nftables

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"
)

// planTxn plans a transaction: the changes of the addresses whose desired
// groups may have changed (want's), or of every address for a full one. read
// is the adoption of the kernel's table when the mirror was just read from
// it, nil when the mirror was already in sync.
func (r *Renderer) planTxn(affected map[netip.Addr]bool, full bool, read *adoption) *plan {
	if full {
		affected = r.allAddresses()
	}
	p := r.plan(affected)
	p.srcs = r.sources()
	if full {
		// The base is written when the table was just listed and is
		// missing, replaced, or not of this vcoild's layout.
		p.base = read != nil && (read.table == nil || read.purge || !baseMatches(read.table, r.cfg.PodIfPrefix))
		p.newTable = read != nil && read.table == nil
		p.purge = read != nil && read.purge
		p.deleteUnused(r)
	}
	return p
}

// plan is one transaction's changes to the mirror, and the script that
// makes them in the kernel.
type plan struct {
	base, purge bool
	newTable    bool // the table did not exist
	created     []*group
	// changed are groups whose sets change in place (same chain, same
	// signatures, new elements): peers came or went.
	changed []groupChange
	assign  []assignment
	deleted []*group
	idled   []*group       // groups the plan leaves without addresses
	refs    map[*group]int // refs after the plan
	srcs    [2][]interval  // the source sets after the plan
}

type groupChange struct {
	g   *group
	cc  *chainContent
	key string
}

type assignment struct {
	slot slot
	addr netip.Addr
	old  *group
	new  *group
}

// plan computes the changes for the given addresses.
func (r *Renderer) plan(addrs map[netip.Addr]bool) *plan {
	p := &plan{refs: map[*group]int{}}
	refs := func(g *group) int {
		if n, ok := p.refs[g]; ok {
			return n
		}
		return g.refs
	}
	sorted := make([]netip.Addr, 0, len(addrs))
	for a := range addrs {
		sorted = append(sorted, a)
	}
	slices.SortFunc(sorted, netip.Addr.Compare)
	for si := range r.elems {
		s := slot(si)
		type move struct {
			addr netip.Addr
			old  *group
			cc   *chainContent
			key  string
		}
		var moves []move
		for _, a := range sorted {
			cc, key := r.desired(s, a)
			old := r.elems[s][a]
			if (old == nil && key == "") || (old != nil && old.key == key) {
				continue
			}
			moves = append(moves, move{a, old, cc, key})
		}
		// keys is the post-plan group of each content key.
		keys := func(key string) *group {
			for _, ch := range p.changed {
				if ch.key == key {
					return ch.g
				}
				if ch.g.key == key {
					// That group is changing away from key.
					return nil
				}
			}
			for _, g := range p.created {
				if g.key == key {
					return g
				}
			}
			return r.byKey[key]
		}
		// A group all of whose addresses move to one new content of the
		// same signatures changes in place: a peer came or went.
		byOld := map[*group][]int{}
		for i, m := range moves {
			if m.old != nil {
				byOld[m.old] = append(byOld[m.old], i)
			}
		}
		done := make([]bool, len(moves))
		for _, g := range sortedGroups(byOld) {
			ix := byOld[g]
			first := moves[ix[0]]
			if len(ix) != g.refs || first.key == "" || keys(first.key) != nil || structureOf(first.cc.layouts()) != g.structure {
				continue
			}
			same := true
			for _, i := range ix[1:] {
				same = same && moves[i].key == first.key
			}
			if !same {
				continue
			}
			p.changed = append(p.changed, groupChange{g: g, cc: first.cc, key: first.key})
			for _, i := range ix {
				done[i] = true
			}
		}
		for i, m := range moves {
			if done[i] {
				continue
			}
			var ng *group
			if m.key != "" {
				if ng = keys(m.key); ng == nil {
					ls := m.cc.layouts()
					ng = &group{name: groupName(s.kind(), r.nextID+len(p.created)), kind: s.kind(), dir: s.dir(),
						cc: m.cc, key: m.key, layouts: ls, structure: structureOf(ls)}
					p.created = append(p.created, ng)
				}
			}
			if m.old != nil {
				p.refs[m.old] = refs(m.old) - 1
			}
			if ng != nil {
				p.refs[ng] = refs(ng) + 1
			}
			p.assign = append(p.assign, assignment{slot: s, addr: m.addr, old: m.old, new: ng})
		}
	}
	// Groups no address uses any more stay, idle, for the next pods with
	// their rules (a deployment scaled down and up, a label flipping back):
	// only the longest idle beyond maxIdle are deleted.
	r.txns++
	// A group that had addresses before the plan becomes idle now.
	idleSince := func(g *group) uint64 {
		if g.refs > 0 {
			return r.txns
		}
		return g.idleSince
	}
	var idle []*group
	for _, g := range r.groups {
		if n, planned := p.refs[g]; (planned && n == 0) || (!planned && g.refs == 0) {
			idle = append(idle, g)
			if g.refs > 0 {
				p.idled = append(p.idled, g)
			}
		}
	}
	if len(idle) > maxIdle {
		slices.SortFunc(idle, func(a, b *group) int {
			if c := cmp.Compare(idleSince(a), idleSince(b)); c != 0 {
				return c
			}
			return strings.Compare(a.name, b.name)
		})
		p.deleted = append(p.deleted, idle[:len(idle)-maxIdle]...)
	}
	slices.SortFunc(p.deleted, func(a, b *group) int { return strings.Compare(a.name, b.name) })
	return p
}

// maxIdle bounds the groups kept without addresses.
const maxIdle = 64

// deleteUnused adds every group that no address uses after the plan (idle
// ones, and those an earlier vcoild left) to the plan's deletions: a full
// resync leaves no idle group.
func (p *plan) deleteUnused(r *Renderer) {
	for _, g := range r.groups {
		n, planned := p.refs[g]
		if !planned {
			n = g.refs
		}
		if n == 0 {
			p.deleted = append(p.deleted, g)
		}
	}
	p.idled = nil
	slices.SortFunc(p.deleted, func(a, b *group) int { return strings.Compare(a.name, b.name) })
	p.deleted = slices.Compact(p.deleted)
}

func sortedGroups(m map[*group][]int) []*group {
	out := make([]*group, 0, len(m))
	for g := range m {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b *group) int { return strings.Compare(a.name, b.name) })
	return out
}

// commit makes the mirror what the kernel holds after the plan.
func (p *plan) commit(r *Renderer) {
	r.srcs = p.srcs
	for _, g := range p.created {
		r.groups[g.name] = g
		r.byKey[g.key] = g
		if _, n, ok := parseGroupName(g.name); ok && n >= r.nextID {
			r.nextID = n + 1
		}
	}
	for _, ch := range p.changed {
		if r.byKey[ch.g.key] == ch.g {
			delete(r.byKey, ch.g.key)
		}
		ch.g.cc, ch.g.key = ch.cc, ch.key
		r.byKey[ch.key] = ch.g
	}
	for _, a := range p.assign {
		if a.new == nil {
			delete(r.elems[a.slot], a.addr)
		} else {
			r.elems[a.slot][a.addr] = a.new
		}
	}
	for g, n := range p.refs {
		g.refs = n
	}
	for _, g := range p.idled {
		g.idleSince = r.txns
	}
	for _, g := range p.deleted {
		delete(r.groups, g.name)
		if r.byKey[g.key] == g {
			delete(r.byKey, g.key)
		}
	}
}
