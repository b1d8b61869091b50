package nftables

import (
	"maps"
	"net/netip"
	"slices"
	"strings"

	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/nft"
)

// ruleset is the content of the table's sets and maps, by frontend: what
// the renderer wants, or what the kernel holds (the mirror of what the
// renderer last wrote, or what Resync read).
type ruleset struct {
	frontends map[frontendKey]*frontendState
	// hairpin counts, per local endpoint address, the frontends that send
	// to it; the hairpin sets hold the addresses counted at least once.
	hairpin map[netip.Addr]int
	// uses counts, per pick chain and affinity timeout, the frontends
	// that refer to it.
	uses map[use]int
	// elements is the number of elements the frontends put in the table.
	elements int
	// stray are elements read from the kernel that vcoil did not write;
	// they are deleted.
	stray []*knftables.Element
}

func newRuleset() *ruleset {
	return &ruleset{frontends: map[frontendKey]*frontendState{}, hairpin: map[netip.Addr]int{}, uses: map[use]int{}}
}

// put sets (or, with f nil, removes) one frontend, keeping the counts.
func (r *ruleset) put(k frontendKey, f *frontendState) {
	if old := r.frontends[k]; old != nil {
		r.count(k, old, -1)
	}
	if f == nil {
		delete(r.frontends, k)
		return
	}
	r.frontends[k] = f
	r.count(k, f, 1)
}

func (r *ruleset) count(k frontendKey, f *frontendState, d int) {
	usesOf(k, f, func(u use) {
		r.uses[u] += d
		if r.uses[u] == 0 {
			delete(r.uses, u)
		}
	})
	for _, a := range f.Hairpin {
		r.hairpin[a] += d
		if r.hairpin[a] == 0 {
			delete(r.hairpin, a)
		}
	}
	r.elements += d * elementCount(f)
}

// overlay is a ruleset with staged frontend changes over a base that stays
// unchanged until commit: Update computes its transaction on one and
// commits only when the kernel took it.
type overlay struct {
	base    *ruleset
	changed map[frontendKey]*frontendState
	hairpin map[netip.Addr]int
	uses    map[use]int
	elems   int
}

func newOverlay(base *ruleset) *overlay {
	return &overlay{
		base: base, changed: map[frontendKey]*frontendState{},
		hairpin: maps.Clone(base.hairpin), uses: maps.Clone(base.uses), elems: base.elements,
	}
}

func (o *overlay) get(k frontendKey) *frontendState {
	if f, ok := o.changed[k]; ok {
		return f
	}
	return o.base.frontends[k]
}

func (o *overlay) put(k frontendKey, f *frontendState) {
	tmp := &ruleset{frontends: map[frontendKey]*frontendState{}, hairpin: o.hairpin, uses: o.uses, elements: o.elems}
	if old := o.get(k); old != nil {
		tmp.frontends[k] = old
	}
	tmp.put(k, f)
	o.elems = tmp.elements
	o.changed[k] = f
}

// commit applies the staged changes to the base.
func (o *overlay) commit() {
	for k, f := range o.changed {
		if f == nil {
			delete(o.base.frontends, k)
		} else {
			o.base.frontends[k] = f
		}
	}
	o.base.hairpin, o.base.uses, o.base.elements = o.hairpin, o.uses, o.elems
}

// tableObjects are the table's sets, maps and chains as the kernel holds
// them: names, and each chain's rule IDs.
type tableObjects struct {
	exists bool
	// format is the table's format version (formatversion.ServiceTable for what
	// the renderer wrote; 1 for a table without a format set).
	format int
	// sets holds sets and maps by name, true for maps.
	sets   map[string]bool
	chains map[string][]string
}

func objectsHeld(o objects) tableObjects {
	t := tableObjects{exists: true, format: formatversion.ServiceTable, sets: map[string]bool{}, chains: map[string][]string{}}
	for name, obj := range o.Sets {
		_, isMap := obj.(*knftables.Map)
		t.sets[name] = isMap
	}
	for _, c := range o.Chains {
		t.chains[c.Chain.Name] = c.ids()
	}
	return t
}

