package sourceguard

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/go-logr/logr"
	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/nft"
)

// Names in the table. docs/linux-dataplane.md documents them; change both
// together.
const (
	// Kind is the table's kind in its format set ("vcoil source v1").
	Kind = "source"
	// Chain is the base chain.
	Chain = "prerouting"
	// Set4 and Set6 hold the (interface, source) pairs pods may send.
	Set4 = "allow4"
	Set6 = "allow6"
	// Dropped4 and Dropped6 are the named counters of dropped packets.
	Dropped4 = "dropped4"
	Dropped6 = "dropped6"
)

var layouts = nft.FixedLayouts(map[string]nft.Layout{
	Set4: {Key: []nft.Field{nft.IfName, nft.IPv4Interval}},
	Set6: {Key: []nft.Field{nft.IfName, nft.IPv6Interval}},
})

var setTypes = map[string]string{Set4: "ifname . ipv4_addr", Set6: "ifname . ipv6_addr"}

// Entries are the sources one pod interface may send from: its addresses
// and its allowed prefixes.
type Entries struct {
	Addrs    []netip.Addr
	Prefixes []netip.Prefix
}

// Guard is the source validation table of one network namespace. Its
// methods may be called concurrently; each reads and writes the table
// under one lock, so that one interface's change never undoes another's.
type Guard struct {
	mu       sync.Mutex
	t        nft.Table
	ifPrefix string
	log      logr.Logger
}

// Open opens the table in netns (nil: the process's own); it changes
// nothing before Ensure or Sync. ifPrefix starts the name of every pod
// interface (the node-side veths); nothing else in netns may start with
// it. The caller keeps netns open until Close.
func Open(ctx context.Context, netns ns.NetNS, ifPrefix string, log logr.Logger) (*Guard, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	t, err := nft.Open(netns, knftables.InetFamily, constants.SourceTable, layouts)
	if err != nil {
		return nil, err
	}
	return New(t, ifPrefix, log)
}

// New is a Guard on t (an nft.Fake in tests), whose sets need the
// package's layouts: NewFake makes one.
func New(t nft.Table, ifPrefix string, log logr.Logger) (*Guard, error) {
	if ifPrefix == "" || strings.ContainsAny(ifPrefix, "\"*\\ ") {
		return nil, fmt.Errorf("source guard: pod interface prefix %q", ifPrefix)
	}
	return &Guard{t: t, ifPrefix: ifPrefix, log: log}, nil
}

// NewFake is an empty nft.Fake for the guard's table.
func NewFake() *nft.Fake {
	return nft.NewFake(knftables.InetFamily, constants.SourceTable, layouts)
}

// Close releases the table's netlink sockets.
func (g *Guard) Close() { g.t.Close() }

func (g *Guard) id() nft.TableID { return nft.TableID{Family: g.t.Family(), Name: g.t.Name()} }

// rule is one rule of the chain; its comment identifies it when the table
// is adopted.
type rule struct{ text, comment string }

// Router solicitations, neighbour solicitations and advertisements, MLD
// reports and dones.
const (
	linkLocalICMP   = "{ nd-router-solicit, nd-neighbor-solicit, nd-neighbor-advert, mld-listener-report, mld-listener-done, mld2-listener-report }"
	unspecifiedICMP = "{ nd-neighbor-solicit, mld-listener-report, mld-listener-done, mld2-listener-report }"
)

func (g *Guard) rules() []rule {
	return []rule{
		{`iifname != "` + g.ifPrefix + `*" return`, "not a pod interface"},
		{"ip daddr 127.0.0.0/8 counter name " + Dropped4 + " drop", "loopback destination"},
		{"ip6 daddr ::1 counter name " + Dropped6 + " drop", "loopback destination"},
		{"icmpv6 type { nd-router-advert, nd-redirect } counter name " + Dropped6 + " drop", "router advertisement or redirect"},
		{"iifname . ip saddr @" + Set4 + " accept", "allowed source"},
		{"iifname . ip6 saddr @" + Set6 + " accept", "allowed source"},
		{"ip6 saddr fe80::/10 icmpv6 type " + linkLocalICMP + " accept", "link-local neighbour discovery and MLD"},
		{"ip6 saddr :: icmpv6 type " + unspecifiedICMP + " accept", "duplicate address detection and MLD"},
		{"meta nfproto ipv4 counter name " + Dropped4 + " drop", "forged source"},
		{"meta nfproto ipv6 counter name " + Dropped6 + " drop", "forged source"},
	}
}

