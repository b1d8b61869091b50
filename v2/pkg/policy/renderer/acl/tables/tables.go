// Package tables is the renderer cache (docs/background.md#the-renderer-cache
// and #where-acls-sit-relative-to-nat): it combines the per-pod rule
// lists of the configurator into rule tables. It keeps the rules of every
// local pod as the configurator sent them, combines the two directions of
// every pod into local tables attached to one direction of the pods
// (CombineRules), builds the node's global table (BuildGlobalTable), shares
// one local table between pods whose tables are equal, and tells a renderer
// the minimal changes of each transaction.
//
// Directions are the pod's (renderer.Direction): a Cache made with
// New(renderer.Ingress) has local tables that filter the traffic into each
// pod. A renderer whose stack names directions from the vswitch's side
// translates with renderer.OnVSwitch.
//
// The cache holds the desired state, not what a network stack has: if a
// renderer fails to apply a transaction's Changes, it re-renders the whole
// state (LocalTables, Assignments, GlobalTable) on its next resync.
//
// A Cache is pure logic, not safe for concurrent use; a renderer owns one.
package tables

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"

	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// Assignment says which local table a pod has. An empty Table means none:
// nothing restricts the pod's traffic in the cache's direction.
type Assignment struct {
	Pod   renderer.PodID
	Table renderer.TableID
}

// Changes is what one transaction changed. Each table is in at most one of
// Added, Changed and Removed. Renderers apply Added and Changed tables, then
// Assignments, then remove Removed tables, so that no pod is ever left
// without its table.
type Changes struct {
	// Added are new local tables.
	Added []renderer.Table
	// Changed are local tables that keep their ID but have new rules.
	Changed []renderer.Table
	// Removed are local tables no pod uses any more.
	Removed []renderer.TableID
	// Assignments are the pods whose local table changed, including removed
	// pods (with no table).
	Assignments []Assignment
	// Global is the new global table, or nil if it did not change. A global
	// table without rules means there is none.
	Global *renderer.Table
}

// Empty reports whether the transaction changed nothing.
func (c *Changes) Empty() bool {
	return len(c.Added) == 0 && len(c.Changed) == 0 && len(c.Removed) == 0 &&
		len(c.Assignments) == 0 && c.Global == nil
}

// Cache is the renderer cache. The zero value is not usable; call New.
type Cache struct {
	dir  renderer.Direction
	pods map[renderer.PodID]*podState
	byIP map[netip.Addr]*podState

	tables map[renderer.TableID]*table
	byHash map[uint64][]*table
	nextID uint64

	// globalBlocks holds, per address of a local pod isolated for traffic
	// from it, that pod's rules with the address as source (Ingress
	// orientation); the global table is their concatenation in address order.
	globalBlocks map[netip.Addr][]renderer.Rule
	global       []renderer.Rule

	// restricting holds, sorted, the addresses of the pods whose rules on
	// traffic from them restrict something: only they can make CombineRules
	// change another pod's table.
	restricting []netip.Addr

	// permitters and wide index the pods by what their own rules permit:
	// the pods with a rule naming a peer address, and the pods with rules
	// on wider networks (or no restriction). When a peer's rules change,
	// only these pods' tables can change.
	permitters map[netip.Addr]map[renderer.PodID]struct{}
	wide       map[renderer.PodID]struct{}
}

// podState is one known pod. Rules are kept in the Ingress orientation
// (see orient): own are the rules of the cache's direction, out those of the
// other; own filters traffic towards the pod (peer = source), out filters
// traffic from it (peer = destination).
type podState struct {
	in         renderer.PodRules
	own, out   []renderer.Rule
	ownIx      *ruleIndex
	outIx      *ruleIndex
	blocks     *insertions     // CombineRules insertions, per peer address; nil if none
	content    []renderer.Rule // the local table, output orientation
	table      *table
	needsTable bool
	// dirty are peer addresses whose insertions must be recomputed.
	dirty []netip.Addr
	// rebuilt is set while all the pod's insertions were just recomputed.
	rebuilt bool
	// fullTable is set when the table must be built from scratch; else
	// patches are the peer addresses whose insertions changed, and only
	// their part of the table is replaced.
	fullTable bool
	patches   []netip.Addr
}

