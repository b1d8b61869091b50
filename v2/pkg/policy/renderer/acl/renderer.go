package acl

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/acl"
	"go.fd.io/govpp/binapi/acl_types"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer/acl/tables"
)

// Tags of the renderer's ACLs: "vcoil-pol@2 <table ID>" and
// "vcoil-pol@2 reflect" ("@2": formatversion.VPPTag). Every ACL whose tag is of
// kind tagKind is the renderer's: after a restart of vcoild it adopts
// those whose rules a table needs (by content, whatever their tag's
// format: an ACL an earlier vcoild tagged in format 1, "vcoil-pol global",
// is adopted as it is) and deletes the others. An ACL of a newer format
// stops the sync before anything is created or deleted.
const (
	tagKind = "vcoil-pol"
	// maxTag is what ACLAddReplace's tag (string[64]) holds.
	maxTag = 63
)

var reflectTag = formatversion.Tag(tagKind, "reflect")

func tagOf(id renderer.TableID) string { return formatversion.Tag(tagKind, string(id)) }

// aclState is one of the renderer's ACLs in VPP.
type aclState struct {
	index uint32
	rules []acl_types.ACLRule
}

// podLists is what the renderer set on one pod's interface: the address
// that named it and its local table ("" none).
type podLists struct {
	addr  netip.Addr
	table renderer.TableID
}

// Renderer is the VPP ACL policy renderer (renderer.Renderer).
type Renderer struct {
	dp      Dataplane
	cfg     Config
	log     logr.Logger
	metrics *metrics

	// mu serialises Render and Resync, which vcoild calls from different
	// goroutines (the configurator's, and the one watching VPP restarts).
	mu    sync.Mutex
	cache ruleCache
	// stats reads the ACL counters (nil: they are off)
	stats *statsReader
	// tiers are the pods with ClusterNetworkPolicy tiers: while there is
	// one, cache is a tables.Ordered (ordered is set), else a tables.Cache.
	tiers   map[renderer.PodID]bool
	ordered bool
	// addrs is the address that names each pod the cache knows (its IPv4
	// address when it has one).
	addrs map[renderer.PodID]netip.Addr

	// What VPP holds, valid while synced: the incarnation, the ACLs, the
	// lists set on each pod's and on the node's interfaces. A failure
	// makes it unknown (synced false) and the next call syncs everything
	// from the cache.
	synced  bool
	inc     vpp.Incarnation
	checked vpp.Incarnation
	local   map[renderer.TableID]aclState
	global  *aclState
	reflect *aclState
	pods    map[renderer.PodID]podLists
	node    vpp.ACLLists
	// reflective are the rules of the reflective ACL (vpp.ReflectiveRules).
	reflective []acl_types.ACLRule
}

var _ renderer.Renderer = (*Renderer)(nil)

// ruleCache is the renderer cache: tables.Cache for NetworkPolicy lists,
// tables.Ordered when some pod has ClusterNetworkPolicy tiers.
type ruleCache interface {
	Apply(renderer.Txn) (tables.Changes, error)
	LocalTables() []renderer.Table
	Assignments() []tables.Assignment
	GlobalTable() renderer.Table
	Pods() []renderer.PodRules
}

// New returns the renderer for dp. It checks cfg and changes nothing in
// VPP before the first Render or Resync.
//
// vcoild wires it on VPP nodes: it registers the renderer with the policy
// configurator (configurator.Register("vpp-acl", r)), so that every policy
// transaction reaches Render, and calls Resync each time the dataplane's
// Resynced channel announces a new VPP incarnation (a VPP restart or a new
// connection), since the ACLs died with the old VPP or must be found again.
func New(dp Dataplane, cfg Config, log logr.Logger) (*Renderer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("VPP ACL policy renderer: %w", err)
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, fmt.Errorf("VPP ACL policy renderer: register metrics: %w", err)
	}
	r := &Renderer{
		dp: dp, cfg: cfg, log: log, metrics: m,
		cache: tables.New(renderer.Ingress), tiers: map[renderer.PodID]bool{},
		addrs: map[renderer.PodID]netip.Addr{},
		local: map[renderer.TableID]aclState{}, pods: map[renderer.PodID]podLists{},
		reflective: vpp.ReflectiveRules(),
	}
	if cfg.Registry != nil && cfg.StatsSocket != "" {
		r.stats = newStatsReader(cfg.StatsSocket)
		if err := cfg.Registry.Register(&matchCollector{r: r, log: log, stats: r.stats}); err != nil {
			return nil, fmt.Errorf("VPP ACL policy renderer: register the ACL hit counters: %w", err)
		}
	}
	return r, nil
}

// Render applies one transaction. With the incarnation it last synced and
// VPP's content known, it sends the transaction's changes only (none for
// an unchanged transaction, but for a resync), in the
// order that never leaves a pod without its table: every new ACL first,
// then the interfaces' lists (one batch), then the deletions of the ACLs
// no list holds any more. Otherwise it syncs everything, as Resync does.
func (r *Renderer) Render(ctx context.Context, txn renderer.Txn) (err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer func(start time.Time) { r.metrics.observe("update", start, err) }(time.Now())
	if err := r.chooseCache(txn); err != nil {
		return fmt.Errorf("VPP ACL policy renderer: %w", err)
	}
	changes, err := r.cache.Apply(txn)
	if err != nil {
		return fmt.Errorf("VPP ACL policy renderer: %w", err)
	}
	moved := r.noteAddresses(txn)
	// A resync transaction (the policy agent's, after a VPP restart among
	// others) carries no change when the policies did not change: it
	// still looks at VPP's incarnation, whose ACLs may be gone.
	if changes.Empty() && len(moved) == 0 && r.synced && !txn.Resync {
		return nil
	}
	ch, ifs, err := r.channel(ctx)
	if err != nil {
		r.synced = false
		return err
	}
	defer ch.Close()
	if !r.synced || ifs.Incarnation != r.inc {
		if r.synced {
			r.log.Info("VPP incarnation changed; syncing every policy ACL", "was", r.inc, "now", ifs.Incarnation)
		}
		return r.fullSync(ctx, ch, ifs)
	}
	if err := r.apply(ctx, ch, ifs, &changes, moved); err != nil {
		r.synced = false
		return err
	}
	return nil
}

// chooseCache switches the renderer cache when txn gives the node its first
// pod with ClusterNetworkPolicy tiers (to tables.Ordered), or takes the
// last one away (back to tables.Cache): the new cache gets every pod the
// old one knows, and the next sync makes VPP hold its tables (fullSync
// adopts the ACLs whose rules did not change).
func (r *Renderer) chooseCache(txn renderer.Txn) error {
	if txn.Resync {
		clear(r.tiers)
	}
	for i := range txn.Pods {
		pr := &txn.Pods[i]
		if !pr.Removed && pr.HasTiers() {
			r.tiers[pr.Pod] = true
		} else {
			delete(r.tiers, pr.Pod)
		}
	}
	want := len(r.tiers) > 0
	if want == r.ordered {
		return nil
	}
	var next ruleCache = tables.New(renderer.Ingress)
	if want {
		next = tables.NewOrdered()
	}
	if _, err := next.Apply(renderer.Txn{Resync: true, Pods: r.cache.Pods()}); err != nil {
		return fmt.Errorf("switch the renderer cache: %w", err)
	}
	r.log.Info("switching the policy tables' renderer cache", "clusterNetworkPolicyTiers", want)
	r.cache, r.ordered, r.synced = next, want, false
	return nil
}

// Resync makes VPP hold exactly what the renderer's cache says, whatever
// VPP held: vcoild calls it after the dataplane synced a new incarnation.
func (r *Renderer) Resync(ctx context.Context) (err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	defer func(start time.Time) { r.metrics.observe("resync", start, err) }(time.Now())
	ch, ifs, err := r.channel(ctx)
	if err != nil {
		r.synced = false
		return err
	}
	defer ch.Close()
	return r.fullSync(ctx, ch, ifs)
}

func (r *Renderer) channel(ctx context.Context) (api.Channel, vpp.NodeInterfaces, error) {
	ch, ifs, err := r.dp.Channel(ctx, r.cfg.MaxInFlight)
	if err != nil {
		return nil, ifs, fmt.Errorf("VPP ACL policy renderer: open a VPP channel: %w", err)
	}
	return ch, ifs, nil
}

