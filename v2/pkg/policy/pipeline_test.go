package policy_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/vcoil/vcoil/v2/internal/policyoracle"
	pcache "github.com/vcoil/vcoil/v2/pkg/policy/cache"
	"github.com/vcoil/vcoil/v2/pkg/policy/configurator"
	"github.com/vcoil/vcoil/v2/pkg/policy/processor"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer/acl/tables"
)

// pipeline is the whole stack of one node, with renderer caches, each
// behind a renderer that only records: for clusters without
// ClusterNetworkPolicies one per direction of the pods their local tables
// are attached to, and the ordered cache (tables.Ordered) always.
type pipeline struct {
	cache   *pcache.Cache
	ingress *cacheRenderer // tables on the pods' Ingress, as for VPP ACLs
	egress  *cacheRenderer // tables on the pods' Egress, the mirror
	ordered *cacheRenderer // tables.Ordered, for tiers
}

// renderers are the pipeline's renderers.
func (p *pipeline) renderers() []*cacheRenderer {
	var out []*cacheRenderer
	for _, r := range []*cacheRenderer{p.ingress, p.egress, p.ordered} {
		if r != nil {
			out = append(out, r)
		}
	}
	return out
}

// ruleCache is what the tests read of a renderer cache (tables.Cache and
// tables.Ordered).
type ruleCache interface {
	Apply(renderer.Txn) (tables.Changes, error)
	Direction() renderer.Direction
	LocalTable(renderer.PodID) (renderer.Table, bool)
	LocalTables() []renderer.Table
	Assignments() []tables.Assignment
	GlobalTable() renderer.Table
	Pods() []renderer.PodRules
}

// cacheRenderer is a renderer that keeps a renderer cache and applies its
// Changes to a simulated network stack, checking that they are consistent
// and minimal and that the stack ends up as the cache says.
type cacheRenderer struct {
	cache ruleCache
	// sorted: the cache's tables are sorted by Rule.Compare (tables.Cache).
	sorted bool
	txns   int
	stack  stack
}

// stack is what a network stack would hold: tables by ID, the table of each
// pod, and the global table.
type stack struct {
	tables map[renderer.TableID][]renderer.Rule
	pods   map[renderer.PodID]renderer.TableID
	global []renderer.Rule
}

func (r *cacheRenderer) Render(_ context.Context, txn renderer.Txn) error {
	ch, err := r.cache.Apply(txn)
	if err != nil {
		return err
	}
	r.txns++
	if err := r.stack.apply(ch); err != nil {
		return fmt.Errorf("changes of transaction %d: %w", r.txns, err)
	}
	return r.stack.matches(r.cache)
}

func (s *stack) apply(ch tables.Changes) error {
	if s.tables == nil {
		s.tables = make(map[renderer.TableID][]renderer.Rule)
		s.pods = make(map[renderer.PodID]renderer.TableID)
	}
	for _, t := range ch.Added {
		if _, ok := s.tables[t.ID]; ok {
			return fmt.Errorf("table %s added twice", t.ID)
		}
		s.tables[t.ID] = t.Rules
	}
	for _, t := range ch.Changed {
		old, ok := s.tables[t.ID]
		if !ok {
			return fmt.Errorf("unknown table %s changed", t.ID)
		}
		if slices.Equal(old, t.Rules) {
			return fmt.Errorf("table %s changed to the same rules", t.ID)
		}
		s.tables[t.ID] = t.Rules
	}
	for _, a := range ch.Assignments {
		if s.pods[a.Pod] == a.Table {
			return fmt.Errorf("pod %s assigned its own table %q again", a.Pod, a.Table)
		}
		if a.Table == "" {
			delete(s.pods, a.Pod)
			continue
		}
		if _, ok := s.tables[a.Table]; !ok {
			return fmt.Errorf("pod %s assigned unknown table %s", a.Pod, a.Table)
		}
		s.pods[a.Pod] = a.Table
	}
	for _, id := range ch.Removed {
		if _, ok := s.tables[id]; !ok {
			return fmt.Errorf("unknown table %s removed", id)
		}
		for pod, t := range s.pods {
			if t == id {
				return fmt.Errorf("table %s removed while pod %s uses it", id, pod)
			}
		}
		delete(s.tables, id)
	}
	if ch.Global != nil {
		if slices.Equal(s.global, ch.Global.Rules) {
			return fmt.Errorf("global table changed to the same rules")
		}
		s.global = ch.Global.Rules
	}
	return nil
}