type table struct {
	id    renderer.TableID
	rules []renderer.Rule
	hash  uint64
	pods  map[renderer.PodID]struct{}
}

// New returns an empty cache whose local tables are attached to direction d
// of the pods: each pod's local table combines both directions' rules into
// rules on the pod's traffic in direction d.
//
//   - renderer.Ingress is for stacks that can only filter after services are
//     translated, like VPP ACLs (output ACLs of pod interfaces:
//     renderer.OnVSwitch(renderer.Ingress) is renderer.VSwitchEgress): a
//     pod's local table filters the traffic into the pod, and the global
//     table filters the traffic leaving the node through its uplinks. A
//     connection is decided by the destination's local table if the
//     destination is a local pod, else by the global table; replies of
//     admitted connections must be let through (reflected) on every
//     interface.
//   - renderer.Egress is the mirror, for stacks that filter where traffic
//     enters the vswitch (session rules of VPP's TCP stack in the Contiv/VPP
//     design): a pod's local table filters the traffic out of the pod, and
//     the global table filters the traffic entering the node from its
//     uplinks. A connection is decided by the source's local table if the
//     source is a local pod, else by the global table.
func New(d renderer.Direction) *Cache {
	return &Cache{
		dir:          d,
		pods:         make(map[renderer.PodID]*podState),
		byIP:         make(map[netip.Addr]*podState),
		permitters:   make(map[netip.Addr]map[renderer.PodID]struct{}),
		wide:         make(map[renderer.PodID]struct{}),
		tables:       make(map[renderer.TableID]*table),
		byHash:       make(map[uint64][]*table),
		globalBlocks: make(map[netip.Addr][]renderer.Rule),
	}
}

// Direction returns the direction of the pods that the local tables are
// attached to.
func (c *Cache) Direction() renderer.Direction { return c.dir }

// orient turns a rule list between the renderer's orientation and the
// Ingress orientation in which the algorithms are written (the orientation of
// rules on traffic into a pod: the peer is the source). For a cache of
// renderer.Egress it swaps source and destination networks, as the Contiv/VPP
// design does (docs/background.md#where-acls-sit-relative-to-nat); ports
// stay, since the destination port is the port of the connection's server
// either way.
func (c *Cache) orient(rules []renderer.Rule) []renderer.Rule {
	if c.dir == renderer.Ingress || len(rules) == 0 {
		return rules
	}
	out := make([]renderer.Rule, len(rules))
	for i, r := range rules {
		r.SrcNetwork, r.DstNetwork = r.DstNetwork, r.SrcNetwork
		out[i] = r
	}
	return out
}

// output turns a table built in the Ingress orientation into the
// renderer's, sorted by Rule.Compare.
func (c *Cache) output(rules []renderer.Rule) []renderer.Rule {
	if c.dir == renderer.Ingress {
		return rules
	}
	out := c.orient(rules)
	renderer.SortRules(out)
	return out
}

// Apply records a transaction from the configurator and returns what changed.
// A transaction that is not valid is rejected as a whole and changes nothing.
func (c *Cache) Apply(txn renderer.Txn) (Changes, error) {
	if err := c.validate(txn); err != nil {
		return Changes{}, err
	}
	w := c.swapIn(c.updatesOf(txn))
	c.combineChanged(w)
	var ch Changes
	c.assignTables(c.rebuildTables(), w.removed, &ch)
	if w.globalDirty {
		g := c.buildGlobalTable()
		if !slices.Equal(g, c.global) {
			c.global = g
			ch.Global = &renderer.Table{ID: renderer.GlobalTableID, Rules: g}
		}
	}
	return ch, nil
}

// update is one pod whose input changed: old or new is nil when it appears
// or disappears.
type update struct {
	id       renderer.PodID
	old, new *podState
}

