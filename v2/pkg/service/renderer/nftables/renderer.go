package nftables

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/nft"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// Config chooses the namespace, the table and the marks of the renderer.
type Config struct {
	// Netns is the path of the node's network namespace; empty means the
	// process's own. nft runs in it, and conntrack entries are deleted there.
	Netns string
	// Table is the name of the inet table the renderer owns; empty means
	// constants.ServiceTable.
	Table string
	// PodIfPrefix starts the name of the host-side interface of every pod
	// of this node (the Linux dataplane's HostIfPrefix). Traffic entering
	// through such an interface is pod traffic: it keeps its source address.
	// Required.
	PodIfPrefix string
	// MasqueradeMark is the one bit of the packet mark that tells
	// nat-postrouting to masquerade a packet; 0 means
	// constants.ServiceMasqueradeMark.
	MasqueradeMark uint32
	// Registry receives the renderer's metrics; nil registers none.
	Registry prometheus.Registerer
	// FullResyncPeriod is how long Resync trusts what the renderer last
	// wrote: past it, the next Resync lists the kernel again, to repair
	// changes made behind vcoil's back (kube-proxy's periodic full sync).
	// 0 means DefaultFullResyncPeriod.
	FullResyncPeriod time.Duration
	// DropInvalid drops forwarded packets that conntrack finds invalid,
	// as kube-proxy does unless conntrack's TCP be-liberal mode is on:
	// conntrack does not translate such a packet (a TCP segment outside
	// the window), so a reply of a DNATed connection would go out with the
	// endpoint's address and its receiver would reset the connection.
	// nil means true.
	DropInvalid *bool
}

// DefaultFullResyncPeriod is Config.FullResyncPeriod's default: listing ten
// thousand services costs a fraction of a second of CPU, once an hour.
const DefaultFullResyncPeriod = time.Hour

// Renderer is the service renderer of the Linux kernel.
type Renderer interface {
	service.Renderer
	// Remove deletes the renderer's table, for when vcoil stops serving
	// services on the node. A later Resync starts from scratch.
	Remove(ctx context.Context) error
	// Close releases the namespace and the netlink handle.
	Close()
}

type renderer struct {
	log    logr.Logger
	layout layout
	table  table
	netns  ns.NetNS
	nl     *netlink.Handle
	// deleteFlows deletes the conntrack entries of flows a transaction
	// made stale (conntrack.go, over nl).
	deleteFlows func(*staleFlows) (uint, error)
	metrics     *metrics
	// fullResync is Config.FullResyncPeriod.
	fullResync time.Duration

	// What the kernel holds, valid once synced: the model it was rendered
	// from, which service renders each frontend, and the table's content.
	synced bool
	// listed is when Resync last read the kernel; suspect means a
	// transaction failed since, so the mirror may not match the kernel.
	listed   time.Time
	suspect  bool
	node     service.Node
	services map[service.ID]*service.Service
	claims   map[frontendKey][]service.ID
	current  *ruleset
	objs     tableObjects
	wantObjs objects
}

