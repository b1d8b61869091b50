package nftables

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// Config configures a Renderer.
type Config struct {
	// Netns is the node's network namespace ("" = the process's own).
	Netns string
	// Table is the inet table the renderer owns (constants.PolicyTable
	// when empty).
	Table string
	// LogDrops logs denied packets to the kernel log, at most ten a second
	// over the table (off by default: the counters are always there).
	LogDrops bool
	// Registry takes the renderer's metrics; nil registers none.
	Registry prometheus.Registerer
	Log      logr.Logger
}

// Renderer enforces the policies of a node's pods with nftables. It is a
// renderer.Renderer; Render is called from one goroutine at a time.
type Renderer struct {
	cfg     Config
	log     logr.Logger
	k       *kernel
	metrics *metrics

	// mu guards what the metrics collector reads while Render runs.
	mu sync.Mutex

	// The desired state: every local pod's rules and their contents, and
	// the pod of each address.
	pods   map[renderer.PodID]*podWant
	owners map[netip.Addr]renderer.PodID

	// The mirror of the kernel's table, valid when synced: the groups and
	// the dispatch maps' elements, by direction and address.
	synced bool
	groups map[string]*group // by chain name
	byKey  map[string]*group
	elems  [2]map[netip.Addr]*group
	nextID int
	txns   uint64 // transactions planned, the clock of idle groups

	// lastScript is the last transaction's nft input, for tests.
	lastScript string
}

type podWant struct {
	rules    int // the length of both rule lists, for the metrics
	ips      []netip.Addr
	contents [2]*content // by renderer.Direction; nil: not restricted
	keys     [2]string
	// lists and lens identify the rule lists the contents were made from.
	lists [2]*renderer.Rule
	lens  [2]int
}

// group is a chain with its sets, shared by the pods whose rule lists of
// one direction have the same content.
type group struct {
	name      string
	dir       renderer.Direction
	c         *content
	key       string // groupKey(dir, c)
	layout    groupLayout
	structure string // layout.String()
	refs      int    // dispatch map elements jumping to it
	// idleSince is the transaction since which no address uses it.
	idleSince uint64
}

func groupKey(d renderer.Direction, c *content) string {
	if c == nil {
		return ""
	}
	return d.String() + "/" + c.key()
}

// New opens the node's namespace and checks that nft runs there. The
// table is not touched until the first Render, which adopts what an
// earlier vcoild left and changes only what differs.
func New(cfg Config) (*Renderer, error) {
	if cfg.Table == "" {
		cfg.Table = constants.PolicyTable
	}
	k, err := openKernel(cfg.Netns, cfg.Table)
	if err != nil {
		return nil, err
	}
	r := &Renderer{
		cfg: cfg, log: cfg.Log, k: k,
		pods: map[renderer.PodID]*podWant{}, owners: map[netip.Addr]renderer.PodID{},
	}
	r.resetMirror()
	if r.metrics, err = newMetrics(cfg.Registry, r); err != nil {
		k.close()
		return nil, fmt.Errorf("register the nftables policy renderer's metrics: %w", err)
	}
	return r, nil
}

// Close releases the namespace.
func (r *Renderer) Close() { r.k.close() }

func (r *Renderer) resetMirror() {
	r.synced = false
	r.groups = map[string]*group{}
	r.byKey = map[string]*group{}
	r.elems = [2]map[netip.Addr]*group{{}, {}}
	r.nextID = 0
}

// Render applies txn to the table in one nft transaction.
func (r *Renderer) Render(ctx context.Context, txn renderer.Txn) (err error) {
	start := time.Now()
	defer func() { r.metrics.observe(start, txn.Resync, err) }()
	for i := range txn.Pods {
		pr := &txn.Pods[i]
		if pr.Removed {
			continue
		}
		for _, d := range []renderer.Direction{renderer.Ingress, renderer.Egress} {
			list := pr.Ingress
			if d == renderer.Egress {
				list = pr.Egress
			}
			if err := renderer.ValidateRuleList(d, list); err != nil {
				return fmt.Errorf("render the policies of pod %s: %w", pr.Pod, err)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	affected := r.want(txn)
	full := txn.Resync || !r.synced
	listed := !r.synced
	var kt *kernelTable
	purge := false
	if listed {
		r.resetMirror()
		kt, err = r.k.list(ctx)
		switch {
		case errors.Is(err, errNoTable):
			kt, err = nil, nil
		case err != nil:
			return fmt.Errorf("render policies: read table inet %s: %w", r.cfg.Table, err)
		}
		if kt != nil {
			if purge, err = r.adopt(kt); err != nil {
				return fmt.Errorf("render policies: table inet %s: %w", r.cfg.Table, err)
			}
			if purge {
				r.resetMirror()
			}
		}
	}
	if full {
		affected = r.allAddresses()
	}
	p := r.plan(affected)
	if full {
		// The base is written when the table was just listed and is
		// missing, replaced, or not of this vcoild's layout.
		p.base = listed && (kt == nil || purge || !baseMatches(kt))
		p.newTable = listed && kt == nil
		p.purge = purge
		p.deleteUnused(r)
	}
	st, err := p.script(r)
	if err != nil {
		return fmt.Errorf("render policies into table inet %s: %w", r.cfg.Table, err)
	}
	r.lastScript = st.text(r.cfg.Table)
	if err := r.apply(ctx, p, st); err != nil {
		r.synced = false
		return fmt.Errorf("render policies into table inet %s: %w", r.cfg.Table, err)
	}
	p.commit(r)
	r.synced = true
	if p.purge {
		r.log.Info("replaced a policy table this vcoild could not adopt", "table", r.cfg.Table)
	}
	return nil
}

// maxNetlinkOps bounds the element changes sent over netlink: a batch is
// one message, which the socket's send buffer bounds (about 200 KB, some
// four thousand elements). Larger plans (a full render) go to nft, whose
// fixed cost matters less there.
const maxNetlinkOps = 2000

// apply runs the plan's steps. A table replaced, or whose base is
// rewritten, is one nft transaction, elements included; other plans (a new
// table too: nothing was filtered before it) write their objects with nft
// and their elements over netlink (elemOp), each step safe alone.
func (r *Renderer) apply(ctx context.Context, p *plan, st *steps) error {
	if p.purge || (p.base && !p.newTable) || len(st.ops) > maxNetlinkOps {
		if s := st.text(r.cfg.Table); s != "" {
			return r.k.runScript(ctx, s)
		}
		return nil
	}
	if st.before != "" {
		if err := r.k.runScript(ctx, st.before); err != nil {
			return err
		}
	}
	if len(st.ops) > 0 {
		if err := r.k.applyElements(st.ops); err != nil {
			return err
		}
	}
	if st.after != "" {
		return r.k.runScript(ctx, st.after)
	}
	return nil
}

// want applies txn to the desired state and returns the addresses whose
// desired groups may have changed.
func (r *Renderer) want(txn renderer.Txn) map[netip.Addr]bool {
	affected := map[netip.Addr]bool{}
	prevs := map[renderer.PodID]*podWant{}
	for i := range txn.Pods {
		if w := r.pods[txn.Pods[i].Pod]; w != nil {
			prevs[txn.Pods[i].Pod] = w
		}
	}
	forget := func(id renderer.PodID) {
		if old := r.pods[id]; old != nil {
			for _, a := range old.ips {
				affected[a] = true
				if r.owners[a] == id {
					delete(r.owners, a)
				}
			}
			delete(r.pods, id)
		}
	}
	if txn.Resync {
		listed := map[renderer.PodID]bool{}
		for _, pr := range txn.Pods {
			listed[pr.Pod] = true
		}
		for id := range r.pods {
			if !listed[id] {
				forget(id)
			}
		}
	}
	for i := range txn.Pods {
		pr := &txn.Pods[i]
		forget(pr.Pod)
		if pr.Removed || len(pr.IPs) == 0 {
			continue
		}
		w := &podWant{rules: len(pr.Ingress) + len(pr.Egress)}
		for _, a := range pr.IPs {
			a = a.Unmap()
			w.ips = append(w.ips, a)
			if other, taken := r.owners[a]; taken && other != pr.Pod {
				r.log.Info("two pods claim one address: the later one's rules apply", "address", a, "pod", pr.Pod, "other", other)
			}
			r.owners[a] = pr.Pod
			affected[a] = true
		}
		for d, list := range [2][]renderer.Rule{pr.Ingress, pr.Egress} {
			// The configurator sends the very same slice for a list that
			// did not change: its content is the one computed before.
			if prev := prevs[pr.Pod]; prev != nil && len(list) > 0 && prev.lists[d] == &list[0] && prev.lens[d] == len(list) {
				w.contents[d], w.keys[d] = prev.contents[d], prev.keys[d]
			} else {
				w.contents[d] = contentOf(renderer.Direction(d), list)
				w.keys[d] = groupKey(renderer.Direction(d), w.contents[d])
			}
			if len(list) > 0 {
				w.lists[d], w.lens[d] = &list[0], len(list)
			}
		}
		r.pods[pr.Pod] = w
	}
	return affected
}

func (r *Renderer) allAddresses() map[netip.Addr]bool {
	all := map[netip.Addr]bool{}
	for a := range r.owners {
		all[a] = true
	}
	for _, m := range r.elems {
		for a := range m {
			all[a] = true
		}
	}
	return all
}

// desired is the content address a should have in direction d.
func (r *Renderer) desired(d renderer.Direction, a netip.Addr) (*content, string) {
	id, ok := r.owners[a]
	if !ok {
		return nil, ""
	}
	w := r.pods[id]
	return w.contents[d], w.keys[d]
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
}

type groupChange struct {
	g   *group
	c   *content
	key string
}

type assignment struct {
	dir  renderer.Direction
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
	for d := range r.elems {
		dir := renderer.Direction(d)
		type move struct {
			addr netip.Addr
			old  *group
			c    *content
			key  string
		}
		var moves []move
		for _, a := range sorted {
			c, key := r.desired(dir, a)
			old := r.elems[d][a]
			if (old == nil && key == "") || (old != nil && old.key == key) {
				continue
			}
			moves = append(moves, move{a, old, c, key})
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
			if len(ix) != g.refs || first.key == "" || keys(first.key) != nil || layoutOf(first.c).String() != g.structure {
				continue
			}
			same := true
			for _, i := range ix[1:] {
				same = same && moves[i].key == first.key
			}
			if !same {
				continue
			}
			p.changed = append(p.changed, groupChange{g: g, c: first.c, key: first.key})
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
					l := layoutOf(m.c)
					ng = &group{name: groupName(r.nextID + len(p.created)), dir: dir, c: m.c, key: m.key, layout: l, structure: l.String()}
					p.created = append(p.created, ng)
				}
			}
			if m.old != nil {
				p.refs[m.old] = refs(m.old) - 1
			}
			if ng != nil {
				p.refs[ng] = refs(ng) + 1
			}
			p.assign = append(p.assign, assignment{dir: dir, addr: m.addr, old: m.old, new: ng})
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
	for _, g := range p.created {
		r.groups[g.name] = g
		r.byKey[g.key] = g
		if n, ok := parseGroupName(g.name); ok && n >= r.nextID {
			r.nextID = n + 1
		}
	}
	for _, ch := range p.changed {
		if r.byKey[ch.g.key] == ch.g {
			delete(r.byKey, ch.g.key)
		}
		ch.g.c, ch.g.key = ch.c, ch.key
		r.byKey[ch.key] = ch.g
	}
	for _, a := range p.assign {
		if a.new == nil {
			delete(r.elems[a.dir], a.addr)
		} else {
			r.elems[a.dir][a.addr] = a.new
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

// elementsPerCommand bounds the elements of one nft command; knftables
// writes one command per element, which nft parses many times slower.
const elementsPerCommand = 1000

// steps is a plan as the kernel gets it: objects to create (before),
// element changes, objects to delete (after). New groups are complete
// before any address jumps to them, and groups are deleted only after no
// address jumps to them, so that each step is safe on its own.
type steps struct {
	before, after string
	ops           []elemOp
}

// text is the whole as one nft script.
func (s *steps) text(table string) string {
	var b strings.Builder
	b.WriteString(s.before)
	for start := 0; start < len(s.ops); {
		end := start
		for end < len(s.ops) && end-start < elementsPerCommand && s.ops[end].set == s.ops[start].set && s.ops[end].del == s.ops[start].del {
			end++
		}
		verb := "add"
		if s.ops[start].del {
			verb = "delete"
		}
		elems := make([]string, 0, end-start)
		for _, op := range s.ops[start:end] {
			elems = append(elems, op.elem)
		}
		fmt.Fprintf(&b, "%s element inet %s %s { %s }\n", verb, table, s.ops[start].set, strings.Join(elems, ", "))
		start = end
	}
	b.WriteString(s.after)
	return b.String()
}

// script writes the plan's steps.
func (p *plan) script(r *Renderer) (*steps, error) {
	st := &steps{}
	var b strings.Builder
	objects := func(build func(tx *knftables.Transaction)) error {
		tx := r.k.nft.NewTransaction()
		build(tx)
		if tx.NumOperations() == 0 {
			return nil
		}
		text := tx.String()
		if i := strings.Index(text, "# ERROR: "); i >= 0 {
			return errors.New(strings.TrimSpace(text[i+len("# ERROR: "):]))
		}
		b.WriteString(text)
		return nil
	}
	elements := func(verb, set string, elems []string) {
		for _, e := range elems {
			st.ops = append(st.ops, elemOp{del: verb == "delete", set: set, elem: e})
		}
	}
	err := objects(func(tx *knftables.Transaction) {
		if p.purge {
			tx.Delete(&knftables.Table{})
		}
		if p.base {
			tx.Add(&knftables.Table{Comment: knftables.PtrTo(formatComment)})
			tx.Add(&knftables.Set{Name: setFormat, Type: "ipv4_addr", Comment: knftables.PtrTo(formatComment)})
			for d, names := range dirMaps {
				for f, name := range names {
					tx.Add(&knftables.Map{Name: name, Type: addrType(f) + " : verdict",
						Comment: knftables.PtrTo("local pods' " + renderer.Direction(d).String() + " groups")})
				}
			}
			for f, name := range selfSets {
				set := &knftables.Set{Name: name, Type: addrType(f) + " . " + addrType(f),
					Comment: knftables.PtrTo("egress-isolated local pods, each to itself (hairpin)")}
				tx.Add(set)
				// Refilled below from the egress maps: the set may be new
				// over an adopted table of an earlier layout.
				tx.Flush(set)
			}
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
				for _, rule := range baseRules()[c.name] {
					tx.Add(&knftables.Rule{Chain: c.name, Rule: rule, Comment: knftables.PtrTo(ruleID(rule))})
				}
			}
		}
		for _, g := range p.created {
			for _, s := range groupSets(setNames(g.name), g.layout) {
				set := &knftables.Set{Name: s.name, Type: s.typ}
				if s.interval {
					set.Flags = []knftables.SetFlag{knftables.IntervalFlag}
				}
				if s.comment != "" {
					set.Comment = knftables.PtrTo(s.comment)
				}
				tx.Add(set)
			}
			tx.Add(&knftables.Counter{Name: g.name, Comment: knftables.PtrTo("packets the group's " + g.dir.String() + " rules denied")})
			tx.Add(&knftables.Chain{Name: g.name, Comment: knftables.PtrTo(g.dir.String())})
			for _, rule := range groupRules(setNames(g.name), g.dir, g.layout, r.cfg.LogDrops) {
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
		have, want := ch.g.c.elements(setNames(ch.g.name)), ch.c.elements(setNames(ch.g.name))
		for _, set := range sortedKeys(have) {
			elements("delete", set, minus(have[set], want[set]))
		}
	}
	var dels, adds [2][2][]string
	var selfDels, selfAdds [2][]string
	for _, a := range p.assign {
		f := familyOf(a.addr)
		if a.old != nil {
			dels[a.dir][f] = append(dels[a.dir][f], a.addr.String())
		}
		if a.new != nil {
			adds[a.dir][f] = append(adds[a.dir][f], a.addr.String()+" : jump "+a.new.name)
		}
		if a.dir == renderer.Egress && !p.base && (a.old == nil) != (a.new == nil) {
			if a.new == nil {
				selfDels[f] = append(selfDels[f], selfElem(a.addr))
			} else {
				selfAdds[f] = append(selfAdds[f], selfElem(a.addr))
			}
		}
	}
	if p.base {
		// The self sets were flushed: every egress address after the plan.
		for _, a := range p.egressAfter(r) {
			selfAdds[familyOf(a)] = append(selfAdds[familyOf(a)], selfElem(a))
		}
	}
	for d := range dels {
		for f := range dels[d] {
			elements("delete", dirMaps[d][f], dels[d][f])
		}
	}
	for f := range selfDels {
		elements("delete", selfSets[f], selfDels[f])
	}
	for _, g := range p.created {
		el := g.c.elements(setNames(g.name))
		for _, set := range sortedKeys(el) {
			elements("add", set, el[set])
		}
	}
	for _, ch := range p.changed {
		have, want := ch.g.c.elements(setNames(ch.g.name)), ch.c.elements(setNames(ch.g.name))
		for _, set := range sortedKeys(want) {
			elements("add", set, minus(want[set], have[set]))
		}
	}
	for f := range selfAdds {
		elements("add", selfSets[f], selfAdds[f])
	}
	for d := range adds {
		for f := range adds[d] {
			elements("add", dirMaps[d][f], adds[d][f])
		}
	}
	if !p.purge {
		err = objects(func(tx *knftables.Transaction) {
			for _, g := range p.deleted {
				ch := &knftables.Chain{Name: g.name}
				tx.Flush(ch)
				tx.Delete(ch)
				for _, s := range groupSets(setNames(g.name), g.layout) {
					tx.Delete(&knftables.Set{Name: s.name})
				}
				tx.Delete(&knftables.Counter{Name: g.name})
			}
		})
		if err != nil {
			return nil, err
		}
	}
	st.after = b.String()
	return st, nil
}

// egressAfter lists, sorted, the addresses of the egress maps once the
// plan is applied.
func (p *plan) egressAfter(r *Renderer) []netip.Addr {
	in := map[netip.Addr]bool{}
	for a := range r.elems[renderer.Egress] {
		in[a] = true
	}
	for _, a := range p.assign {
		if a.dir == renderer.Egress {
			in[a.addr] = a.new != nil
		}
	}
	out := make([]netip.Addr, 0, len(in))
	for a, ok := range in {
		if ok {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
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

// baseMatches says whether the table's base chains, maps and version are
// the ones this renderer writes.
func baseMatches(kt *kernelTable) bool {
	if kt.format != formatComment {
		return false
	}
	for d := range dirMaps {
		for _, name := range dirMaps[d] {
			if _, ok := kt.maps[name]; !ok {
				return false
			}
		}
	}
	for f, name := range selfSets {
		s := kt.sets[name]
		if s == nil || len(s.elems) != len(kt.maps[dirMaps[renderer.Egress][f]]) {
			return false
		}
		for _, e := range s.elems {
			a, err := selfElemOf(e)
			if _, ok := kt.maps[dirMaps[renderer.Egress][f]][a]; err != nil || !ok {
				return false
			}
		}
	}
	for name, rules := range baseRules() {
		c := kt.chains[name]
		if c == nil || !c.base || len(c.rules) != len(rules) {
			return false
		}
		for i, rule := range rules {
			if c.rules[i] != ruleID(rule) {
				return false
			}
		}
	}
	return true
}

// adopt fills the mirror from the kernel's table. It returns purge when
// the table is one this vcoild cannot adopt (another layout of an older
// version, or objects it does not recognize): the plan then replaces the
// whole table in one transaction, so that no pod is ever unfiltered.
func (r *Renderer) adopt(kt *kernelTable) (purge bool, err error) {
	reason, err := r.adoptTable(kt)
	if reason != "" {
		r.log.Info("cannot adopt the policy table: replacing it in one transaction", "table", r.cfg.Table, "reason", reason)
	}
	return reason != "", err
}

// adoptTable is adopt; it returns why the table cannot be adopted.
func (r *Renderer) adoptTable(kt *kernelTable) (string, error) {
	if kt.format != formatComment {
		if v, ok := formatversion.ParseNFTComment(formatKind, kt.format); ok {
			if err := formatversion.Check("nftables table inet "+r.cfg.Table, v, formatVersion); err != nil {
				return "", err
			}
		}
		return fmt.Sprintf("its format %q is not this vcoild's (%q)", kt.format, formatComment), nil
	}
	// The self sets follow the egress maps; baseMatches checks them.
	sets := map[string]bool{selfSets[v4]: true, selfSets[v6]: true}
	for name := range kt.chains {
		if name == chainForward || name == chainPostrouting {
			continue
		}
		n, ok := parseGroupName(name)
		if !ok {
			return "unknown chain " + name, nil
		}
		g, err := r.adoptGroup(kt, name)
		if err != nil {
			return fmt.Sprintf("group %s: %v", name, err), nil
		}
		for _, s := range groupSets(setNames(name), g.layout) {
			sets[s.name] = true
		}
		r.groups[name] = g
		if other := r.byKey[g.key]; other == nil || other.name > g.name {
			r.byKey[g.key] = g
		}
		r.nextID = max(r.nextID, n+1)
	}
	for name := range kt.sets {
		if !sets[name] {
			return "unknown set " + name, nil
		}
	}
	for d := range dirMaps {
		for _, name := range dirMaps[d] {
			for a, target := range kt.maps[name] {
				g := r.groups[target]
				if g == nil || g.dir != renderer.Direction(d) {
					return fmt.Sprintf("map %s sends %s to %q, not a group of its direction", name, a, target), nil
				}
				r.elems[d][a] = g
				g.refs++
			}
		}
	}
	return "", nil
}

// adoptGroup reads group chain name from the kernel: its direction, its
// content from its sets, and checks its rules.
func (r *Renderer) adoptGroup(kt *kernelTable, name string) (*group, error) {
	kc := kt.chains[name]
	g := setNames(name)
	c := &content{}
	// The layout is the sets the group has.
	var l groupLayout
	for f := range 2 {
		for slot, set := range []string{g.hostPorts(f), g.hosts(f), g.nets(f)} {
			_, l.fixed[f][slot] = kt.sets[set]
		}
	}
	for i := 0; ; i++ {
		var sl sigLayout
		comment := ""
		for f := range 2 {
			if s, ok := kt.sets[g.sig(i, f)]; ok {
				sl.fams[f], comment = true, s.comment
			}
		}
		if !sl.fams[v4] && !sl.fams[v6] {
			break
		}
		sig, err := parseSignature(comment)
		if err != nil {
			return nil, fmt.Errorf("set %s: %w", g.sig(i, v4), err)
		}
		sl.sig = sig
		l.sigs = append(l.sigs, sl)
	}
	for _, s := range groupSets(g, l) {
		ks := kt.sets[s.name]
		if ks == nil || ks.typ != s.typ || ks.comment != s.comment {
			return nil, fmt.Errorf("set %s is of another type or signature", s.name)
		}
	}
	set := func(name string) *kernelSet {
		if s := kt.sets[name]; s != nil {
			return s
		}
		return &kernelSet{}
	}
	for f := range 2 {
		for _, e := range set(g.hostPorts(f)).elems {
			hp, err := hostPortOf(e)
			if err != nil {
				return nil, fmt.Errorf("set %s: %w", g.hostPorts(f), err)
			}
			c.hostPorts[f] = append(c.hostPorts[f], hp)
		}
		for _, e := range set(g.hosts(f)).elems {
			a, err := netip.ParseAddr(fmt.Sprint(e))
			if err != nil {
				return nil, fmt.Errorf("set %s: %w", g.hosts(f), err)
			}
			c.hosts[f] = append(c.hosts[f], a)
		}
		var err error
		if c.nets[f], err = intervalsOf(set(g.nets(f))); err != nil {
			return nil, fmt.Errorf("set %s: %w", g.nets(f), err)
		}
	}
	for i, sl := range l.sigs {
		ss := sigSets{sig: sl.sig}
		for f := range 2 {
			var err error
			if ss.peers[f], err = intervalsOf(set(g.sig(i, f))); err != nil {
				return nil, fmt.Errorf("set %s: %w", g.sig(i, f), err)
			}
		}
		c.sigs = append(c.sigs, ss)
	}
	for f := range 2 {
		slices.SortFunc(c.hostPorts[f], compareHostPorts)
		slices.SortFunc(c.hosts[f], netip.Addr.Compare)
	}
	// The rules say the direction: they match the peer's source or
	// destination address.
	dir, found := renderer.Ingress, false
	for _, d := range []renderer.Direction{renderer.Ingress, renderer.Egress} {
		want := groupRules(g, d, l, r.cfg.LogDrops)
		same := len(kc.rules) == len(want)
		for i := 0; same && i < len(want); i++ {
			same = kc.rules[i] == ruleID(want[i])
		}
		if same {
			dir, found = d, true
		}
	}
	if !found {
		return nil, errors.New("its rules are not those of a group of its sets (drop logging switched?)")
	}
	if !kt.counters[name] {
		return nil, errors.New("its counter is missing")
	}
	return &group{name: name, dir: dir, c: c, key: groupKey(dir, c), layout: l, structure: l.String()}, nil
}

func intervalsOf(s *kernelSet) ([]interval, error) {
	var out []interval
	for _, e := range s.elems {
		iv, err := intervalOf(e)
		if err != nil {
			return nil, err
		}
		out = append(out, iv)
	}
	return normalize(out), nil
}

func parseProtocol(v any) (renderer.Protocol, bool) {
	switch fmt.Sprint(v) {
	case "tcp", "6":
		return renderer.ProtocolTCP, true
	case "udp", "17":
		return renderer.ProtocolUDP, true
	case "sctp", "132":
		return renderer.ProtocolSCTP, true
	}
	return 0, false
}

// parseSignature reads signature.String.
func parseSignature(s string) (signature, error) {
	var proto, sport, dport string
	if _, err := fmt.Sscanf(s, "%s sport %s dport %s", &proto, &sport, &dport); err != nil {
		return signature{}, fmt.Errorf("signature %q: %w", s, err)
	}
	p, ok := parseProtocol(proto)
	if !ok {
		return signature{}, fmt.Errorf("signature %q: protocol %q", s, proto)
	}
	sp, err := parsePorts(sport)
	if err != nil {
		return signature{}, fmt.Errorf("signature %q: %w", s, err)
	}
	dp, err := parsePorts(dport)
	if err != nil {
		return signature{}, fmt.Errorf("signature %q: %w", s, err)
	}
	return signature{proto: p, sport: sp, dport: dp}, nil
}

func parsePorts(s string) (renderer.PortRange, error) {
	if s == "any" {
		return renderer.AnyPort, nil
	}
	first, last, isRange := strings.Cut(s, "-")
	a, err := strconv.ParseUint(first, 10, 16)
	if err != nil {
		return renderer.PortRange{}, fmt.Errorf("ports %q", s)
	}
	b := a
	if isRange {
		if b, err = strconv.ParseUint(last, 10, 16); err != nil {
			return renderer.PortRange{}, fmt.Errorf("ports %q", s)
		}
	}
	return renderer.PortRange{First: uint16(a), Last: uint16(b)}, nil
}

// RemoveTable deletes the renderer's table from the namespace at netnsPath
// ("" = the process's own) if it exists: a node whose vcoild stopped
// enforcing policies must not keep the rules an earlier one left.
func RemoveTable(ctx context.Context, netnsPath, table string) error {
	if table == "" {
		table = constants.PolicyTable
	}
	k, err := openKernel(netnsPath, table)
	if err != nil {
		return err
	}
	defer k.close()
	if _, err := k.nftCmd(ctx, "", "list", "table", "inet", table); err != nil {
		if strings.Contains(err.Error(), "No such file or directory") {
			return nil
		}
		return fmt.Errorf("look for table inet %s: %w", table, err)
	}
	if _, err := k.nftCmd(ctx, "", "delete", "table", "inet", table); err != nil {
		return fmt.Errorf("delete table inet %s: %w", table, err)
	}
	return nil
}