// updatesOf works out which pods a transaction really changes, in pod order.
func (c *Cache) updatesOf(txn renderer.Txn) []update {
	var updates []update
	seen := make(map[renderer.PodID]bool, len(txn.Pods))
	for i := range txn.Pods {
		pr := &txn.Pods[i]
		seen[pr.Pod] = true
		old := c.pods[pr.Pod]
		switch {
		case pr.Removed:
			if old != nil {
				updates = append(updates, update{id: pr.Pod, old: old})
			}
		case old == nil || !old.sameInput(pr):
			updates = append(updates, update{id: pr.Pod, old: old, new: c.newPodState(pr)})
		default:
			// The tables do not change, but Pods returns the newest
			// input: the ACL renderer hands it to the ordered cache when
			// tiers appear (a pod's stale tiers would come back).
			old.in = *pr
		}
	}
	if txn.Resync {
		for id, old := range c.pods {
			if !seen[id] {
				updates = append(updates, update{id: id, old: old})
			}
		}
	}
	slices.SortFunc(updates, func(a, b update) int { return a.id.Compare(b.id) })
	return updates
}

// work is what swapIn leaves for the rest of a transaction.
type work struct {
	// rebuildAll are pods whose insertions must all be recomputed (new
	// pods, new addresses, or own rules changed beyond single peers).
	rebuildAll []*podState
	// partial are pods whose own rules changed only for single peer
	// addresses (podState.dirty).
	partial []*podState
	// dirtyPeers are addresses whose pod's rules on traffic from it
	// changed: every local table's insertions for them are recomputed.
	dirtyPeers map[netip.Addr]struct{}
	removed    []*podState
	// globalDirty is set when the global table may have changed.
	globalDirty bool
}

// swapIn replaces the states of updated pods, keeps the indexes up to date,
// and sorts out how much of each table must be recomputed.
func (c *Cache) swapIn(updates []update) *work {
	w := &work{dirtyPeers: make(map[netip.Addr]struct{})}
	for _, u := range updates {
		both := u.old != nil && u.new != nil
		ipsChanged := !both || !slices.Equal(u.old.in.IPs, u.new.in.IPs)
		outRulesChanged := !both || !sameRules(u.old.out, u.new.out)
		ownRulesChanged := !both || !sameRules(u.old.own, u.new.own)
		outChanged := ipsChanged || outRulesChanged
		ownChanged := ipsChanged || ownRulesChanged
		if u.new != nil {
			// Indexes depend on the rules only: keep or patch the old ones
			// where the rules allow (the old state is dropped).
			if outRulesChanged {
				u.new.outIx = newRuleIndex(u.new.out, dstOf)
			} else {
				u.new.outIx = u.old.outIx
			}
			switch {
			case !ownRulesChanged:
				u.new.ownIx = u.old.ownIx
			case !ipsChanged:
				// The permitters index is then updated for these hosts
				// only, so the old index may be changed in place.
				if hosts, ok := diffPeers(u.old.own, u.new.own, srcOf); ok {
					u.new.ownIx = u.old.ownIx
					u.new.ownIx.updateHosts(u.new.own, hosts)
					u.new.dirty = hosts
				}
			}
			if u.new.ownIx == nil {
				u.new.ownIx = newRuleIndex(u.new.own, srcOf)
			}
		}
		if u.old != nil {
			for _, a := range u.old.in.IPs {
				if c.byIP[a] == u.old {
					delete(c.byIP, a)
				}
			}
			delete(c.pods, u.id)
		}
		switch {
		case u.new == nil:
			c.unindexPermits(u.old)
			w.removed = append(w.removed, u.old)
		case u.old == nil:
			c.indexPermits(u.new, nil)
			w.rebuildAll = append(w.rebuildAll, u.new)
		default:
			// The pod keeps its table until assignTables decides.
			u.new.content, u.new.table = u.old.content, u.old.table
			switch {
			case !ownChanged:
				// Its insertions stay valid while its own rules and
				// addresses do.
				u.new.blocks = u.old.blocks
			case !ipsChanged && u.new.dirty != nil:
				// Usually a policy gained or lost a peer: only the
				// insertions for those peers' addresses can change.
				u.new.blocks = u.old.blocks
				if u.new.blocks == nil {
					u.new.blocks = &insertions{}
				}
				w.partial = append(w.partial, u.new)
				c.indexPermits(u.new, u.new.dirty)
			default:
				u.new.dirty = nil
				c.unindexPermits(u.old)
				c.indexPermits(u.new, nil)
				w.rebuildAll = append(w.rebuildAll, u.new)
			}
		}
		if u.new != nil {
			c.pods[u.id] = u.new
			for _, a := range u.new.in.IPs {
				c.byIP[a] = u.new
			}
		}
		if outChanged {
			w.globalDirty = true
			for _, s := range []*podState{u.old, u.new} {
				if s == nil {
					continue
				}
				for _, a := range s.in.IPs {
					w.dirtyPeers[a] = struct{}{}
					delete(c.globalBlocks, a)
				}
			}
			if u.new != nil {
				c.setGlobalBlocks(u.new)
			}
		}
	}
	if w.globalDirty {
		c.restricting = c.restricting[:0]
		for a, p := range c.byIP {
			if !p.outIx.open {
				c.restricting = append(c.restricting, a)
			}
		}
		slices.SortFunc(c.restricting, netip.Addr.Compare)
	}
	return w
}