// noteAddresses records the address naming each pod of txn and returns the
// pods with lists whose address changed (their table may not have).
func (r *Renderer) noteAddresses(txn renderer.Txn) []renderer.PodID {
	if txn.Resync {
		listed := make(map[renderer.PodID]bool, len(txn.Pods))
		for i := range txn.Pods {
			listed[txn.Pods[i].Pod] = true
		}
		for id := range r.addrs {
			if !listed[id] {
				delete(r.addrs, id)
			}
		}
	}
	var moved []renderer.PodID
	for i := range txn.Pods {
		p := &txn.Pods[i]
		a := podAddress(p.IPs)
		if p.Removed || !a.IsValid() {
			delete(r.addrs, p.Pod)
		} else {
			r.addrs[p.Pod] = a
		}
		if prev, ok := r.pods[p.Pod]; ok && prev.addr != r.addrs[p.Pod] {
			moved = append(moved, p.Pod)
		}
	}
	return moved
}

// podAddress is the address that names a pod to the dataplane: IPv4 when
// it has one (the driver finds the pod by any of its addresses).
func podAddress(ips []netip.Addr) netip.Addr {
	var out netip.Addr
	for _, a := range ips {
		a = a.Unmap()
		if a.Is4() {
			return a
		}
		if !out.IsValid() {
			out = a
		}
	}
	return out
}

// creation is one ACL to make, or to replace when replace is set (its
// index is then the ACL's).
type creation struct {
	what    string
	tag     string
	rules   []acl_types.ACLRule
	index   uint32
	replace bool
}

// apply sends one transaction's changes (see Render).
func (r *Renderer) apply(ctx context.Context, ch api.Channel, ifs vpp.NodeInterfaces, changes *tables.Changes, moved []renderer.PodID) error {
	// Over the budget, nothing is sent; the caller's failure makes the
	// next call sync everything, which checks the budget again.
	if !changes.Empty() {
		if err := r.checkBudget(); err != nil {
			return err
		}
	}
	// 1. The ACLs: new ones for the added tables, the changed tables'
	// replaced in place, the global table (made or replaced), and the
	// reflective ACL when it is first needed. Changed tables keep their
	// index, so that no interface's list changes: VPP leaves the sessions
	// the input side recorded (the pods' own connections) alone
	// (docs/policy.md#vpp-acls).
	var creations []*creation
	newLocal := map[renderer.TableID]*creation{}
	for _, t := range slices.Concat(changes.Added, changes.Changed) {
		c, err := r.creationOf(t)
		if err != nil {
			return err
		}
		if old, ok := r.local[t.ID]; ok {
			c.index, c.replace = old.index, true
		}
		creations = append(creations, c)
		newLocal[t.ID] = c
	}
	var newGlobal *creation
	if changes.Global != nil && len(changes.Global.Rules) > 0 {
		c, err := r.creationOf(*changes.Global)
		if err != nil {
			return err
		}
		if r.global != nil {
			c.index, c.replace = r.global.index, true
		}
		newGlobal = c
		creations = append(creations, c)
	}
	tablesAfter := len(r.local) + len(changes.Added) - len(changes.Removed)
	globalAfter := r.global != nil
	if changes.Global != nil {
		globalAfter = newGlobal != nil
	}
	needReflect := tablesAfter > 0 || globalAfter
	var newReflect *creation
	if needReflect && r.reflect == nil {
		newReflect = &creation{what: "the reflective ACL", tag: reflectTag, rules: r.reflective}
		creations = append(creations, newReflect)
	}
	if err := r.create(ch, creations); err != nil {
		return err
	}

	var obsolete []uint32
	for id, c := range newLocal {
		r.local[id] = aclState{index: c.index, rules: c.rules}
	}
	if changes.Global != nil {
		if r.global != nil && newGlobal == nil {
			obsolete = append(obsolete, r.global.index)
		}
		r.global = nil
		if newGlobal != nil {
			r.global = &aclState{index: newGlobal.index, rules: newGlobal.rules}
		}
	}
	if newReflect != nil {
		r.reflect = &aclState{index: newReflect.index, rules: newReflect.rules}
	}

	// 2. The lists of the pods whose table or address changed, and of the
	// node's interfaces.
	touched := map[renderer.PodID]bool{}
	assigned := map[renderer.PodID]renderer.TableID{}
	for _, a := range changes.Assignments {
		touched[a.Pod] = true
		assigned[a.Pod] = a.Table
	}
	for _, id := range moved {
		touched[id] = true
	}
	clears, sets := map[netip.Addr]bool{}, map[netip.Addr]vpp.ACLLists{}
	for _, id := range slices.SortedFunc(maps.Keys(touched), renderer.PodID.Compare) {
		table, ok := assigned[id]
		if !ok {
			table = r.pods[id].table
		}
		r.setPod(id, r.addrs[id], table, clears, sets)
	}
	settings := settingsOf(clears, sets)
	if node := r.nodeLists(); !sameLists(node, r.node) {
		settings = append(settings, nodeSettings(ifs, node)...)
		r.node = node
	}
	if len(settings) > 0 {
		if err := r.dp.SetACLLists(ctx, r.inc, vpp.ACLPolicy, settings); err != nil {
			return fmt.Errorf("VPP ACL policy renderer: set the ACL lists of %d interfaces: %w", len(settings), err)
		}
	}

	// 3. The ACLs no list holds any more.
	for _, id := range changes.Removed {
		if old, ok := r.local[id]; ok {
			obsolete = append(obsolete, old.index)
			delete(r.local, id)
		}
	}
	if !needReflect && r.reflect != nil {
		obsolete = append(obsolete, r.reflect.index)
		r.reflect = nil
	}
	r.metrics.setACLs(len(r.local), r.global != nil, r.reflect != nil)
	return r.delete(ch, obsolete)
}

// ErrOverBudget is what a transaction whose tables need more ACL rules
// than Config.MaxRules fails with.
var ErrOverBudget = errors.New("the policy ACLs would exceed their rule budget")

// checkBudget refuses the cache's tables when VPP would hold more ACL
// rules than the budget.
func (r *Renderer) checkBudget() error {
	n := 0
	tables := r.cache.LocalTables()
	if g := r.cache.GlobalTable(); len(g.Rules) > 0 {
		tables = append(tables, g)
	}
	for _, t := range tables {
		for i := range t.Rules {
			n += aclRuleCount(&t.Rules[i])
		}
	}
	if len(tables) > 0 {
		n += len(r.reflective)
	}
	r.metrics.setRules(n, r.cfg.MaxRules)
	if n > r.cfg.MaxRules {
		return fmt.Errorf("VPP ACL policy renderer: %w: %d tables need %d rules, the budget is %d (--vpp-acl-max-rules; VPP's memory must hold them, docs/policy.md)",
			ErrOverBudget, len(tables), n, r.cfg.MaxRules)
	}
	return nil
}

// setPod records that pod id, named by addr (invalid: gone), has table,
// and adds the lists that make it so: the address it had before is
// cleared unless another pod now holds it.
func (r *Renderer) setPod(id renderer.PodID, addr netip.Addr, table renderer.TableID, clears map[netip.Addr]bool, sets map[netip.Addr]vpp.ACLLists) {
	if prev, known := r.pods[id]; known && prev.addr != addr {
		clears[prev.addr] = true
	}
	if !addr.IsValid() {
		delete(r.pods, id)
		return
	}
	r.pods[id] = podLists{addr: addr, table: table}
	sets[addr] = r.podACLs(table)
}

// podACLs are the lists of a pod with table: the reflective ACL on input
// and the table's ACL on output, or none.
func (r *Renderer) podACLs(table renderer.TableID) vpp.ACLLists {
	t, ok := r.local[table]
	if table == "" || !ok || r.reflect == nil {
		return vpp.ACLLists{}
	}
	return vpp.ACLLists{Input: []uint32{r.reflect.index}, Output: []uint32{t.index}}
}

// nodeLists are the lists of the outside interfaces: the reflective ACL
// on input and the global table on output while it has rules.
func (r *Renderer) nodeLists() vpp.ACLLists {
	if r.global == nil || r.reflect == nil {
		return vpp.ACLLists{}
	}
	return vpp.ACLLists{Input: []uint32{r.reflect.index}, Output: []uint32{r.global.index}}
}

func sameLists(a, b vpp.ACLLists) bool {
	return slices.Equal(a.Input, b.Input) && slices.Equal(a.Output, b.Output)
}

// settingsOf orders the pods' lists by address; an address cleared for one
// pod and set for another gets the other's lists.
func settingsOf(clears map[netip.Addr]bool, sets map[netip.Addr]vpp.ACLLists) []vpp.ACLSetting {
	for a := range sets {
		delete(clears, a)
	}
	out := make([]vpp.ACLSetting, 0, len(clears)+len(sets))
	for a := range clears {
		out = append(out, vpp.ACLSetting{Interface: vpp.ACLInterface{Pod: a}})
	}
	for a, l := range sets {
		out = append(out, vpp.ACLSetting{Interface: vpp.ACLInterface{Pod: a}, Lists: l})
	}
	slices.SortFunc(out, func(x, y vpp.ACLSetting) int { return x.Interface.Pod.Compare(y.Interface.Pod) })
	return out
}

// nodeSettings puts lists on the outside interfaces: the uplink (when the
// node has one) and the host interconnect.
func nodeSettings(ifs vpp.NodeInterfaces, l vpp.ACLLists) []vpp.ACLSetting {
	var out []vpp.ACLSetting
	if ifs.Uplink != vpp.NoInterface {
		out = append(out, vpp.ACLSetting{Interface: vpp.ACLInterface{Node: vpp.Uplink}, Lists: l})
	}
	return append(out, vpp.ACLSetting{Interface: vpp.ACLInterface{Node: vpp.HostInterconnect}, Lists: l})
}

// creationOf translates table t into the ACL to make. An empty ACL would
// deny everything where it is attached (VPP denies what no rule matches):
// a table without rules is refused, never attached.
func (r *Renderer) creationOf(t renderer.Table) (*creation, error) {
	rules, err := aclRules(t.Rules)
	if err != nil {
		return nil, fmt.Errorf("VPP ACL policy renderer: table %s: %w", t.ID, err)
	}
	if len(rules) == 0 {
		return nil, fmt.Errorf("VPP ACL policy renderer: table %s has no rules: an empty ACL denies everything and is never attached", t.ID)
	}
	tag := tagOf(t.ID)
	if len(tag) > maxTag {
		return nil, fmt.Errorf("VPP ACL policy renderer: table %s: its tag %q is longer than VPP's %d bytes", t.ID, tag, maxTag)
	}
	return &creation{what: "the ACL of table " + string(t.ID), tag: tag, rules: rules}, nil
}

// create makes (or replaces) the ACLs, pipelined, recording each one's
// index. ACLs made before a failure stay in VPP with their tags: the next
// sync finds them.
func (r *Renderer) create(ch api.Channel, cs []*creation) error {
	ops := make([]op, len(cs))
	for i, c := range cs {
		reply := &acl.ACLAddReplaceReply{}
		index := ^uint32(0)
		if c.replace {
			index = c.index
		}
		ops[i] = op{
			req:   &acl.ACLAddReplace{ACLIndex: index, Tag: c.tag, Count: uint32(len(c.rules)), R: c.rules},
			reply: reply,
			what:  fmt.Sprintf("make %s (%d rules)", c.what, len(c.rules)),
			done:  func() { c.index = reply.ACLIndex },
		}
	}
	r.metrics.sent(len(ops))
	if err := send(ch, ops, r.cfg.MaxInFlight); err != nil {
		return fmt.Errorf("VPP ACL policy renderer: %w", err)
	}
	return nil
}

// delete deletes ACLs, pipelined; one that is gone already is no error.
func (r *Renderer) delete(ch api.Channel, indexes []uint32) error {
	ops := make([]op, len(indexes))
	for i, x := range indexes {
		ops[i] = op{req: &acl.ACLDel{ACLIndex: x}, reply: &acl.ACLDelReply{}, what: fmt.Sprintf("delete ACL %d", x), del: true}
	}
	r.metrics.sent(len(ops))
	if err := send(ch, ops, r.cfg.MaxInFlight); err != nil {
		return fmt.Errorf("VPP ACL policy renderer: %w", err)
	}
	return nil
}