// matches checks the stack against the cache's own view.
func (s *stack) matches(rc ruleCache) error {
	if !slices.Equal(s.global, rc.GlobalTable().Rules) {
		return fmt.Errorf("the stack's global table differs from the cache's")
	}
	local := rc.LocalTables()
	if len(local) != len(s.tables) {
		return fmt.Errorf("the stack has %d tables, the cache %d", len(s.tables), len(local))
	}
	for _, t := range local {
		if !slices.Equal(s.tables[t.ID], t.Rules) {
			return fmt.Errorf("table %s differs between the stack and the cache", t.ID)
		}
	}
	n := 0
	for _, a := range rc.Assignments() {
		if a.Table != "" {
			n++
		}
		if s.pods[a.Pod] != a.Table {
			return fmt.Errorf("pod %s has table %q in the stack, %q in the cache", a.Pod, s.pods[a.Pod], a.Table)
		}
	}
	if n != len(s.pods) {
		return fmt.Errorf("the stack assigns tables to %d pods, the cache to %d", len(s.pods), n)
	}
	return nil
}

func newPipeline(c *policyoracle.Cluster) (*pipeline, error) {
	conf, err := configurator.New(configurator.Config{NATLoopback: c.NATLoopback, NodeAddresses: c.NodeAddresses})
	if err != nil {
		return nil, err
	}
	p := &pipeline{cache: pcache.New(), ordered: &cacheRenderer{cache: tables.NewOrdered()}}
	if len(c.ClusterPolicies) == 0 {
		// tables.Cache takes NetworkPolicy lists only.
		p.ingress = &cacheRenderer{cache: tables.New(renderer.Ingress), sorted: true}
		p.egress = &cacheRenderer{cache: tables.New(renderer.Egress), sorted: true}
		conf.Register("tables on ingress", p.ingress)
		conf.Register("tables on egress", p.egress)
	}
	conf.Register("ordered tables", p.ordered)
	p.cache.Watch(processor.New(c.Node, p.cache, conf, logr.Discard()))
	all := pcache.Contents{Pods: c.Pods, Namespaces: c.Namespaces, Policies: c.Policies, ClusterPolicies: c.ClusterPolicies}
	if err := p.cache.ReplaceAll(context.Background(), all); err != nil {
		return nil, err
	}
	return p, nil
}

// connections returns the connections worth checking in c: between every
// two addresses of the same family with a local pod at one end, ICMP and
// some sampled ports of TCP, UDP and SCTP.
func connections(c *policyoracle.Cluster, k *policyoracle.Kubernetes, pick func(int) int) []policyoracle.Connection {
	addrs := c.Addresses()
	var out []policyoracle.Connection
	for _, src := range addrs {
		for _, dst := range addrs {
			if src == dst || src.Is4() != dst.Is4() || (!k.IsLocalPod(src) && !k.IsLocalPod(dst)) {
				continue
			}
			out = append(out, policyoracle.Connection{Src: src, Dst: dst, Protocol: policyoracle.ICMP})
			for _, proto := range []policyoracle.Protocol{policyoracle.TCP, policyoracle.UDP, policyoracle.SCTP} {
				for range 4 {
					port := policyoracle.SamplePorts[pick(len(policyoracle.SamplePorts))]
					out = append(out, policyoracle.Connection{Src: src, Dst: dst, Protocol: proto, SrcPort: uint16(32768 + pick(28000)), DstPort: port})
				}
			}
		}
	}
	return out
}

// oracleTables reads a renderer cache's state into the oracle's model of a
// network stack applying it. It lives with the tests, not the oracle, so
// that the oracle depends on no renderer and checks them independently.
func oracleTables(c ruleCache) *policyoracle.Tables {
	t := &policyoracle.Tables{Direction: c.Direction(), Local: make(map[netip.Addr][]renderer.Rule), Global: c.GlobalTable().Rules}
	for _, p := range c.Pods() {
		tbl, _ := c.LocalTable(p.Pod)
		for _, a := range p.IPs {
			t.Local[a] = tbl.Rules
		}
	}
	return t
}

// disagreement compares the Kubernetes evaluator with the renderer caches'
// output on every connection and describes the first disagreement.
func (p *pipeline) disagreement(c *policyoracle.Cluster, pick func(int) int) string {
	k := policyoracle.NewKubernetes(c)
	rs := p.renderers()
	var ts []*policyoracle.Tables
	for _, r := range rs {
		ts = append(ts, oracleTables(r.cache))
	}
	for _, conn := range connections(c, k, pick) {
		want, responsible := k.NodeVerdict(conn)
		for i, t := range ts {
			got, decided := t.Allowed(conn)
			if got == want && decided == responsible {
				continue
			}
			return fmt.Sprintf("tables on %s (%T), connection %s:%d -> %s %s/%d: Kubernetes says allowed=%v (node responsible=%v), tables say allowed=%v (seen=%v)\n%s",
				t.Direction, rs[i].cache, conn.Src, conn.SrcPort, conn.Dst, conn.Protocol, conn.DstPort, want, responsible, got, decided,
				describe(rs[i].cache, conn))
		}
	}
	return ""
}