// combineChanged runs CombineRules where the transaction may have changed
// its result: all of a rebuilt pod's peers, a partial pod's changed peers,
// and every pod that permits something from a dirty peer address.
func (c *Cache) combineChanged(w *work) {
	for _, p := range w.rebuildAll {
		p.blocks = &insertions{}
		c.combineCandidates(p, func(x netip.Addr) {
			if b := c.combine(p, x); b != nil {
				p.blocks.set(x, b)
			}
		})
		p.needsTable, p.rebuilt, p.fullTable = true, true, true
	}
	recombine := func(p *podState, x netip.Addr) {
		b := c.combine(p, x)
		if slices.Equal(b, p.blocks.get(x)) {
			return
		}
		if p.blocks == nil {
			p.blocks = &insertions{}
		}
		p.blocks.set(x, b)
		p.needsTable = true
		if !p.fullTable {
			p.patches = append(p.patches, x)
		}
	}
	for _, p := range w.partial {
		// The own rules changed: the table is rebuilt even if no
		// insertion changes.
		p.needsTable, p.fullTable = true, true
		for _, x := range p.dirty {
			recombine(p, x)
		}
		p.dirty = nil
	}
	for x := range w.dirtyPeers {
		for id := range c.permitters[x] {
			if p := c.pods[id]; !p.rebuilt {
				recombine(p, x)
			}
		}
		for id := range c.wide {
			if p := c.pods[id]; !p.rebuilt && p.ownIx.widePermits(x) {
				recombine(p, x)
			}
		}
	}
}

// rebuildTables builds the local table of every pod marked by
// combineChanged and returns, in pod order, those whose table content
// changed.
func (c *Cache) rebuildTables() []*podState {
	var retable []*podState
	for _, p := range c.pods {
		if !p.needsTable {
			continue
		}
		var content []renderer.Rule
		if !p.fullTable && p.table != nil && p.blocks.len() > 0 && len(p.patches) <= 8 {
			content = c.patchTable(p)
		} else {
			content = c.localTable(p)
		}
		p.needsTable, p.rebuilt, p.fullTable, p.patches = false, false, false, nil
		if p.table != nil && slices.Equal(content, p.content) {
			continue
		}
		if p.table == nil && len(content) == 0 {
			p.content = nil
			continue
		}
		p.content = content
		retable = append(retable, p)
	}
	slices.SortFunc(retable, func(a, b *podState) int { return a.in.Pod.Compare(b.in.Pod) })
	return retable
}

func (c *Cache) newPodState(pr *renderer.PodRules) *podState {
	p := &podState{in: *pr}
	p.in.IPs = slices.Clone(pr.IPs)
	if c.dir == renderer.Ingress {
		p.own, p.out = pr.Ingress, pr.Egress
	} else {
		p.own, p.out = c.orient(pr.Egress), c.orient(pr.Ingress)
	}
	return p
}

func (p *podState) sameInput(pr *renderer.PodRules) bool {
	return slices.Equal(p.in.IPs, pr.IPs) && sameRules(p.in.Ingress, pr.Ingress) && sameRules(p.in.Egress, pr.Egress)
}

// sameRules compares rule lists, at once when they are the same slice (the
// configurator sends the same slice again when a pod's rules did not change).
func sameRules(a, b []renderer.Rule) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || &a[0] == &b[0] {
		return true
	}
	return slices.Equal(a, b)
}

// validate rejects a transaction whose rule lists are not shaped as
// renderer.PodRules promises: the cache's index depends on it. Pods whose
// input did not change were checked when it did.
func (c *Cache) validate(txn renderer.Txn) error {
	seen := make(map[renderer.PodID]bool, len(txn.Pods))
	for i := range txn.Pods {
		pr := &txn.Pods[i]
		if seen[pr.Pod] {
			return fmt.Errorf("pod %s: listed twice in one transaction", pr.Pod)
		}
		seen[pr.Pod] = true
		if pr.Removed {
			continue
		}
		if old := c.pods[pr.Pod]; old != nil && old.sameInput(pr) {
			continue
		}
		if len(pr.IPs) == 0 {
			return fmt.Errorf("pod %s: no address", pr.Pod)
		}
		v4, v6 := 0, 0
		for _, a := range pr.IPs {
			switch {
			case !a.IsValid() || a.Is4In6():
				return fmt.Errorf("pod %s: address %v is not valid or is IPv4-mapped", pr.Pod, a)
			case a.Is4():
				v4++
			default:
				v6++
			}
		}
		if v4 > 1 || v6 > 1 {
			return fmt.Errorf("pod %s: addresses %v: more than one per family", pr.Pod, pr.IPs)
		}
		for _, l := range []struct {
			d     renderer.Direction
			rules []renderer.Rule
		}{{renderer.Egress, pr.Egress}, {renderer.Ingress, pr.Ingress}} {
			if err := renderer.ValidateRuleList(l.d, l.rules); err != nil {
				return fmt.Errorf("pod %s: %w", pr.Pod, err)
			}
			for j, r := range l.rules {
				if !r.SrcPort.IsAny() {
					return fmt.Errorf("pod %s: %s rule %d (%v): source ports cannot be combined", pr.Pod, l.d, j, r)
				}
			}
		}
	}
	return nil
}

// indexPermits records in permitters and wide what p's own rules permit;
// hosts limits the update to those peer addresses (nil: all of p's).
func (c *Cache) indexPermits(p *podState, hosts []netip.Addr) {
	id := p.in.Pod
	if hosts != nil {
		for _, a := range hosts {
			if _, ok := p.ownIx.byHost[a]; ok {
				c.addPermitter(a, id)
			} else {
				c.removePermitter(a, id)
			}
		}
		return
	}
	if p.ownIx.open || len(p.ownIx.wide) > 0 {
		c.wide[id] = struct{}{}
	}
	for a := range p.ownIx.byHost {
		c.addPermitter(a, id)
	}
}

// unindexPermits forgets p in permitters and wide.
func (c *Cache) unindexPermits(p *podState) {
	delete(c.wide, p.in.Pod)
	for a := range p.ownIx.byHost {
		c.removePermitter(a, p.in.Pod)
	}
}

func (c *Cache) addPermitter(a netip.Addr, id renderer.PodID) {
	set := c.permitters[a]
	if set == nil {
		set = make(map[renderer.PodID]struct{})
		c.permitters[a] = set
	}
	set[id] = struct{}{}
}

func (c *Cache) removePermitter(a netip.Addr, id renderer.PodID) {
	if set := c.permitters[a]; set != nil {
		delete(set, id)
		if len(set) == 0 {
			delete(c.permitters, a)
		}
	}
}

// combineCandidates calls visit for every address x for which combine(p, x)
// may return insertions: addresses of restricting pods that p's own rules
// permit something from. It is how a pod's table is rebuilt without
// visiting every other local pod.
func (c *Cache) combineCandidates(p *podState, visit func(netip.Addr)) {
	ix := p.ownIx
	if ix.open {
		for _, x := range c.restricting {
			visit(x)
		}
		return
	}
	for _, w := range ix.wide {
		if !w.SrcNetwork.IsValid() {
			for _, x := range c.restricting {
				visit(x)
			}
			return
		}
	}
	var seen map[netip.Addr]bool
	if len(ix.wide) > 0 {
		seen = make(map[netip.Addr]bool)
	}
	for a := range ix.byHost {
		if other := c.byIP[a]; other != nil && !other.outIx.open {
			if seen != nil {
				seen[a] = true
			}
			visit(a)
		}
	}
	for _, w := range ix.wide {
		n := w.SrcNetwork
		i, _ := slices.BinarySearchFunc(c.restricting, n.Addr(), netip.Addr.Compare)
		for ; i < len(c.restricting) && n.Contains(c.restricting[i]); i++ {
			if x := c.restricting[i]; !seen[x] {
				seen[x] = true
				visit(x)
			}
		}
	}
}