// plan is one transaction, built in the order the kernel can take it: new
// sets and chains before the rules and elements that refer to them, and
// deletions of elements before the chains they jump to.
type plan struct {
	addSets, addChains, rules, delSets, delChains []func(*knftables.Transaction)
	delElems, addElems, purge                     []nft.ElementOp
	// fresh: the plan creates the table (there was none).
	fresh bool
	// changes counts the operations that change the table.
	changes int
}

// script writes the plan as nft's input, one transaction. Sets, chains and
// rules are written by knftables; elements by nft.WriteElements, many per
// command, which knftables cannot do (nft parses ten thousand services'
// 110,000 commands in seconds more than the same elements in 110).
func (p *plan) script(newTx func() *knftables.Transaction, family knftables.Family, table string) (string, error) {
	var b strings.Builder
	objects := func(steps ...[]func(*knftables.Transaction)) error {
		tx := newTx()
		for _, step := range steps {
			for _, op := range step {
				op(tx)
			}
		}
		if tx.NumOperations() == 0 {
			return nil
		}
		text, err := nft.Script(tx)
		b.WriteString(text)
		return err
	}
	id := nft.TableID{Family: family, Name: table}
	elements := func(ops []nft.ElementOp) { nft.WriteElements(&b, id, ops) }
	if err := objects(p.addSets, p.addChains, p.rules); err != nil {
		return "", err
	}
	elements(p.elementOps())
	if err := objects(p.delSets, p.delChains); err != nil {
		return "", err
	}
	return b.String(), nil
}

// elementOps are the plan's element changes in the order they apply:
// deletes, adds, then each affinity entry purged (added before it is
// deleted, plan.purgeAffinity). It sorts the plan's lists.
func (p *plan) elementOps() []nft.ElementOp {
	sortBySet(p.delElems)
	sortBySet(p.addElems)
	sortBySet(p.purge)
	if len(p.delElems) == 0 && len(p.purge) == 0 {
		// Additions only (a new table's 110,000 elements): no copy.
		return p.addElems
	}
	ops := make([]nft.ElementOp, 0, len(p.delElems)+len(p.addElems)+2*len(p.purge))
	ops = append(append(append(ops, p.delElems...), p.addElems...), p.purge...)
	for _, op := range p.purge {
		op.Delete = true
		ops = append(ops, op)
	}
	return ops
}

// objectsOnly is the plan without its element changes.
func (p *plan) objectsOnly() *plan {
	o := *p
	o.delElems, o.addElems, o.purge = nil, nil, nil
	return &o
}

// elementsOnly says whether the plan changes elements and nothing else
// (no table, set, map, chain or rule).
func (p *plan) elementsOnly() bool {
	return len(p.addSets)+len(p.addChains)+len(p.rules)+len(p.delSets)+len(p.delChains) == 0
}

// sortBySet groups element operations by set, keeping their order within
// a set.
func sortBySet(ops []nft.ElementOp) {
	slices.SortStableFunc(ops, func(a, b nft.ElementOp) int { return strings.Compare(a.Set, b.Set) })
}

func (p *plan) empty() bool { return p.changes == 0 }

func (p *plan) op(step *[]func(*knftables.Transaction), f func(*knftables.Transaction)) {
	*step = append(*step, f)
	p.changes++
}