// fullSync makes VPP hold what the cache says: it finds the renderer's
// ACLs by tag, adopts those whose rules a table needs, makes the others,
// sets the lists of every pod the cache knows (empty lists too, replacing
// what an earlier vcoild set) and of the node's interfaces, and deletes
// the tagged ACLs it did not adopt.
func (r *Renderer) fullSync(ctx context.Context, ch api.Channel, ifs vpp.NodeInterfaces) error {
	r.synced = false
	if err := r.checkBudget(); err != nil {
		return err
	}
	if r.checked != ifs.Incarnation {
		if err := checkMessages(ch); err != nil {
			return err
		}
		if r.cfg.Registry != nil && r.cfg.StatsSocket != "" {
			if err := enableCounters(ch); err != nil {
				return fmt.Errorf("VPP ACL policy renderer: enable the ACL counters: %w", err)
			}
		}
		if err := reclassifySessions(ch); err != nil {
			return fmt.Errorf("VPP ACL policy renderer: turn on session reclassification: %w", err)
		}
		r.checked = ifs.Incarnation
	}
	found := map[string][]uint32{}
	var foundCount int
	var newer []error
	err := vppapi.Dump(ch, &acl.ACLDump{ACLIndex: ^uint32(0)}, func() *acl.ACLDetails { return &acl.ACLDetails{} }, func(d *acl.ACLDetails) {
		if kind, _, _, ok := formatversion.ParseTag(d.Tag); !ok || kind != tagKind {
			return
		}
		if err := formatversion.CheckTag(fmt.Sprintf("VPP ACL %d", d.ACLIndex), d.Tag); err != nil {
			newer = append(newer, err)
			return
		}
		k := contentKey(d.R)
		found[k] = append(found[k], d.ACLIndex)
		foundCount++
	})
	if err != nil {
		return fmt.Errorf("VPP ACL policy renderer: dump ACLs: %w", err)
	}
	if len(newer) > 0 {
		return fmt.Errorf("VPP ACL policy renderer: %w", errors.Join(newer...))
	}
	adopt := func(c *creation) bool {
		k := contentKey(c.rules)
		if len(found[k]) == 0 {
			return false
		}
		c.index = found[k][0]
		found[k] = found[k][1:]
		return true
	}
	var creations []*creation
	want := func(c *creation) {
		if !adopt(c) {
			creations = append(creations, c)
		}
	}
	local := r.cache.LocalTables()
	localC := make([]*creation, len(local))
	for i, t := range local {
		c, err := r.creationOf(t)
		if err != nil {
			return err
		}
		localC[i] = c
		want(c)
	}
	var globalC, reflectC *creation
	if g := r.cache.GlobalTable(); len(g.Rules) > 0 {
		if globalC, err = r.creationOf(g); err != nil {
			return err
		}
		want(globalC)
	}
	if len(local) > 0 || globalC != nil {
		reflectC = &creation{what: "the reflective ACL", tag: reflectTag, rules: r.reflective}
		want(reflectC)
	}
	if err := r.create(ch, creations); err != nil {
		return err
	}
	r.inc = ifs.Incarnation
	clear(r.local)
	for i, t := range local {
		r.local[t.ID] = aclState{index: localC[i].index, rules: localC[i].rules}
	}
	r.global, r.reflect = nil, nil
	if globalC != nil {
		r.global = &aclState{index: globalC.index, rules: globalC.rules}
	}
	if reflectC != nil {
		r.reflect = &aclState{index: reflectC.index, rules: reflectC.rules}
	}

	clears, sets := map[netip.Addr]bool{}, map[netip.Addr]vpp.ACLLists{}
	for _, p := range r.pods {
		clears[p.addr] = true
	}
	clear(r.pods)
	for _, a := range r.cache.Assignments() {
		r.setPod(a.Pod, r.addrs[a.Pod], a.Table, clears, sets)
	}
	r.node = r.nodeLists()
	settings := append(settingsOf(clears, sets), nodeSettings(ifs, r.node)...)
	if err := r.dp.SetACLLists(ctx, r.inc, vpp.ACLPolicy, settings); err != nil {
		return fmt.Errorf("VPP ACL policy renderer: set the ACL lists of %d interfaces: %w", len(settings), err)
	}

	var unused []uint32
	for _, xs := range found {
		unused = append(unused, xs...)
	}
	slices.Sort(unused)
	adopted := foundCount - len(unused)
	for _, x := range unused {
		// An ACL that an interface vcoild does not set still holds (a pod
		// it no longer knows) cannot be deleted: it stays, and the next
		// sync tries again.
		if err := vppapi.Call(ch, &acl.ACLDel{ACLIndex: x}, &acl.ACLDelReply{}); err != nil && !vppapi.IsRetval(err, api.NO_SUCH_ENTRY) {
			r.log.Error(err, "cannot delete an ACL of an earlier policy renderer; it stays until the next sync", "aclIndex", x)
		}
	}
	r.metrics.setACLs(len(r.local), r.global != nil, r.reflect != nil)
	r.synced = true
	r.log.Info("policy ACLs synced", "incarnation", r.inc, "tables", len(r.local), "global", r.global != nil,
		"pods", len(r.pods), "adopted", adopted, "made", len(creations), "deleted", len(unused))
	return nil
}
