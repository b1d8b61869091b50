package nftables

import (
	"context"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/pkg/nft"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// everything is a state using every rule form, in both families.
func everything() []*service.Service {
	return []*service.Service{
		withNodePorts(dual("plain", 1, podA, remote), 30080, 30053),
		withAffinity(dual("sticky", 2, podA, podB, remote), 3*time.Second),
		withAffinity(dual("sticky-long", 3, podA), 10800*time.Second),
		externalLocal(withLoadBalancer(withNodePorts(dual("local", 4, podA, remote), 30081, 30054), v4.allowed, v6.allowed)),
		externalLocal(withExternalIPs(dual("remote-only", 5, remote))),
		dual("empty", 6),
	}
}

func TestTheWholeTableLoadsIntoTheKernel(t *testing.T) {
	l := newLab(t)
	r := l.renderer()
	l.resync(r, everything()...)
	got := l.ruleset()
	for _, want := range []string{
		"numgen random mod 3 vmap { 0 : goto endpoint4-0, 1 : goto endpoint4-1, 2 : goto endpoint4-2 }",
		"dnat ip to ip daddr . meta l4proto . th dport map @backends4-2",
		"numgen random mod 1 vmap { 0 : goto endpoint-local6-0 }",
		"dnat ip6 to ip6 daddr . meta l4proto . th dport map @backends-local6-0",
		"map affinity4-3 {", "map affinity4-10800 {", "chain sticky6-3 {",
		"jhash ip6 saddr mod 3 seed 0x76636f69 vmap { 0 : goto endpoint6-0, 1 : goto endpoint6-1, 2 : goto endpoint6-2 }",
		"snat ip to 10.255.255.1", "snat ip6 to fd00:255::1",
		"10.98.0.1 . tcp . 80 . 203.0.113.0/24",
		"10.96.0.6 . tcp . 80", // no endpoints
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the table lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "default/") || strings.Count(got, "chain ") > 40 {
		t.Errorf("the table has chains per service:\n%s", got)
	}
}

// canonical is a table as nft lists it, without handles and with its
// lines sorted: two tables holding the same objects compare equal whatever
// the order they were written in.
func canonical(table string) string {
	handle := regexp.MustCompile(` # handle [0-9]+`)
	lines := strings.Split(handle.ReplaceAllString(table, ""), "\n")
	for i := range lines {
		l := strings.TrimPrefix(strings.TrimSpace(lines[i]), "elements = { ")
		lines[i] = strings.TrimSuffix(strings.Trim(l, ","), " }")
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// Updates add chains, rules and maps in transactions after the first:
// nft must accept every rule form there too, and the result must be the
// table a Resync writes.
func TestUpdatesFromAnEmptyTableBuildWhatAResyncBuilds(t *testing.T) {
	l := newLab(t)
	r := l.renderer()
	l.resync(r, everything()...)
	want := canonical(l.ruleset())
	if err := r.Remove(t.Context()); err != nil {
		t.Fatal(err)
	}
	l.resync(r)
	for _, s := range everything() {
		if err := r.Update(t.Context(), &service.Changes{Upsert: []*service.Service{s}}); err != nil {
			t.Fatalf("Update adding %s: %v", s.ID, err)
		}
	}
	if got := canonical(l.ruleset()); got != want {
		t.Errorf("the table built by Updates differs from a Resync's:\nwant:\n%s\ngot:\n%s", want, got)
	}
	for _, s := range everything() {
		if err := r.Update(t.Context(), &service.Changes{Delete: []service.ID{s.ID}}); err != nil {
			t.Fatalf("Update deleting %s: %v", s.ID, err)
		}
	}
	empty := l.ruleset()
	if strings.Contains(empty, "elements") || strings.Contains(empty, "pick") || strings.Contains(empty, "affinity4-") {
		t.Errorf("the table after deleting every service still has elements or per-count objects:\n%s", empty)
	}
}

// SCTP has no kernel module on the machines vcoil is tested on, so its
// rules and elements are checked by nft (and the kernel, in check mode)
// without traffic.
func TestSCTPServicesPassNftCheck(t *testing.T) {
	netnstest.RequireRoot(t)
	node := netnstest.New(t, "node")
	ri, err := New(Config{Netns: node.Path(), PodIfPrefix: podPrefix}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer ri.Close()
	r := ri.(*renderer)
	s := withAffinity(externalLocal(withLoadBalancer(dual("sctp", 1, podA, remote), v4.allowed)), time.Minute)
	s.Ports = []service.Port{port(service.SCTP, 9999, 30999, podA, remote)}
	e := dual("sctp-empty", 2)
	e.Ports = []service.Port{port(service.SCTP, 9999, 0)}
	node4 := service.Node{NodePortAddresses: []netip.Addr{netip.MustParseAddr(v4.node)}}
	want, _ := r.render(&node4, map[service.ID]*service.Service{s.ID: s, e.ID: e})
	objs := r.layout.objects(&node4, want.uses)
	p := &plan{}
	p.objectsDiff(tableObjects{}, objs)
	for k, f := range want.frontends {
		p.frontendDiff(k, nil, f)
	}
	tx, err := p.script(r.table.NewTransaction, knftables.InetFamily, r.table.Name())
	if err != nil {
		t.Fatal(err)
	}
	backends := regexp.MustCompile(`(?m)^add element inet vcoil-services backends4-1 \{ .*10\.96\.0\.1 \. sctp \. 9999 : `)
	if !backends.MatchString(tx) || !strings.Contains(tx, "sctp . 30999") {
		t.Fatalf("the transaction has no SCTP elements:\n%s", tx)
	}
	if err := r.table.CheckScript(t.Context(), tx); err != nil {
		t.Fatalf("nft --check of SCTP services: %v\n%s", err, tx)
	}
}

func TestMetricsCountTheTableAndTheSyncs(t *testing.T) {
	l := newLab(t)
	reg := prometheus.NewRegistry()
	r, err := New(Config{Netns: l.node.Path(), PodIfPrefix: podPrefix, Registry: reg}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	l.resync(r, dual("a", 1, podA, remote))
	if err := r.Update(t.Context(), &service.Changes{Upsert: []*service.Service{dual("b", 2, podA)}}); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			for _, lp := range m.GetLabel() {
				name += "/" + lp.GetValue()
			}
			switch {
			case m.GetGauge() != nil:
				got[name] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				got[name] = float64(m.GetHistogram().GetSampleCount())
			case m.GetCounter() != nil:
				got[name] = m.GetCounter().GetValue()
			}
		}
	}
	// a: 2 cluster IPs x 2 ports, each a services element and 2 backends;
	// b: 4 frontends with 1 backend; pod-a's addresses in the hairpin sets.
	if got["vcoil_service_nftables_objects/elements"] != 4*3+4*2+2 ||
		got["vcoil_service_sync_duration_seconds/resync"] != 1 || got["vcoil_service_sync_duration_seconds/update"] != 1 ||
		got["vcoil_service_last_sync_timestamp_seconds"] < float64(time.Now().Add(-time.Minute).Unix()) ||
		got["vcoil_service_nftables_objects/chains"] == 0 || got["vcoil_service_nftables_objects/rules"] == 0 {
		t.Fatalf("metrics: %v", got)
	}
}

func TestTheForwardFilterDropsInvalidPacketsUnlessDisabled(t *testing.T) {
	l := newLab(t)
	forward := func() string {
		return l.node.Exec("nft", "list", "chain", "inet", "vcoil-services", "filter-forward")
	}
	l.resync(l.renderer(), everything()...)
	if got := forward(); !strings.Contains(got, "ct state invalid drop") {
		t.Fatalf("by default, filter-forward lacks the invalid drop:\n%s", got)
	}
	keep, err := New(Config{Netns: l.node.Path(), PodIfPrefix: podPrefix, DropInvalid: new(false)}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer keep.Close()
	l.resync(keep, everything()...)
	if got := forward(); strings.Contains(got, "invalid") || !strings.Contains(got, "ct state new jump no-endpoints") {
		t.Fatalf("with DropInvalid false, filter-forward:\n%s", got)
	}
}

// countingTable counts how the renderer writes: nft scripts or netlink
// element batches.
type countingTable struct {
	table
	scripts, batches int
}

func (c *countingTable) RunScript(ctx context.Context, script string) error {
	c.scripts++
	return c.table.RunScript(ctx, script)
}

func (c *countingTable) ApplyElements(ctx context.Context, ops []nft.ElementOp) error {
	c.batches++
	return c.table.ApplyElements(ctx, ops)
}

// An Update that changes endpoints only (the common change) writes its
// elements over netlink, without nft, and the table is the one a Resync of
// the new state writes: with endpoints replaced, with session affinity
// entries purged, with a service gone. A periodic Resync of the state the
// renderer holds writes nothing at all.
func TestElementChangesGoOverNetlinkAndMatchAResync(t *testing.T) {
	l := newLab(t)
	r := l.renderer().(*renderer)
	services := everything()
	l.resync(r, services...)
	count := &countingTable{table: r.table}
	r.table = count

	// An endpoint replaced: elements only.
	plain := withNodePorts(dual("plain", 1, podB, remote), 30080, 30053)
	if err := r.Update(t.Context(), &service.Changes{Upsert: []*service.Service{plain}}); err != nil {
		t.Fatal(err)
	}
	if count.scripts != 0 || count.batches != 1 {
		t.Errorf("replacing an endpoint ran %d nft scripts and %d netlink batches, want 0 and 1", count.scripts, count.batches)
	}
	// Endpoints lost by a service with affinity (its entries purged),
	// and a service gone, by whichever way they need.
	sticky := withAffinity(dual("sticky", 2, podA, remote), 3*time.Second)
	for _, ch := range []*service.Changes{
		{Upsert: []*service.Service{sticky}},
		{Delete: []service.ID{{Namespace: "default", Name: "remote-only"}}},
	} {
		if err := r.Update(t.Context(), ch); err != nil {
			t.Fatalf("Update %+v: %v", ch, err)
		}
	}
	got := canonical(l.ruleset())
	state := map[service.ID]*service.Service{}
	for _, s := range services {
		state[s.ID] = s
	}
	state[plain.ID], state[sticky.ID] = plain, sticky
	delete(state, service.ID{Namespace: "default", Name: "remote-only"})
	fresh := l.renderer()
	if err := fresh.Remove(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := fresh.Resync(t.Context(), &service.State{Node: l.nodeModel(), Services: state}); err != nil {
		t.Fatal(err)
	}
	if want := canonical(l.ruleset()); got != want {
		t.Errorf("the table the netlink Updates wrote differs from a Resync's:\nwant:\n%s\ngot:\n%s", want, got)
	}

	// The periodic Resync skips rendering only the very state it holds.
	held := &service.State{Node: r.node, Services: maps.Clone(r.services)}
	if !r.holds(held) {
		t.Error("the renderer does not recognise the state it holds")
	}
	copied := *held.Services[plain.ID]
	held.Services[plain.ID] = &copied
	if r.holds(held) {
		t.Error("a new model of a service was taken for the one held")
	}
	held.Services[plain.ID] = plain
	held.Node.Zone = "other"
	if r.holds(held) {
		t.Error("another node was taken for the one held")
	}
	held.Node = r.node
	held.Services[service.ID{Namespace: "default", Name: "new"}] = plain
	if r.holds(held) {
		t.Error("a state with one more service was taken for the one held")
	}
}