// describe prints the tables of rc that decide conn, for failure messages.
func describe(rc ruleCache, conn policyoracle.Connection) string {
	var b strings.Builder
	for _, pr := range rc.Pods() {
		if slices.Contains(pr.IPs, conn.Src) || slices.Contains(pr.IPs, conn.Dst) {
			t, _ := rc.LocalTable(pr.Pod)
			fmt.Fprintf(&b, "local table %q of %s %v:\n%s", t.ID, pr.Pod, pr.IPs, rulesString(t.Rules))
		}
	}
	fmt.Fprintf(&b, "global table:\n%s", rulesString(rc.GlobalTable().Rules))
	return b.String()
}

func rulesString(rules []renderer.Rule) string {
	var b strings.Builder
	for _, r := range rules {
		fmt.Fprintf(&b, "  %v\n", r)
	}
	return b.String()
}

// tableString is a table's rules, each with its origin when the cache
// tracks them.
func tableString(t renderer.Table) string {
	var b strings.Builder
	for i, r := range t.Rules {
		fmt.Fprintf(&b, "  %v", r)
		if t.Origins != nil {
			if o := t.Origins[i]; o != nil {
				fmt.Fprintf(&b, " [%s %s %v]", o.Tier, o.Direction, o.Policies)
			} else {
				b.WriteString(" [-]")
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// stateOf summarizes a renderer cache independently of table IDs: each
// pod's local table and the global table, with the rules' origins.
func stateOf(rc ruleCache) map[string]string {
	out := map[string]string{"global": tableString(rc.GlobalTable())}
	for _, pr := range rc.Pods() {
		t, _ := rc.LocalTable(pr.Pod)
		out[pr.Pod.String()+fmt.Sprint(pr.IPs)] = tableString(t)
	}
	return out
}

func sameState(a, b ruleCache) string {
	sa, sb := stateOf(a), stateOf(b)
	for k, ra := range sa {
		rb, ok := sb[k]
		if !ok {
			return fmt.Sprintf("%s is known incrementally but not after a resync", k)
		}
		if ra != rb {
			return fmt.Sprintf("table of %s differs:\nincremental:\n%sresync:\n%s", k, ra, rb)
		}
	}
	for k := range sb {
		if _, ok := sa[k]; !ok {
			return fmt.Sprintf("%s is known after a resync but not incrementally", k)
		}
	}
	return ""
}

// checkTables checks the invariants of a renderer cache's tables: sorted by
// Compare (tables.Cache's), valid rules, ending with a rule matching all,
// and shared tables really equal.
func checkTables(t *testing.T, cr *cacheRenderer) {
	t.Helper()
	rc := cr.cache
	all := rc.LocalTables()
	if g := rc.GlobalTable(); len(g.Rules) > 0 {
		all = append(all, g)
	}
	for _, tbl := range all {
		for i, r := range tbl.Rules {
			if err := r.Validate(); err != nil {
				t.Fatalf("table %s: %v", tbl.ID, err)
			}
			if cr.sorted && i > 0 && tbl.Rules[i-1].Compare(r) >= 0 {
				t.Fatalf("table %s: rule %d (%v) is not after rule %d (%v)", tbl.ID, i, r, i-1, tbl.Rules[i-1])
			}
		}
		if len(tbl.Rules) == 0 || !tbl.Rules[len(tbl.Rules)-1].MatchesAll() {
			t.Fatalf("table %s does not end with a rule matching all traffic:\n%s", tbl.ID, rulesString(tbl.Rules))
		}
	}
	used := make(map[renderer.TableID]bool)
	for _, a := range rc.Assignments() {
		if a.Table != "" {
			used[a.Table] = true
		}
	}
	for _, tbl := range rc.LocalTables() {
		if !used[tbl.ID] {
			t.Fatalf("table %s is kept but no pod uses it", tbl.ID)
		}
	}
	seen := make(map[string]renderer.TableID)
	for _, tbl := range rc.LocalTables() {
		if tbl.Origins != nil && len(tbl.Origins) != len(tbl.Rules) {
			t.Fatalf("table %s has %d rules and %d origins", tbl.ID, len(tbl.Rules), len(tbl.Origins))
		}
		key := tableString(tbl)
		if other, dup := seen[key]; dup {
			t.Fatalf("tables %s and %s are equal but not shared", other, tbl.ID)
		}
		seen[key] = tbl.ID
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }
