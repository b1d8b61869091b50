package tables

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// Ordered is the renderer cache for pods with ClusterNetworkPolicy tiers
// (docs/policy.md, "VPP ACLs: tiers compiled into first-match tables"). It
// gives the same output as Cache (local tables on the pods' Ingress, a
// global table, minimal Changes) from rule lists that are first-match
// lists with deny rules anywhere: each pod's tiers of a direction compiled
// by renderer.Tiers.Compile.
//
// CombineRules becomes a product of two ordered lists. For a local pod p
// and the address x of another local pod whose traffic out is restricted,
// the rules for source x in p's table are x's egress list, restricted to
// what goes to p, in order, where each permit rule is replaced by p's
// ingress rules for x intersected with it, in order; they end with a rule
// on all of x's traffic, so they decide x's traffic into p before p's own
// rules are reached. The global table is, per restricted local pod, its
// egress list with its address as source.
//
// It recomputes every local table when the egress of a local pod changes
// (any pod's table may hold its insertions), and only the changed pods'
// tables otherwise: it is simpler and slower than Cache, which the ACL
// renderer uses while no pod has tiers.
//
// Only the Ingress attachment is implemented (the VPP ACL renderer's).
type Ordered struct {
	pods       map[renderer.PodID]*opod
	byIP       map[netip.Addr]*opod
	tables     map[renderer.TableID]*otable
	byKey      map[string]*otable
	nextID     uint64
	global     []renderer.Rule
	globalFrom []*renderer.Origin
	origins    originIntern
}

type opod struct {
	in renderer.PodRules
	// own and out are the pod's compiled ingress and egress lists; nil
	// when they restrict nothing. ownFrom and outFrom are their rules'
	// origins.
	own, out         []renderer.Rule
	ownFrom, outFrom []*renderer.Origin
	table            *otable
}

type otable struct {
	id      renderer.TableID
	key     string
	rules   []renderer.Rule
	origins []*renderer.Origin
	pods    map[renderer.PodID]struct{}
}

// originIntern makes equal origins one pointer, numbered for table keys:
// two tables of equal rules but other origins are two tables, so that what
// each denies is counted for its own policies.
type originIntern struct {
	byKey map[string]*renderer.Origin
	ids   map[*renderer.Origin]uint32
	next  uint32
}

func originKey(o *renderer.Origin) string {
	return o.Tier + "\x00" + o.Direction.String() + "\x00" + strings.Join(o.Policies, "\x00")
}

func (in *originIntern) intern(o *renderer.Origin) *renderer.Origin {
	if o == nil {
		return nil
	}
	if _, ok := in.ids[o]; ok {
		return o
	}
	k := originKey(o)
	if x := in.byKey[k]; x != nil {
		return x
	}
	if in.byKey == nil {
		in.byKey, in.ids = map[string]*renderer.Origin{}, map[*renderer.Origin]uint32{}
	}
	in.next++
	in.byKey[k], in.ids[o] = o, in.next
	return o
}

// keep forgets the origins but those of pods, keeping their numbers:
// the tables, made of the pods' lists, keep their keys.
func (in *originIntern) keep(pods map[renderer.PodID]*opod) {
	used := map[*renderer.Origin]bool{}
	for _, p := range pods {
		for _, l := range [2][]*renderer.Origin{p.ownFrom, p.outFrom} {
			for _, o := range l {
				used[o] = true
			}
		}
	}
	for o := range in.ids {
		if !used[o] {
			delete(in.ids, o)
			delete(in.byKey, originKey(o))
		}
	}
}

// npOrigin is the origin of a pod's NetworkPolicy list of direction d.
func (in *originIntern) npOrigin(pr *renderer.PodRules, d renderer.Direction) *renderer.Origin {
	return in.intern(&renderer.Origin{Tier: "networkpolicy", Direction: d, Policies: pr.NetworkPolicies[d]})
}

// key appends the origins' numbers to b.
func (in *originIntern) key(b []byte, from []*renderer.Origin) []byte {
	for _, o := range from {
		id := in.ids[o] // 0 for none
		b = append(b, byte(id>>24), byte(id>>16), byte(id>>8), byte(id))
	}
	return b
}

