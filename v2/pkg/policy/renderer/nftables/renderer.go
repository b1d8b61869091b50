package nftables

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/nft"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// Config configures a Renderer.
type Config struct {
	// Netns is the node's network namespace ("" = the process's own).
	Netns string
	// Table is the inet table the renderer owns (constants.PolicyTable
	// when empty).
	Table string
	// PodIfPrefix starts the name of the node-side interface of every
	// local pod (the Linux dataplane's HostIfPrefix): what comes out of one
	// with a source no local pod may use is dropped. Required.
	PodIfPrefix string
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
	// the dispatch maps' elements, by slot and address.
	synced bool
	groups map[string]*group // by chain name
	byKey  map[string]*group
	elems  [nSlots]map[netip.Addr]*group
	// srcs are the elements of the source sets (srcSets), by family.
	srcs   [2][]interval
	nextID int
	txns   uint64 // transactions planned, the clock of idle groups

	// lastScript is the last transaction's nft input, for tests.
	lastScript string
}

type podWant struct {
	rules    int // the length of its rule lists and tiers, for the metrics
	ips      []netip.Addr
	sources  []netip.Prefix        // the allowed source prefixes besides ips
	contents [nSlots]*chainContent // by slot; nil: nothing to decide there
	keys     [nSlots]string
	// lists identify the rule lists and tiers the contents were made from.
	lists [nSlots]listID
	// np are its NetworkPolicy lists, by direction, and isolating the
	// NetworkPolicies they come from, which its denied counts are for.
	np        [2][]renderer.Rule
	isolating [2][]string
}

// listID identifies a rule list or tier slice: the configurator sends the
// very same slice for one that did not change.
type listID struct {
	first any // *renderer.Rule or *renderer.TierRule
	n     int
}

func ruleListID(l []renderer.Rule) listID {
	if len(l) == 0 {
		return listID{}
	}
	return listID{&l[0], len(l)}
}

func tierListID(l []renderer.TierRule) listID {
	if len(l) == 0 {
		return listID{}
	}
	return listID{&l[0], len(l)}
}

// group is a chain with its sets, shared by the pods whose rules of one
// slot (tier and direction) have the same content.
type group struct {
	name      string
	kind      kind
	dir       renderer.Direction
	cc        *chainContent
	key       string // cc.key(slot)
	layouts   []runLayout
	structure string // structureOf(layouts)
	refs      int    // dispatch map elements jumping to it
	// idleSince is the transaction since which no address uses it.
	idleSince uint64
}

func (g *group) slot() slot { return slotOf(g.kind, g.dir) }

// sets are the group's sets.
func (g *group) sets() []setDef { return chainSets(g.kind, g.name, g.layouts) }

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
	return withKernel(cfg, k)
}

// withKernel is a Renderer of table cfg.Table through k (a Fake's in
// tests); it closes k when it fails.
func withKernel(cfg Config, k *kernel) (*Renderer, error) {
	if cfg.PodIfPrefix == "" {
		k.close()
		return nil, errors.New("the nftables policy renderer needs the prefix of the pods' interface names")
	}
	r := &Renderer{
		cfg: cfg, log: cfg.Log, k: k,
		pods: map[renderer.PodID]*podWant{}, owners: map[netip.Addr]renderer.PodID{},
	}
	r.resetMirror()
	var err error
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
	for s := range r.elems {
		r.elems[s] = map[netip.Addr]*group{}
	}
	r.srcs = [2][]interval{}
	r.nextID = 0
}