// New opens the node's namespace and checks that nft runs there. It does
// not touch the table: the first Resync adopts what it finds.
func New(cfg Config, log logr.Logger) (Renderer, error) {
	if cfg.Table == "" {
		cfg.Table = constants.ServiceTable
	}
	r, err := newRenderer(cfg, log)
	if err != nil {
		return nil, err
	}
	var nsHandle netns.NsHandle
	if cfg.Netns != "" {
		if r.netns, err = ns.GetNS(cfg.Netns); err != nil {
			return nil, fmt.Errorf("network namespace %s: %w", cfg.Netns, err)
		}
		nsHandle = netns.NsHandle(r.netns.Fd())
	} else {
		if nsHandle, err = netns.Get(); err != nil {
			return nil, fmt.Errorf("own network namespace: %w", err)
		}
		defer nsHandle.Close()
	}
	if r.nl, err = netlink.NewHandleAt(nsHandle, unix.NETLINK_NETFILTER); err != nil {
		r.Close()
		return nil, fmt.Errorf("netfilter netlink socket in %q: %w", cfg.Netns, err)
	}
	r.deleteFlows = func(s *staleFlows) (uint, error) { return deleteFlows(r.nl, s) }
	if r.table, err = nft.Open(r.netns, knftables.InetFamily, cfg.Table, layoutOf); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// newRenderer checks cfg and makes a renderer without a table, namespace
// or conntrack.
func newRenderer(cfg Config, log logr.Logger) (*renderer, error) {
	if cfg.MasqueradeMark == 0 {
		cfg.MasqueradeMark = constants.ServiceMasqueradeMark
	}
	if bits.OnesCount32(cfg.MasqueradeMark) != 1 {
		return nil, fmt.Errorf("masquerade mark %#x: want a single bit", cfg.MasqueradeMark)
	}
	if cfg.PodIfPrefix == "" {
		return nil, errors.New("pod interface prefix is required")
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, fmt.Errorf("register the service renderer's metrics: %w", err)
	}
	if cfg.FullResyncPeriod <= 0 {
		cfg.FullResyncPeriod = DefaultFullResyncPeriod
	}
	return &renderer{
		log:        log,
		layout:     layout{podIfPrefix: cfg.PodIfPrefix, mark: cfg.MasqueradeMark, dropInvalid: cfg.DropInvalid == nil || *cfg.DropInvalid},
		metrics:    m,
		fullResync: cfg.FullResyncPeriod,
	}, nil
}

func (r *renderer) Close() {
	if r.table != nil {
		r.table.Close()
	}
	if r.nl != nil {
		r.nl.Close()
	}
	if r.netns != nil {
		_ = r.netns.Close()
	}
}

// Resync renders the whole state and applies its difference in one
// transaction. The difference is taken with what the renderer last wrote
// while that can be trusted; the kernel is listed only at the first Resync
// (adopting the table a previous vcoild left: with the same state nothing
// changes, so a restart does not disturb traffic), after a failed
// transaction, and once per FullResyncPeriod, to repair drift. vcoild
// resyncs every few seconds, and listing ten thousand services each time
// would cost more CPU than everything else it does.
func (r *renderer) Resync(ctx context.Context, state *service.State) (err error) {
	defer func(start time.Time) { r.metrics.observe("resync", start, err) }(time.Now())
	if r.synced && !r.suspect && time.Since(r.listed) < r.fullResync {
		if r.holds(state) {
			// Rendering the same models again gives the same table: the
			// periodic Resync of an unchanged state costs a comparison,
			// not a render of every service (about 80 ms at ten
			// thousand, during which the next change would wait).
			return nil
		}
		return r.full(ctx, state, r.objs, r.current, false)
	}
	listed := time.Now()
	haveObjs, have, err := read(ctx, r.table)
	if err != nil {
		r.synced = false
		return err
	}
	if err := r.full(ctx, state, haveObjs, have, true); err != nil {
		return err
	}
	r.listed, r.suspect = listed, false
	return nil
}

// holds says whether the renderer last rendered exactly state: the same
// node and the very same service models (the processor keeps a model
// until its service changes, and Update keeps the ones it was given).
func (r *renderer) holds(state *service.State) bool {
	if len(state.Services) != len(r.services) || !reflect.DeepEqual(state.Node, r.node) {
		return false
	}
	for id, s := range state.Services {
		if r.services[id] != s {
			return false
		}
	}
	return true
}

// full renders state completely and applies its difference with the given
// kernel content; purgeAll checks every affinity entry (Resync) instead of
// those of the frontends that lost endpoints.
func (r *renderer) full(ctx context.Context, state *service.State, haveObjs tableObjects, have *ruleset, purgeAll bool) error {
	want, claims := r.render(&state.Node, state.Services)
	wantObjs := r.layout.objects(&state.Node, want.uses)
	p := &plan{}
	if len(have.frontends) == 0 {
		// Every element is added: room for them at once, since growing
		// the list of 110,000 elements of ten thousand services is
		// garbage that a memory-limited vcoild collects at its first sync.
		p.addElems = make([]nft.ElementOp, 0, want.elements+len(want.hairpin))
	}
	p.objectsDiff(haveObjs, wantObjs)
	for _, e := range have.stray {
		name := e.Set + e.Map
		p.delElem(name, e.Key)
	}
	keys := map[frontendKey]bool{}
	for k := range have.frontends {
		keys[k] = true
	}
	for k := range want.frontends {
		keys[k] = true
	}
	var stale staleFlows
	var lost []frontendKey
	for k := range keys {
		old, w := have.frontends[k], want.frontends[k]
		p.frontendDiff(k, old, w)
		stale.add(k, old, w)
		if old != nil && old.Affinity > 0 {
			lost = append(lost, k)
		}
	}
	for a := range union(have.hairpin, want.hairpin) {
		p.hairpinDiff(a, have.hairpin[a] > 0, want.hairpin[a] > 0)
	}
	if purgeAll {
		lost = nil
	}
	get := func(k frontendKey) *frontendState { return want.frontends[k] }
	if err := r.purgeAffinity(ctx, p, haveObjs, wantObjs, have.frontends, get, lost, purgeAll); err != nil {
		return err
	}
	if err := r.apply(ctx, p, &stale); err != nil {
		r.synced = false
		return err
	}
	r.synced = true
	r.node = state.Node
	r.services = maps.Clone(state.Services)
	r.claims = claims
	r.current = want
	r.objs, r.wantObjs = objectsHeld(wantObjs), wantObjs
	r.metrics.table(want.elements+len(want.hairpin), wantObjs)
	return nil
}

// render is the whole table of a state. A frontend claimed by several
// services (two services with one external IP and port) is rendered from
// the smallest ID, as Update does.
func (r *renderer) render(node *service.Node, services map[service.ID]*service.Service) (*ruleset, map[frontendKey][]service.ID) {
	want := newRuleset()
	claims := map[frontendKey][]service.ID{}
	conflicts := 0
	for _, id := range slices.SortedFunc(maps.Keys(services), service.ID.Compare) {
		s := services[id]
		if err := s.Validate(); err != nil {
			r.log.Error(err, "Service skipped", "service", id)
			continue
		}
		frontendsOf(node, s, func(k frontendKey, f *frontendState) {
			switch c := claims[k]; {
			case len(c) == 0:
				want.put(k, f)
			case c[len(c)-1] == id:
				return
			default:
				conflicts++
			}
			claims[k] = append(claims[k], id)
		})
	}
	if conflicts > 0 {
		r.log.Info("Frontends claimed by more than one service; the first by namespace and name serves them", "conflicts", conflicts)
	}
	return want, claims
}

// Update renders only the frontends of the services that changed and
// applies their difference with the mirror in one transaction, without
// listing the kernel. A change of the node re-renders everything (still
// without listing).
func (r *renderer) Update(ctx context.Context, ch *service.Changes) (err error) {
	defer func(start time.Time) { r.metrics.observe("update", start, err) }(time.Now())
	if !r.synced {
		return errors.New("service renderer: Update before a successful Resync")
	}
	if ch.Empty() {
		return nil
	}
	if ch.Node != nil {
		state := &service.State{Node: *ch.Node, Services: maps.Clone(r.services)}
		for _, s := range ch.Upsert {
			state.Services[s.ID] = s
		}
		for _, id := range ch.Delete {
			delete(state.Services, id)
		}
		return r.full(ctx, state, r.objs, r.current, false)
	}

	changed := map[service.ID]*service.Service{}
	for _, id := range ch.Delete {
		changed[id] = nil
	}
	for _, s := range ch.Upsert {
		if err := s.Validate(); err != nil {
			r.log.Error(err, "Service change skipped", "service", s.ID)
			continue
		}
		changed[s.ID] = s
	}
	claims := map[frontendKey][]service.ID{}
	touch := func(k frontendKey) {
		if _, ok := claims[k]; !ok {
			claims[k] = slices.Clone(r.claims[k])
		}
	}
	for id := range changed {
		if old := r.services[id]; old != nil {
			frontendsOf(&r.node, old, func(k frontendKey, _ *frontendState) {
				touch(k)
				claims[k] = slices.DeleteFunc(claims[k], func(c service.ID) bool { return c == id })
			})
		}
	}
	rendered := map[service.ID]map[frontendKey]*frontendState{}
	for id, s := range changed {
		if s == nil {
			continue
		}
		m := map[frontendKey]*frontendState{}
		frontendsOf(&r.node, s, func(k frontendKey, f *frontendState) {
			touch(k)
			if !slices.Contains(claims[k], id) {
				claims[k] = append(claims[k], id)
			}
			if _, dup := m[k]; !dup {
				m[k] = f
			}
		})
		rendered[id] = m
	}

	ov := newOverlay(r.current)
	var stale staleFlows
	var lost []frontendKey
	hairpins := map[netip.Addr]bool{}
	for k, c := range claims {
		var w *frontendState
		if len(c) > 0 {
			owner := ownerOf(c)
			m, ok := rendered[owner]
			if !ok { // an unchanged service now serves the frontend
				m = map[frontendKey]*frontendState{}
				frontendsOf(&r.node, r.services[owner], func(k frontendKey, f *frontendState) {
					if _, dup := m[k]; !dup {
						m[k] = f
					}
				})
				rendered[owner] = m
			}
			w = m[k]
		}
		old := r.current.frontends[k]
		if old.equal(w) {
			continue
		}
		ov.put(k, w)
		stale.add(k, old, w)
		if old != nil {
			if old.Affinity > 0 {
				lost = append(lost, k)
			}
			for _, a := range old.Hairpin {
				hairpins[a] = true
			}
		}
		if w != nil {
			for _, a := range w.Hairpin {
				hairpins[a] = true
			}
		}
	}
	wantObjs := r.layout.objects(&r.node, ov.uses)
	p := &plan{}
	p.objectsDiff(r.objs, wantObjs)
	for k := range ov.changed {
		p.frontendDiff(k, r.current.frontends[k], ov.get(k))
	}
	for a := range hairpins {
		p.hairpinDiff(a, r.current.hairpin[a] > 0, ov.hairpin[a] > 0)
	}
	if err := r.purgeAffinity(ctx, p, r.objs, wantObjs, r.current.frontends, ov.get, lost, false); err != nil {
		return err
	}
	if err := r.apply(ctx, p, &stale); err != nil {
		// A transaction is atomic, but whether it was committed is not
		// known if nft was killed (a cancelled context): the next Resync
		// lists the kernel.
		r.suspect = true
		return err
	}
	ov.commit()
	r.objs, r.wantObjs = objectsHeld(wantObjs), wantObjs
	for id, s := range changed {
		if s == nil {
			delete(r.services, id)
		} else {
			r.services[id] = s
		}
	}
	for k, c := range claims {
		if len(c) == 0 {
			delete(r.claims, k)
		} else {
			r.claims[k] = c
		}
	}
	r.metrics.table(r.current.elements+len(r.current.hairpin), wantObjs)
	return nil
}

// purgeAffinity plans the deletion of session affinity entries that point
// to an endpoint their frontend no longer sends to (or that belong to a
// frontend without affinity, or with another timeout now). It lists the
// affinity maps concerned, which only a loss of endpoints requires: with
// all, every existing map is checked (Resync, to repair what changed while
// vcoild was away); otherwise only those of the frontends in lost.
func (r *renderer) purgeAffinity(ctx context.Context, p *plan, haveObjs tableObjects, wantObjs objects,
	old map[frontendKey]*frontendState, want func(frontendKey) *frontendState, lost []frontendKey, all bool,
) error {
	check := map[string]map[frontendKey]bool{} // map name -> frontends (nil: all)
	if all {
		for name := range wantObjs.Sets {
			if _, ok := haveObjs.sets[name]; ok && isAffinityMap(name) {
				check[name] = nil
			}
		}
	}
	for _, k := range lost {
		o, w := old[k], want(k)
		if w != nil && w.Affinity == o.Affinity && subset(o.endpointSet(), w.endpointSet()) {
			continue
		}
		name := affinityMap(familyOf(k.Addr), o.Affinity)
		if _, kept := wantObjs.Sets[name]; !kept {
			continue // the map goes with its last frontend
		}
		if check[name] == nil {
			check[name] = map[frontendKey]bool{}
		}
		check[name][k] = true
	}
	for _, name := range slices.Sorted(maps.Keys(check)) {
		only := check[name]
		elems, err := r.table.Elements(ctx, name)
		if err != nil {
			return err
		}
		endpoints := map[frontendKey]map[netip.AddrPort]bool{}
		for _, e := range elems {
			if len(e.Key) != 4 || len(e.Value) != 2 {
				continue
			}
			fam := name[len(mapAffinityPrefix) : len(mapAffinityPrefix)+1]
			k, ok := parseFrontend(e.Key[1:], fam)
			if !ok || (only != nil && !only[k]) {
				continue
			}
			w := want(k)
			if w != nil && affinityMap(fam, w.Affinity) == name {
				eps, ok := endpoints[k]
				if !ok {
					eps = w.endpointSet()
					endpoints[k] = eps
				}
				if ep, ok := parseAddrPort(e.Value); ok && eps[ep] {
					continue
				}
			}
			p.purgeAffinity(name, e.Key, e.Value)
		}
	}
	return nil
}

func isAffinityMap(name string) bool {
	n := len(mapAffinityPrefix)
	return len(name) > n+2 && name[:n] == mapAffinityPrefix && (name[n] == '4' || name[n] == '6') && name[n+1] == '-'
}

func parseAddrPort(v []string) (netip.AddrPort, bool) {
	a, err1 := netip.ParseAddr(v[0])
	port, err2 := strconv.ParseUint(v[1], 10, 16)
	if err1 != nil || err2 != nil {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(a, uint16(port)), true
}

func subset(a, b map[netip.AddrPort]bool) bool {
	for e := range a {
		if !b[e] {
			return false
		}
	}
	return true
}

func union[V any](a, b map[netip.Addr]V) map[netip.Addr]bool {
	u := make(map[netip.Addr]bool, len(a)+len(b))
	for k := range a {
		u[k] = true
	}
	for k := range b {
		u[k] = true
	}
	return u
}

// apply runs the plan as one transaction, then clears the conntrack
// entries it made stale. A failure of the latter is logged, not returned:
// the table is right, and retrying the sync would not find the entries
// again.
func (r *renderer) apply(ctx context.Context, p *plan, stale *staleFlows) error {
	if !p.empty() {
		var err error
		switch {
		case p.elementsOnly() && p.changes <= nft.MaxApplyOps:
			// Element changes alone (an Update's usual endpoint change) go
			// over netlink, as one transaction: nft would first read every
			// element of the maps it writes to, which at ten thousand
			// services (110,000 elements) costs about 100 ms per change.
			err = r.table.ApplyElements(ctx, p.elementOps())
		case p.fresh:
			// A new table: its objects through nft, then its elements
			// over netlink in batches of nft.MaxApplyOps, each its own
			// transaction (nft and netlink cannot share one). nft spends
			// about 17 µs of CPU per element: two of the 2.3 s of a
			// 10,000-service table. Until the last batch the table serves
			// part of the services, no worse than the missing table did;
			// if a batch fails, the renderer is no longer synced and the
			// next Resync lists the kernel and completes it.
			err = r.runScript(ctx, p.objectsOnly())
			for ops := range slices.Chunk(p.elementOps(), nft.MaxApplyOps) {
				if err != nil {
					break
				}
				err = r.table.ApplyElements(ctx, ops)
			}
		default:
			err = r.runScript(ctx, p)
		}
		if err != nil {
			return fmt.Errorf("apply %d changes to nftables table %s: %w", p.changes, r.table.Name(), err)
		}
	}
	if !stale.empty() {
		n, err := r.deleteFlows(stale)
		if err != nil {
			r.log.Error(err, "Stale UDP conntrack entries kept")
		} else if n > 0 {
			r.log.V(1).Info("Deleted stale UDP conntrack entries", "entries", n)
		}
	}
	return nil
}

// runScript applies the plan as one nft script.
func (r *renderer) runScript(ctx context.Context, p *plan) error {
	script, err := p.script(r.table.NewTransaction, knftables.InetFamily, r.table.Name())
	if err != nil {
		return err
	}
	return r.table.RunScript(ctx, script)
}

func (r *renderer) Remove(ctx context.Context) error {
	r.synced = false
	return r.table.Delete(ctx)
}

// RemoveKubeProxyTables deletes the tables kube-proxy's nftables mode
// leaves ("ip kube-proxy" and "ip6 kube-proxy") in the namespace at
// netnsPath ("" for the process's own), for a node migrating from
// kube-proxy to vcoil. Missing tables are not an error.
func RemoveKubeProxyTables(ctx context.Context, netnsPath string) error {
	var n ns.NetNS
	if netnsPath != "" {
		var err error
		if n, err = ns.GetNS(netnsPath); err != nil {
			return fmt.Errorf("network namespace %s: %w", netnsPath, err)
		}
		defer n.Close()
	}
	for _, fam := range []knftables.Family{knftables.IPv4Family, knftables.IPv6Family} {
		t, err := nft.Open(n, fam, "kube-proxy", nil)
		if err != nil {
			return err
		}
		err = t.Delete(ctx)
		t.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