// NewOrdered returns an empty ordered cache.
func NewOrdered() *Ordered {
	return &Ordered{
		pods: map[renderer.PodID]*opod{}, byIP: map[netip.Addr]*opod{},
		tables: map[renderer.TableID]*otable{}, byKey: map[string]*otable{},
	}
}

// Direction is always renderer.Ingress.
func (c *Ordered) Direction() renderer.Direction { return renderer.Ingress }

// compiled is the first-match list of direction d of a pod, with its
// rules' origins: its tiers compiled, nil when that decides nothing but
// "permit".
func (c *Ordered) compiled(pr *renderer.PodRules, d renderer.Direction) ([]renderer.Rule, []*renderer.Origin) {
	t := pr.Tiers(d)
	var l []renderer.Rule
	var from []*renderer.Origin
	if len(t.Admin)+len(t.Baseline) == 0 {
		l = t.NetworkPolicy
		if !permitsAll(l) {
			np := c.origins.npOrigin(pr, d)
			from = make([]*renderer.Origin, len(l))
			for i := range from {
				from[i] = np
			}
		}
	} else {
		var np *renderer.Origin
		if len(t.NetworkPolicy) > 0 {
			np = c.origins.npOrigin(pr, d)
		}
		l, from = t.CompileWithOrigins(d, np)
		for i, o := range from {
			from[i] = c.origins.intern(o)
		}
	}
	if permitsAll(l) {
		return nil, nil
	}
	return l, from
}

// permitsAll reports whether first-match list l permits every packet: no
// deny rule before its first rule matching everything, which permits (or
// no such rule and no deny at all).
func permitsAll(l []renderer.Rule) bool {
	for i := range l {
		if l[i].Action != renderer.ActionPermit {
			return false
		}
		if l[i].MatchesAll() {
			return true
		}
	}
	return true
}

// permitsAllFrom is permitsAll for rules that all have one source: a rule
// of every protocol, port and destination matches all of it.
func permitsAllFrom(l []renderer.Rule) bool {
	for i := range l {
		r := &l[i]
		if r.Action != renderer.ActionPermit {
			return false
		}
		if r.Protocol == renderer.ProtocolAny && r.SrcPort.IsAny() && r.DstPort.IsAny() && !r.DstNetwork.IsValid() {
			return true
		}
	}
	return true
}

// Apply records a transaction and returns what changed. A transaction that
// is not valid is rejected as a whole and changes nothing.
func (c *Ordered) Apply(txn renderer.Txn) (Changes, error) {
	var vm renderer.ValidationMemo
	for i := range txn.Pods {
		pr := &txn.Pods[i]
		if pr.Removed {
			continue
		}
		if err := pr.ValidateShared(&vm); err != nil {
			return Changes{}, fmt.Errorf("pod %s: %w", pr.Pod, err)
		}
	}
	var ch Changes
	egressChanged := false
	changed := map[renderer.PodID]bool{}
	// gone are the pods that left, with the table they had.
	gone := map[renderer.PodID]*otable{}
	unindex := func(p *opod) {
		for _, a := range p.in.IPs {
			if c.byIP[a] == p {
				delete(c.byIP, a)
			}
		}
	}
	remove := func(id renderer.PodID) {
		p := c.pods[id]
		if p == nil {
			return
		}
		egressChanged = egressChanged || p.out != nil
		unindex(p)
		delete(c.pods, id)
		gone[id] = p.table
	}
	if txn.Resync {
		listed := map[renderer.PodID]bool{}
		for i := range txn.Pods {
			listed[txn.Pods[i].Pod] = true
		}
		for id := range c.pods {
			if !listed[id] {
				remove(id)
			}
		}
	}
	for i := range txn.Pods {
		pr := txn.Pods[i]
		if pr.Removed || len(pr.IPs) == 0 {
			remove(pr.Pod)
			continue
		}
		p := &opod{in: pr}
		p.own, p.ownFrom = c.compiled(&pr, renderer.Ingress)
		p.out, p.outFrom = c.compiled(&pr, renderer.Egress)
		old := c.pods[pr.Pod]
		switch {
		case old == nil:
			egressChanged = egressChanged || p.out != nil
			if t, ok := gone[pr.Pod]; ok {
				// Removed and listed again in one transaction.
				p.table = t
				delete(gone, pr.Pod)
			}
		case slices.Equal(old.in.IPs, pr.IPs) && slices.Equal(old.own, p.own) && slices.Equal(old.out, p.out) &&
			slices.Equal(old.ownFrom, p.ownFrom) && slices.Equal(old.outFrom, p.outFrom):
			old.in = pr
			continue
		default:
			if !slices.Equal(old.in.IPs, pr.IPs) || !slices.Equal(old.out, p.out) || !slices.Equal(old.outFrom, p.outFrom) {
				egressChanged = egressChanged || old.out != nil || p.out != nil
			}
			p.table = old.table
			unindex(old)
		}
		c.pods[pr.Pod] = p
		for _, a := range pr.IPs {
			c.byIP[a] = p
		}
		changed[pr.Pod] = true
	}
	// The pods whose table may have changed.
	var retable []*opod
	for id, p := range c.pods {
		if egressChanged || changed[id] {
			retable = append(retable, p)
		}
	}
	slices.SortFunc(retable, func(a, b *opod) int { return a.in.Pod.Compare(b.in.Pod) })
	c.assign(retable, gone, &ch)
	if txn.Resync {
		c.origins.keep(c.pods)
	}
	if egressChanged || txn.Resync {
		g, from := c.buildGlobal()
		if !slices.Equal(g, c.global) {
			c.global = g
			ch.Global = &renderer.Table{ID: renderer.GlobalTableID, Rules: g, Origins: from}
		}
		// New origins of the same rules are no change to VPP's ACL: the
		// counts are read through GlobalTable.
		c.globalFrom = from
	}
	return ch, nil
}