// combine is the body of CombineRules
// (docs/background.md#combinerules-and-local-tables) for one target pod p
// (pod1) and one address x of another known pod (pod2): if what p permits
// from x is not all permitted by x's own rules towards p, it returns the
// rules that replace p's rules for source x: Permit the intersection, then
// deny the rest from x. Otherwise it returns nil and p's rules stand.
func (c *Cache) combine(p *podState, x netip.Addr) []renderer.Rule {
	other := c.byIP[x]
	if other == nil || other == p || other.outIx.open {
		return nil
	}
	y, ok := addrOfFamily(p.in.IPs, x.Is4())
	if !ok || !p.ownIx.mayPermit(x) {
		return nil
	}
	permitted := p.ownIx.allowed(x)   // what p lets in from x
	offered := other.outIx.allowed(y) // what x may send to p
	if offered.covers(&permitted) {
		return nil
	}
	both := offered.intersect(&permitted)
	src := renderer.HostNetwork(x)
	rules := both.appendRules(make([]renderer.Rule, 0, both.rules()+1), src)
	deny := renderer.DenyAll
	deny.SrcNetwork = src
	return append(rules, deny)
}

func addrOfFamily(ips []netip.Addr, v4 bool) (netip.Addr, bool) {
	for _, a := range ips {
		if a.Is4() == v4 {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// localTable is the Contiv/VPP design's buildLocalTable: p's own rules,
// where the rules for each combined peer address are replaced by its
// insertions, in output orientation. An open pod with no insertions has no table.
func (c *Cache) localTable(p *podState) []renderer.Rule {
	if p.blocks.len() == 0 {
		if p.ownIx.open {
			return nil
		}
		return c.output(p.own)
	}
	base := p.own
	if p.ownIx.open {
		base = []renderer.Rule{renderer.PermitAll}
	}
	rules := make([]renderer.Rule, 0, len(base)+p.blocks.size)
	// Both lists are sorted, and all insertions for one address have that
	// address as source, which is the first key of Rule.Compare: merge them
	// by source, leaving out the own rules whose source was combined.
	entries := p.blocks.entries
	j := 0
	for _, r := range base {
		for ; j < len(entries); j++ {
			if renderer.CompareNetworks(renderer.HostNetwork(entries[j].addr), r.SrcNetwork) > 0 {
				break
			}
			rules = append(rules, entries[j].rules...)
		}
		if j > 0 && renderer.HostNetwork(entries[j-1].addr) == r.SrcNetwork {
			continue // replaced by the insertions for that address
		}
		rules = append(rules, r)
	}
	for ; j < len(entries); j++ {
		rules = append(rules, entries[j].rules...)
	}
	return c.output(rules)
}

// patchTable is localTable for a pod whose own rules did not change and
// whose insertions changed only for the addresses in p.patches: in the
// sorted table, the rules for one peer address are contiguous, so each is
// swapped for the pod's new insertions for it, or for its own rules on that
// peer if it has none any more.
func (c *Cache) patchTable(p *podState) []renderer.Rule {
	content := p.content
	peer := srcOf // the peer network in the output orientation
	if c.dir == renderer.Egress {
		peer = dstOf
	}
	for _, x := range p.patches {
		host := renderer.HostNetwork(x)
		lo, hi := peerRange(content, host, peer)
		repl := p.blocks.get(x)
		if repl == nil {
			olo, ohi := peerRange(p.own, host, srcOf)
			repl = p.own[olo:ohi]
		}
		repl = c.orient(repl)
		out := make([]renderer.Rule, 0, len(content)-(hi-lo)+len(repl))
		out = append(out, content[:lo]...)
		out = append(out, repl...)
		content = append(out, content[hi:]...)
	}
	return content
}

// peerRange returns the range of sorted rules whose peer network is host.
func peerRange(rules []renderer.Rule, host netip.Prefix, peer func(*renderer.Rule) netip.Prefix) (int, int) {
	lo := sort.Search(len(rules), func(i int) bool {
		return renderer.CompareNetworks(peer(&rules[i]), host) >= 0
	})
	hi := lo
	for hi < len(rules) && peer(&rules[hi]) == host {
		hi++
	}
	return lo, hi
}

// setGlobalBlocks records the part of BuildGlobalTable that comes from pod p:
// each of its rules on traffic from it, with the source changed from "any"
// to the pod's address of the rule's family.
func (c *Cache) setGlobalBlocks(p *podState) {
	if p.outIx.open {
		return
	}
	for _, x := range p.in.IPs {
		src := renderer.HostNetwork(x)
		block := make([]renderer.Rule, 0, len(p.out))
		for _, r := range p.out {
			if r.DstNetwork.IsValid() && r.DstNetwork.Addr().Is4() != x.Is4() {
				continue
			}
			r.SrcNetwork = src
			block = append(block, r)
		}
		c.globalBlocks[x] = block
	}
}

// buildGlobalTable is BuildGlobalTable (docs/background.md#buildglobaltable):
// the rules of every local pod on traffic from it, with its address as
// source, and PermitAll for the rest. In the Ingress orientation the blocks
// are already in Compare order when concatenated by address (the source
// network is the first key).
func (c *Cache) buildGlobalTable() []renderer.Rule {
	if len(c.globalBlocks) == 0 {
		return nil
	}
	addrs := make([]netip.Addr, 0, len(c.globalBlocks))
	n := 1
	for a, b := range c.globalBlocks {
		addrs = append(addrs, a)
		n += len(b)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	rules := make([]renderer.Rule, 0, n)
	for _, a := range addrs {
		rules = append(rules, c.globalBlocks[a]...)
	}
	rules = append(rules, renderer.PermitAll)
	return c.output(rules)
}

// assignTables gives each retabled pod a table with its new content, sharing
// equal tables, and records the minimal changes: a table whose pods all
// left is changed in place for one of them if its content is new, else
// removed.
func (c *Cache) assignTables(retable, removed []*podState, ch *Changes) {
	before := make(map[renderer.PodID]*table, len(retable)+len(removed))
	freed := make(map[*table]bool)
	detach := func(p *podState) {
		before[p.in.Pod] = p.table
		if t := p.table; t != nil {
			delete(t.pods, p.in.Pod)
			if len(t.pods) == 0 {
				freed[t] = true
			}
		}
		p.table = nil
	}
	for _, p := range removed {
		detach(p)
	}
	for _, p := range retable {
		detach(p)
	}
	changed := make(map[*table]bool)
	for _, p := range retable {
		if len(p.content) == 0 {
			continue
		}
		h := c.hash(p.content)
		t := c.find(h, p.content)
		switch {
		case t != nil:
			delete(freed, t)
		case before[p.in.Pod] != nil && freed[before[p.in.Pod]]:
			t = before[p.in.Pod]
			delete(freed, t)
			c.unindex(t)
			t.rules, t.hash = p.content, h
			c.byHash[h] = append(c.byHash[h], t)
			changed[t] = true
		default:
			c.nextID++
			t = &table{
				id:    renderer.TableID("local-" + strconv.FormatUint(c.nextID, 10)),
				rules: p.content,
				hash:  h,
				pods:  make(map[renderer.PodID]struct{}),
			}
			c.tables[t.id] = t
			c.byHash[h] = append(c.byHash[h], t)
			ch.Added = append(ch.Added, renderer.Table{ID: t.id, Rules: t.rules})
		}
		t.pods[p.in.Pod] = struct{}{}
		p.table = t
	}
	for t := range changed {
		ch.Changed = append(ch.Changed, renderer.Table{ID: t.id, Rules: t.rules})
	}
	for t := range freed {
		c.unindex(t)
		delete(c.tables, t.id)
		ch.Removed = append(ch.Removed, t.id)
	}
	slices.SortFunc(ch.Changed, func(a, b renderer.Table) int { return compareTableIDs(a.ID, b.ID) })
	slices.SortFunc(ch.Removed, compareTableIDs)
	for _, list := range [][]*podState{removed, retable} {
		for _, p := range list {
			var now renderer.TableID
			if p.table != nil {
				now = p.table.id
			}
			var was renderer.TableID
			if t := before[p.in.Pod]; t != nil {
				was = t.id
			}
			if now != was {
				ch.Assignments = append(ch.Assignments, Assignment{Pod: p.in.Pod, Table: now})
			}
		}
	}
	slices.SortFunc(ch.Assignments, func(a, b Assignment) int { return a.Pod.Compare(b.Pod) })
}

// hash fingerprints a table for finding equal ones: its length and up to 32
// rules spread over it. Equality is then checked rule by rule, so a
// fingerprint only has to tell most different tables apart, and sampling
// keeps it cheap for tables of thousands of rules.
func (c *Cache) hash(rules []renderer.Rule) uint64 {
	h := uint64(14695981039346656037) ^ uint64(len(rules))
	step := max(1, len(rules)/32)
	for i := 0; i < len(rules); i += step {
		r := &rules[i]
		for _, n := range [2]netip.Prefix{r.SrcNetwork, r.DstNetwork} {
			a := n.Addr().As16()
			h = (h ^ binary.LittleEndian.Uint64(a[:8])) * 1099511628211
			h = (h ^ binary.LittleEndian.Uint64(a[8:]) ^ uint64(n.Bits()+2)<<56) * 1099511628211
		}
		h = (h ^ (uint64(r.Action) | uint64(r.Protocol)<<8 | uint64(r.SrcPort.First)<<16 |
			uint64(r.SrcPort.Last)<<32 | uint64(r.DstPort.First)<<48)) * 1099511628211
		h = (h ^ uint64(r.DstPort.Last)) * 1099511628211
	}
	return h
}

func (c *Cache) find(h uint64, rules []renderer.Rule) *table {
	for _, t := range c.byHash[h] {
		if slices.Equal(t.rules, rules) {
			return t
		}
	}
	return nil
}

func (c *Cache) unindex(t *table) {
	list := c.byHash[t.hash]
	i := slices.Index(list, t)
	if i < 0 {
		return
	}
	list = slices.Delete(list, i, i+1)
	if len(list) == 0 {
		delete(c.byHash, t.hash)
	} else {
		c.byHash[t.hash] = list
	}
}

// compareTableIDs orders "local-N" IDs by N, then anything else by string.
func compareTableIDs(a, b renderer.TableID) int {
	if len(a) != len(b) {
		if len(a) < len(b) {
			return -1
		}
		return 1
	}
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// LocalTable returns the local table of pod, if it has one.
func (c *Cache) LocalTable(pod renderer.PodID) (renderer.Table, bool) {
	p := c.pods[pod]
	if p == nil || p.table == nil {
		return renderer.Table{}, false
	}
	return renderer.Table{ID: p.table.id, Rules: p.table.rules}, true
}

// LocalTables returns every local table, ordered by ID. The rule slices are
// the cache's own: do not modify them.
func (c *Cache) LocalTables() []renderer.Table {
	out := make([]renderer.Table, 0, len(c.tables))
	for _, t := range c.tables {
		out = append(out, renderer.Table{ID: t.id, Rules: t.rules})
	}
	slices.SortFunc(out, func(a, b renderer.Table) int { return compareTableIDs(a.ID, b.ID) })
	return out
}

// Assignments returns the local table of every known pod (empty Table for
// pods without one), ordered by pod.
func (c *Cache) Assignments() []Assignment {
	out := make([]Assignment, 0, len(c.pods))
	for id, p := range c.pods {
		a := Assignment{Pod: id}
		if p.table != nil {
			a.Table = p.table.id
		}
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b Assignment) int { return a.Pod.Compare(b.Pod) })
	return out
}

// GlobalTable returns the global table; no rules means there is none.
func (c *Cache) GlobalTable() renderer.Table {
	return renderer.Table{ID: renderer.GlobalTableID, Rules: c.global}
}

// Pods returns the known pods' addresses, ordered by pod.
func (c *Cache) Pods() []renderer.PodRules {
	out := make([]renderer.PodRules, 0, len(c.pods))
	for _, p := range c.pods {
		out = append(out, p.in)
	}
	slices.SortFunc(out, func(a, b renderer.PodRules) int { return a.Pod.Compare(b.Pod) })
	return out
}