// Render applies txn to the table in one nft transaction.
func (r *Renderer) Render(ctx context.Context, txn renderer.Txn) (err error) {
	start := time.Now()
	defer func() { r.metrics.observe(start, txn.Resync, err) }()
	var vm renderer.ValidationMemo
	for i := range txn.Pods {
		pr := &txn.Pods[i]
		if pr.Removed {
			continue
		}
		if w := r.pods[pr.Pod]; w != nil {
			// The lists the renderer holds were checked when it got them.
			for d, l := range w.np {
				vm.Valid(renderer.Direction(d), l)
			}
		}
		if err := pr.ValidateShared(&vm); err != nil {
			return fmt.Errorf("render the policies of pod %s: %w", pr.Pod, err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	affected := r.want(txn)
	full := txn.Resync || !r.synced
	var read *adoption
	if !r.synced {
		if read, err = r.adoptKernel(ctx); err != nil {
			return err
		}
	}
	p := r.planTxn(affected, full, read)
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

// maxNetlinkOps bounds the element changes sent over netlink in one batch
// (nft.MaxApplyOps). Larger plans (a full render) go to nft, whose fixed
// cost matters less there.
const maxNetlinkOps = nft.MaxApplyOps

// apply runs the plan's steps. A table replaced, or whose base is
// rewritten, is one nft transaction, elements included; other plans (a new
// table too: nothing was filtered before it) write their objects with nft
// and their elements over netlink (steps), each step safe alone.
func (r *Renderer) apply(ctx context.Context, p *plan, st *steps) error {
	if p.purge || (p.base && !p.newTable) || len(st.ops) > maxNetlinkOps {
		if s := st.text(r.cfg.Table); s != "" {
			return r.k.t.RunScript(ctx, s)
		}
		return nil
	}
	if st.before != "" {
		if err := r.k.t.RunScript(ctx, st.before); err != nil {
			return err
		}
	}
	if len(st.ops) > 0 {
		if err := r.k.t.ApplyElements(ctx, st.ops); err != nil {
			return err
		}
	}
	if st.after != "" {
		return r.k.t.RunScript(ctx, st.after)
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
	// Pods of one set of ClusterNetworkPolicies get the very same tier
	// slices from the configurator: their content is computed once.
	type memoKey struct {
		s  slot
		id listID
	}
	type memoed struct {
		cc  *chainContent
		key string
	}
	memo := map[memoKey]memoed{}
	for i := range txn.Pods {
		pr := &txn.Pods[i]
		forget(pr.Pod)
		if pr.Removed || len(pr.IPs) == 0 {
			continue
		}
		w := &podWant{sources: pr.SourcePrefixes, np: [2][]renderer.Rule{pr.Ingress, pr.Egress}, isolating: pr.NetworkPolicies}
		for _, a := range pr.IPs {
			a = a.Unmap()
			w.ips = append(w.ips, a)
			if other, taken := r.owners[a]; taken && other != pr.Pod {
				r.log.Info("two pods claim one address: the later one's rules apply", "address", a, "pod", pr.Pod, "other", other)
			}
			r.owners[a] = pr.Pod
			affected[a] = true
		}
		for s := range slot(nSlots) {
			d := s.dir()
			t := pr.Tiers(d)
			var id listID
			var content func() *chainContent
			switch s.kind() {
			case kindNetworkPolicy:
				w.rules += len(t.NetworkPolicy)
				id = ruleListID(t.NetworkPolicy)
				content = func() *chainContent {
					if c := contentOf(d, t.NetworkPolicy); c != nil {
						return &chainContent{runs: []run{{v: verdictReturn, c: c}}}
					}
					return nil
				}
			case kindAdmin:
				w.rules += len(t.Admin)
				id = tierListID(t.Admin)
				content = func() *chainContent { return tierContent(kindAdmin, d, t.Admin) }
			case kindBaseline:
				w.rules += len(t.Baseline)
				// A pod that NetworkPolicies isolate in d never reaches its
				// Baseline rules.
				if len(t.NetworkPolicy) == 0 {
					id = tierListID(t.Baseline)
					content = func() *chainContent { return tierContent(kindBaseline, d, t.Baseline) }
				}
			}
			if content == nil {
				continue
			}
			// The configurator sends the very same slice for a list that
			// did not change: its content is the one computed before.
			if prev := prevs[pr.Pod]; prev != nil && id.n > 0 && prev.lists[s] == id {
				w.contents[s], w.keys[s] = prev.contents[s], prev.keys[s]
			} else if m, ok := memo[memoKey{s, id}]; ok && id.n > 0 {
				w.contents[s], w.keys[s] = m.cc, m.key
			} else {
				w.contents[s] = content()
				w.keys[s] = w.contents[s].key(s)
				if s.kind() != kindNetworkPolicy {
					memo[memoKey{s, id}] = memoed{w.contents[s], w.keys[s]}
				}
			}
			w.lists[s] = id
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

// sources are the elements the source sets (srcSets) should hold, by
// family: every local pod's addresses and allowed source prefixes.
func (r *Renderer) sources() [2][]interval {
	var out [2][]interval
	for _, w := range r.pods {
		for _, a := range w.ips {
			out[familyOf(a)] = append(out[familyOf(a)], interval{a, a})
		}
		for _, p := range w.sources {
			if p.IsValid() {
				out[familyOf(p.Addr())] = append(out[familyOf(p.Addr())], prefixInterval(p))
			}
		}
	}
	for f := range out {
		out[f] = normalize(out[f])
	}
	return out
}

// desired is the content address a should have in slot s.
func (r *Renderer) desired(s slot, a netip.Addr) (*chainContent, string) {
	id, ok := r.owners[a]
	if !ok {
		return nil, ""
	}
	w := r.pods[id]
	return w.contents[s], w.keys[s]
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
	if err := k.t.Delete(ctx); err != nil {
		return fmt.Errorf("delete table inet %s: %w", table, err)
	}
	return nil
}