// Ensure makes the table, or adopts the one there: one of this format
// with the chain, sets and counters the guard writes is kept as it is; an
// older one, or one whose objects differ, is replaced in one transaction
// that keeps its elements; a newer one is refused (a
// *formatversion.NewerError) and left unchanged.
func (g *Guard) Ensure(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ensure(ctx, nil)
}

// ensure is Ensure; a table it makes or replaces holds initial's elements
// too, so that no pod's traffic is dropped between the table's making and
// its elements' adding.
func (g *Guard) ensure(ctx context.Context, initial map[string]Entries) error {
	c, err := g.t.Read(ctx)
	if err != nil {
		return err
	}
	keep := map[string][]string{}
	if c.Exists {
		v, err := nft.FormatOf(g.id(), c, Kind)
		if err != nil {
			return err
		}
		if err := formatversion.Check("nftables table "+g.id().String(), v, formatversion.SourceTable); err != nil {
			return err
		}
		diff := g.differs(c)
		if v == formatversion.SourceTable && diff == "" {
			return nil
		}
		for set, typ := range setTypes {
			if s := c.Sets[set]; s == nil || s.Type != typ || !s.Interval || s.Map {
				continue
			}
			elems, err := g.t.Elements(ctx, set)
			if err != nil {
				return err
			}
			for _, e := range elems {
				keep[set] = append(keep[set], strings.Join(e.Key, " . "))
			}
		}
		g.log.Info("replacing the source validation table", "table", g.id().String(), "format", v, "differs", diff)
	}
	tx := g.t.NewTransaction()
	// Adding first makes the delete succeed when there is no table.
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{})
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("vcoil: pods may send only from their own addresses")})
	tx.Add(nft.NewFormatSet(Kind, formatversion.SourceTable))
	for _, set := range []string{Set4, Set6} {
		tx.Add(&knftables.Set{Name: set, Type: setTypes[set], Flags: []knftables.SetFlag{knftables.IntervalFlag}})
	}
	tx.Add(&knftables.Counter{Name: Dropped4})
	tx.Add(&knftables.Counter{Name: Dropped6})
	tx.Add(&knftables.Chain{Name: Chain, Type: knftables.PtrTo(knftables.FilterType),
		Hook: knftables.PtrTo(knftables.PreroutingHook), Priority: knftables.PtrTo(knftables.RawPriority)})
	for _, r := range g.rules() {
		tx.Add(&knftables.Rule{Chain: Chain, Rule: r.text, Comment: knftables.PtrTo(r.comment)})
	}
	elems := map[string]map[string]bool{Set4: {}, Set6: {}}
	for set, keys := range keep {
		for _, k := range keys {
			elems[set][k] = true
		}
	}
	for hostIf, e := range initial {
		want, err := elementsOf(hostIf, e)
		if err != nil {
			return err
		}
		for set, keys := range want {
			for _, k := range keys {
				elems[set][hostIf+" . "+k] = true
			}
		}
	}
	for _, set := range []string{Set4, Set6} {
		for _, k := range slices.Sorted(maps.Keys(elems[set])) {
			key, _ := nft.SplitElement(k)
			tx.Add(&knftables.Element{Set: set, Key: key})
		}
	}
	if err := g.t.Run(ctx, tx); err != nil {
		return err
	}
	if !c.Exists {
		g.log.Info("made the source validation table", "table", g.id().String())
	}
	return nil
}

// differs says how the table c differs from what the guard writes, "" when
// it does not.
func (g *Guard) differs(c *nft.Contents) string {
	var named []string
	for name, s := range c.Sets {
		if !s.Anonymous {
			named = append(named, name)
		}
	}
	slices.Sort(named)
	if want := slices.Sorted(slices.Values([]string{nft.FormatSet, Set4, Set6})); !slices.Equal(named, want) {
		return fmt.Sprintf("sets %v, want %v", named, want)
	}
	for set, typ := range setTypes {
		if s := c.Sets[set]; s.Type != typ || !s.Interval || s.Map {
			return fmt.Sprintf("set %s is %q (interval %v, map %v), want an interval set of %q", set, s.Type, s.Interval, s.Map, typ)
		}
	}
	if !c.Counters[Dropped4] || !c.Counters[Dropped6] || len(c.Counters) != 2 {
		return fmt.Sprintf("counters %v, want %s and %s", slices.Sorted(maps.Keys(c.Counters)), Dropped4, Dropped6)
	}
	ch := c.Chains[Chain]
	if len(c.Chains) != 1 || ch == nil || !ch.Base {
		return fmt.Sprintf("chains %v, want the base chain %s alone", slices.Sorted(maps.Keys(c.Chains)), Chain)
	}
	var want []string
	for _, r := range g.rules() {
		want = append(want, r.comment)
	}
	if !slices.Equal(ch.Rules, want) {
		return fmt.Sprintf("rules %q, want %q", ch.Rules, want)
	}
	return ""
}