// restricting lists, in address order, the local pod addresses whose
// egress is restricted.
func (c *Ordered) restricting() []netip.Addr {
	var out []netip.Addr
	for a, p := range c.byIP {
		if p.out != nil {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// sourceGroup is the restricted local addresses of one family whose pods
// have equal egress lists: their insertions in a table differ only in the
// source, so they are made once, for the fewest prefixes that hold
// exactly those addresses.
type sourceGroup struct {
	out     []renderer.Rule
	outFrom []*renderer.Origin
	addrs   []netip.Addr // sorted
	// prefixes cover exactly addrs.
	prefixes []netip.Prefix
}

// sourceGroups groups the restricted addresses, in a fixed order.
func (c *Ordered) sourceGroups() []*sourceGroup {
	byKey := map[string]*sourceGroup{}
	var out []*sourceGroup
	for _, a := range c.restricting() {
		p := c.byIP[a]
		k := string(c.origins.key([]byte(ruleKey(p.out)), p.outFrom))
		if a.Is4() {
			k = "4" + k
		} else {
			k = "6" + k
		}
		g := byKey[k]
		if g == nil {
			g = &sourceGroup{out: p.out, outFrom: p.outFrom}
			byKey[k] = g
			out = append(out, g)
		}
		g.addrs = append(g.addrs, a)
	}
	for _, g := range out {
		g.prefixes = hostsToPrefixes(g.addrs, netip.Addr{})
	}
	return out
}

// hostsToPrefixes is the fewest prefixes that hold exactly addrs but
// except (when valid).
func hostsToPrefixes(addrs []netip.Addr, except netip.Addr) []netip.Prefix {
	ps := make([]netip.Prefix, 0, len(addrs))
	for _, a := range addrs {
		if a != except {
			ps = append(ps, renderer.HostNetwork(a))
		}
	}
	return renderer.AggregatePrefixes(ps)
}

// localTable is p's table: the insertions of every restricted local
// source group, then p's own rules; nil when nothing restricts p's
// traffic. from are the rules' origins.
func (c *Ordered) localTable(p *opod, groups []*sourceGroup) (rules []renderer.Rule, from []*renderer.Origin) {
	for _, g := range groups {
		y, ok := addrOfFamily(p.in.IPs, g.addrs[0].Is4())
		if !ok {
			continue
		}
		prefixes := g.prefixes
		if _, own := slices.BinarySearchFunc(g.addrs, y, netip.Addr.Compare); own {
			// A pod's traffic to itself is not its egress's to decide.
			prefixes = hostsToPrefixes(g.addrs, y)
		}
		for _, src := range prefixes {
			r, f := product(g.out, g.outFrom, p.own, p.ownFrom, src, y)
			rules, from = append(rules, r...), append(from, f...)
		}
	}
	if len(rules) == 0 {
		return slices.Clip(p.own), slices.Clip(p.ownFrom)
	}
	if p.own == nil {
		return append(rules, renderer.PermitAll), append(from, nil)
	}
	return append(rules, p.own...), append(from, p.ownFrom...)
}

// product is the rules deciding traffic from the sources of src to y (a
// pod's address, the owner of table own) when their egress list is out:
// out restricted to traffic to y, each permit replaced by own's rules
// intersected with it. It returns nil when out permits all of that
// traffic, so that own decides alone. A rule's origin is that of the rule
// whose action it has (outFrom's, ownFrom's).
func product(out []renderer.Rule, outFrom []*renderer.Origin, own []renderer.Rule, ownFrom []*renderer.Origin, src netip.Prefix, y netip.Addr) ([]renderer.Rule, []*renderer.Origin) {
	var e []renderer.Rule
	var eFrom []*renderer.Origin
	for i, r := range out {
		if r.DstNetwork.IsValid() && !r.DstNetwork.Contains(y) {
			continue
		}
		r.DstNetwork, r.SrcNetwork = netip.Prefix{}, src
		e, eFrom = append(e, r), append(eFrom, outFrom[i])
	}
	if permitsAllFrom(e) {
		return nil, nil
	}
	all := renderer.PermitAll
	all.SrcNetwork = src
	var in []renderer.Rule
	var inFrom []*renderer.Origin
	for i, r := range own {
		if m, ok := renderer.Intersect(all, r); ok {
			in, inFrom = append(in, m), append(inFrom, ownFrom[i])
		}
	}
	if own == nil {
		in, inFrom = []renderer.Rule{all}, []*renderer.Origin{nil}
	}
	var rules []renderer.Rule
	var from []*renderer.Origin
	for ei, r := range e {
		if r.Action != renderer.ActionPermit {
			rules, from = append(rules, r), append(from, eFrom[ei])
		} else {
			for ii, i := range in {
				if m, ok := renderer.Intersect(r, i); ok {
					rules, from = append(rules, m), append(from, inFrom[ii])
				}
			}
		}
		if r.SrcPort.IsAny() && r.DstPort.IsAny() && r.Protocol == renderer.ProtocolAny {
			break // it matched all of the sources' traffic to y: the rest is unreachable
		}
	}
	return rules, from
}

// buildGlobal is the global table: for every restricted local address, its
// pod's egress list with the address as source, then PermitAll.
func (c *Ordered) buildGlobal() ([]renderer.Rule, []*renderer.Origin) {
	var rules []renderer.Rule
	var from []*renderer.Origin
	for _, x := range c.restricting() {
		src := renderer.HostNetwork(x)
		p := c.byIP[x]
		for i, r := range p.out {
			if r.DstNetwork.IsValid() && r.DstNetwork.Addr().Is4() != x.Is4() {
				continue
			}
			r.SrcNetwork = src
			rules, from = append(rules, r), append(from, p.outFrom[i])
		}
	}
	if rules == nil {
		return nil, nil
	}
	return append(rules, renderer.PermitAll), append(from, nil)
}

// assign computes the tables of the pods in retable and records the
// changes: equal tables are shared, a pod is assigned a table only when
// its table changes, and a table no pod uses any more is removed.
func (c *Ordered) assign(retable []*opod, gone map[renderer.PodID]*otable, ch *Changes) {
	groups := c.sourceGroups()
	for id, t := range gone {
		if t != nil {
			delete(t.pods, id)
			ch.Assignments = append(ch.Assignments, Assignment{Pod: id})
		}
	}
	for _, p := range retable {
		rules, from := c.localTable(p, groups)
		var t *otable
		if rules != nil {
			key := string(c.origins.key([]byte(ruleKey(rules)), from))
			if t = c.byKey[key]; t == nil {
				c.nextID++
				t = &otable{id: renderer.TableID("ordered-" + strconv.FormatUint(c.nextID, 10)), key: key, rules: rules, origins: from, pods: map[renderer.PodID]struct{}{}}
				c.tables[t.id], c.byKey[key] = t, t
				ch.Added = append(ch.Added, renderer.Table{ID: t.id, Rules: t.rules, Origins: t.origins})
			}
		}
		if p.table == t {
			continue
		}
		if p.table != nil {
			delete(p.table.pods, p.in.Pod)
		}
		if t != nil {
			t.pods[p.in.Pod] = struct{}{}
		}
		p.table = t
		ch.Assignments = append(ch.Assignments, Assignment{Pod: p.in.Pod, Table: tableID(t)})
	}
	for id, t := range c.tables {
		if len(t.pods) == 0 {
			delete(c.tables, id)
			delete(c.byKey, t.key)
			ch.Removed = append(ch.Removed, id)
		}
	}
	slices.SortFunc(ch.Assignments, func(a, b Assignment) int { return a.Pod.Compare(b.Pod) })
	slices.SortFunc(ch.Removed, compareTableIDs)
}

func tableID(t *otable) renderer.TableID {
	if t == nil {
		return ""
	}
	return t.id
}

// ruleKey identifies a table's rules exactly.
func ruleKey(rules []renderer.Rule) string {
	b := make([]byte, 0, len(rules)*48)
	for i := range rules {
		r := &rules[i]
		for _, n := range [2]netip.Prefix{r.SrcNetwork, r.DstNetwork} {
			a := n.Addr().As16()
			b = append(b, a[:]...)
			b = append(b, byte(n.Bits()+1))
		}
		b = append(b, byte(r.Action), byte(r.Protocol),
			byte(r.SrcPort.First>>8), byte(r.SrcPort.First), byte(r.SrcPort.Last>>8), byte(r.SrcPort.Last),
			byte(r.DstPort.First>>8), byte(r.DstPort.First), byte(r.DstPort.Last>>8), byte(r.DstPort.Last))
	}
	return string(b)
}

// LocalTable returns the local table of pod, if it has one.
func (c *Ordered) LocalTable(pod renderer.PodID) (renderer.Table, bool) {
	p := c.pods[pod]
	if p == nil || p.table == nil {
		return renderer.Table{}, false
	}
	return renderer.Table{ID: p.table.id, Rules: p.table.rules, Origins: p.table.origins}, true
}

// LocalTables returns every local table, ordered by ID.
func (c *Ordered) LocalTables() []renderer.Table {
	out := make([]renderer.Table, 0, len(c.tables))
	for _, t := range c.tables {
		out = append(out, renderer.Table{ID: t.id, Rules: t.rules, Origins: t.origins})
	}
	slices.SortFunc(out, func(a, b renderer.Table) int { return compareTableIDs(a.ID, b.ID) })
	return out
}

// Assignments returns the local table of every known pod, ordered by pod.
func (c *Ordered) Assignments() []Assignment {
	out := make([]Assignment, 0, len(c.pods))
	for id, p := range c.pods {
		out = append(out, Assignment{Pod: id, Table: tableID(p.table)})
	}
	slices.SortFunc(out, func(a, b Assignment) int { return a.Pod.Compare(b.Pod) })
	return out
}

// GlobalTable returns the global table; no rules means there is none.
func (c *Ordered) GlobalTable() renderer.Table {
	return renderer.Table{ID: renderer.GlobalTableID, Rules: c.global, Origins: c.globalFrom}
}

// Pods returns the known pods' rules, ordered by pod.
func (c *Ordered) Pods() []renderer.PodRules {
	out := make([]renderer.PodRules, 0, len(c.pods))
	for _, p := range c.pods {
		out = append(out, p.in)
	}
	slices.SortFunc(out, func(a, b renderer.PodRules) int { return a.Pod.Compare(b.Pod) })
	return out
}