// objectsDiff plans the table, sets, maps and chains: missing ones are
// added, chains whose rules differ are flushed and refilled, and the ones
// not wanted are deleted.
func (p *plan) objectsDiff(have tableObjects, want objects) {
	if !have.exists {
		p.fresh = true
		p.op(&p.addSets, func(tx *knftables.Transaction) { tx.Add(&knftables.Table{}) })
	}
	for _, name := range slices.Sorted(maps.Keys(want.Sets)) {
		if _, ok := have.sets[name]; !ok {
			obj := want.Sets[name]
			p.op(&p.addSets, func(tx *knftables.Transaction) { tx.Add(obj) })
		}
	}
	for _, name := range slices.Sorted(maps.Keys(have.sets)) {
		if _, ok := want.Sets[name]; !ok {
			p.op(&p.delSets, func(tx *knftables.Transaction) {
				if have.sets[name] {
					tx.Delete(&knftables.Map{Name: name})
				} else {
					tx.Delete(&knftables.Set{Name: name})
				}
			})
		}
	}
	for _, c := range want.Chains {
		ids, exists := have.chains[c.Chain.Name]
		if !exists {
			p.op(&p.addChains, func(tx *knftables.Transaction) { tx.Add(c.Chain) })
		}
		if slices.Equal(ids, c.ids()) {
			continue
		}
		p.op(&p.rules, func(tx *knftables.Transaction) {
			if exists {
				tx.Flush(&knftables.Chain{Name: c.Chain.Name})
			}
			for _, r := range c.Rules {
				tx.Add(&knftables.Rule{Chain: c.Chain.Name, Rule: r, Comment: new(ruleID(r))})
			}
		})
	}
	for _, name := range slices.Sorted(maps.Keys(have.chains)) {
		if want.chain(name) == nil {
			p.op(&p.rules, func(tx *knftables.Transaction) { tx.Flush(&knftables.Chain{Name: name}) })
			p.op(&p.delChains, func(tx *knftables.Transaction) { tx.Delete(&knftables.Chain{Name: name}) })
		}
	}
}

// frontendDiff plans the elements of one frontend going from old to want
// (either may be nil).
func (p *plan) frontendDiff(k frontendKey, old, want *frontendState) {
	if old.equal(want) {
		return
	}
	type elem struct{ key, value []string }
	have := map[string]elem{}
	if old != nil {
		elementsOf(k, old, func(set string, key, value []string) {
			have[set+" "+joinKey(key)] = elem{key, value}
		})
	}
	if want != nil {
		elementsOf(k, want, func(set string, key, value []string) {
			id := set + " " + joinKey(key)
			if h, ok := have[id]; ok {
				delete(have, id)
				if slices.Equal(h.value, value) {
					return
				}
				p.delElem(set, key)
			}
			p.addElem(set, key, value)
		})
	}
	for id, e := range have {
		p.delElem(id[:indexByte(id, ' ')], e.key)
	}
}

func (p *plan) hairpinDiff(a netip.Addr, had, want bool) {
	if had == want {
		return
	}
	set := setHairpin + familyOf(a)
	if want {
		p.addElem(set, hairpinKey(a), nil)
	} else {
		p.delElem(set, hairpinKey(a))
	}
}

func (p *plan) addElem(set string, key, value []string) {
	p.addElems = append(p.addElems, nft.ElementOp{Set: set, Key: key, Value: value})
	p.changes++
}

func (p *plan) delElem(set string, key []string) {
	p.delElems = append(p.delElems, nft.ElementOp{Delete: true, Set: set, Key: key})
	p.changes++
}

// purgeAffinity removes a session affinity entry. The entry may time out
// between the listing and the transaction, and deleting a missing element
// fails the whole transaction, so it is added first (a no-op while it
// exists, since the value is the same) and then deleted.
func (p *plan) purgeAffinity(m string, key, value []string) {
	p.purge = append(p.purge, nft.ElementOp{Set: m, Key: key, Value: value})
	p.changes++
}

func joinKey(key []string) string {
	n := 0
	for _, k := range key {
		n += len(k) + 3
	}
	b := make([]byte, 0, n)
	for i, k := range key {
		if i > 0 {
			b = append(b, " . "...)
		}
		b = append(b, k...)
	}
	return string(b)
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}