// Healthy returns an error when the table is missing or differs from what
// the guard writes: pods' sources are not checked (or not as documented).
func (g *Guard) Healthy(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, err := g.t.Read(ctx)
	if err != nil {
		return err
	}
	if !c.Exists {
		return fmt.Errorf("source validation table %s is missing", g.id())
	}
	if d := g.differs(c); d != "" {
		return fmt.Errorf("source validation table %s differs: %s", g.id(), d)
	}
	return nil
}

// elementsOf is the text of hostIf's elements (without the interface) by
// set: each address and prefix, masked, without those inside another of
// e's prefixes (the kernel's concatenated interval sets take no
// overlapping elements).
func elementsOf(hostIf string, e Entries) (map[string][]string, error) {
	if hostIf == "" || len(hostIf) > 15 || strings.ContainsAny(hostIf, "\"* ") {
		return nil, fmt.Errorf("interface name %q", hostIf)
	}
	var ps []netip.Prefix
	for _, a := range e.Addrs {
		if !a.IsValid() || a.Zone() != "" {
			return nil, fmt.Errorf("interface %s: address %v", hostIf, a)
		}
		a = a.Unmap()
		ps = append(ps, netip.PrefixFrom(a, a.BitLen()))
	}
	for _, p := range e.Prefixes {
		if !p.IsValid() || p.Addr().Zone() != "" || p.Addr().Is4In6() {
			return nil, fmt.Errorf("interface %s: prefix %v", hostIf, p)
		}
		ps = append(ps, p.Masked())
	}
	// Shorter prefixes first: each one kept covers what follows inside it.
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if a.Bits() != b.Bits() {
			return a.Bits() - b.Bits()
		}
		return a.Addr().Compare(b.Addr())
	})
	out := map[string][]string{}
	var kept []netip.Prefix
	for _, p := range ps {
		if slices.ContainsFunc(kept, func(k netip.Prefix) bool { return k.Contains(p.Addr()) && k.Bits() <= p.Bits() }) {
			continue
		}
		kept = append(kept, p)
		set := Set4
		if p.Addr().Is6() {
			set = Set6
		}
		out[set] = append(out[set], nft.RangeText(p.Addr(), nft.LastAddr(p)))
	}
	return out, nil
}

// current reads both sets: interface -> set -> element texts.
func (g *Guard) current(ctx context.Context) (map[string]map[string][]string, error) {
	out := map[string]map[string][]string{}
	for _, set := range []string{Set4, Set6} {
		elems, err := g.t.Elements(ctx, set)
		if err != nil {
			return nil, err
		}
		for _, e := range elems {
			if len(e.Key) != 2 {
				continue
			}
			if out[e.Key[0]] == nil {
				out[e.Key[0]] = map[string][]string{}
			}
			out[e.Key[0]][set] = append(out[e.Key[0]][set], e.Key[1])
		}
	}
	return out, nil
}

// diff is the element changes that make hostIf's elements want from have.
func diff(hostIf string, have, want map[string][]string) []nft.ElementOp {
	var ops []nft.ElementOp
	for _, set := range []string{Set4, Set6} {
		for _, k := range have[set] {
			if !slices.Contains(want[set], k) {
				ops = append(ops, nft.ElementOp{Delete: true, Set: set, Key: []string{hostIf, k}})
			}
		}
		for _, k := range want[set] {
			if !slices.Contains(have[set], k) {
				ops = append(ops, nft.ElementOp{Set: set, Key: []string{hostIf, k}})
			}
		}
	}
	return ops
}

// apply writes ops in one netlink batch; deletes go first, so that an
// element that shrinks or grows into another's place fits.
func (g *Guard) apply(ctx context.Context, ops []nft.ElementOp) error {
	if len(ops) == 0 {
		return nil
	}
	slices.SortStableFunc(ops, func(a, b nft.ElementOp) int {
		switch {
		case a.Delete == b.Delete:
			return 0
		case a.Delete:
			return -1
		}
		return 1
	})
	return g.t.ApplyElements(ctx, ops)
}

// Allow makes hostIf's elements its addresses and prefixes, replacing what
// it had, in one transaction. The table must exist (Ensure).
func (g *Guard) Allow(ctx context.Context, hostIf string, addrs []netip.Addr, prefixes []netip.Prefix) error {
	want, err := elementsOf(hostIf, Entries{Addrs: addrs, Prefixes: prefixes})
	if err != nil {
		return fmt.Errorf("source validation of %s: %w", hostIf, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	have, err := g.current(ctx)
	if err != nil {
		return fmt.Errorf("source validation of %s: %w", hostIf, err)
	}
	if err := g.apply(ctx, diff(hostIf, have[hostIf], want)); err != nil {
		return fmt.Errorf("source validation of %s: %w", hostIf, err)
	}
	return nil
}

// Forget removes hostIf's elements; a missing table has none.
func (g *Guard) Forget(ctx context.Context, hostIf string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	have, err := g.current(ctx)
	if err != nil {
		// Netlink's error for a missing set does not always unwrap to
		// ENOENT: ask whether the table is there.
		if c, rerr := g.t.Read(ctx); rerr == nil && !c.Exists {
			return nil
		}
		return fmt.Errorf("source validation of %s: %w", hostIf, err)
	}
	if err := g.apply(ctx, diff(hostIf, have[hostIf], nil)); err != nil {
		return fmt.Errorf("source validation of %s: %w", hostIf, err)
	}
	return nil
}

// Sync reconciles the table after a restart: it ensures the table (as
// Ensure, with want's elements in a table it makes), removes every
// element of an interface want lacks and adds want's missing elements.
// The other elements of an interface in want stay: after a restart the
// kernel tells a pod's addresses, while its allowed prefixes are known
// only to its SetupPod, which wrote them.
func (g *Guard) Sync(ctx context.Context, want map[string]Entries) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.ensure(ctx, want); err != nil {
		return err
	}
	have, err := g.current(ctx)
	if err != nil {
		return err
	}
	var ops []nft.ElementOp
	for _, hostIf := range slices.Sorted(maps.Keys(have)) {
		w, ok := want[hostIf]
		if !ok {
			ops = append(ops, diff(hostIf, have[hostIf], nil)...)
			continue
		}
		elems, err := elementsOf(hostIf, w)
		if err != nil {
			return err
		}
		// Additions only, of what no element covers: the interface keeps
		// what it has besides, and the kernel takes no overlap.
		for _, op := range diff(hostIf, have[hostIf], elems) {
			if !op.Delete && !covered(op.Key[1], have[hostIf][op.Set]) {
				ops = append(ops, op)
			}
		}
	}
	for _, hostIf := range slices.Sorted(maps.Keys(want)) {
		if _, ok := have[hostIf]; ok {
			continue
		}
		elems, err := elementsOf(hostIf, want[hostIf])
		if err != nil {
			return err
		}
		ops = append(ops, diff(hostIf, nil, elems)...)
	}
	if err := g.apply(ctx, ops); err != nil {
		return err
	}
	if n := len(ops); n > 0 {
		g.log.Info("synced the source validation table", "changes", n)
	}
	return nil
}

// covered is true when one of elems holds all of elem's addresses.
func covered(elem string, elems []string) bool {
	lo, hi, err := nft.ParseRange(elem)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(elems, func(e string) bool {
		l, h, err := nft.ParseRange(e)
		return err == nil && l.Compare(lo) <= 0 && hi.Compare(h) <= 0
	})
}

// Check returns an error naming every element hostIf lacks or has beyond
// its addresses and prefixes; nil when they match.
func (g *Guard) Check(ctx context.Context, hostIf string, addrs []netip.Addr, prefixes []netip.Prefix) error {
	want, err := elementsOf(hostIf, Entries{Addrs: addrs, Prefixes: prefixes})
	if err != nil {
		return fmt.Errorf("source validation of %s: %w", hostIf, err)
	}
	g.mu.Lock()
	have, err := g.current(ctx)
	g.mu.Unlock()
	if err != nil {
		return fmt.Errorf("source validation of %s: %w", hostIf, err)
	}
	var errs []error
	for _, op := range diff(hostIf, have[hostIf], want) {
		what := "is missing"
		if op.Delete {
			what = "is unexpected"
		}
		errs = append(errs, fmt.Errorf("source validation element %s . %s of set %s %s", op.Key[0], op.Key[1], op.Set, what))
	}
	return errors.Join(errs...)
}

// Drops reads the counters of dropped packets, IPv4's and IPv6's.
func (g *Guard) Drops(ctx context.Context) (v4, v6 uint64, err error) {
	cs, err := g.t.Counters(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, c := range cs {
		switch c.Name {
		case Dropped4:
			v4 = c.Packets
		case Dropped6:
			v6 = c.Packets
		}
	}
	return v4, v6, nil
}
