package acl

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.fd.io/govpp/adapter"

	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

type fakeStats struct {
	entries  []adapter.StatEntry
	patterns []string
}

func (f *fakeStats) Connect() error { return nil }

func (f *fakeStats) DumpStats(patterns ...string) ([]adapter.StatEntry, error) {
	f.patterns = patterns
	return f.entries, nil
}

func matches(name string, perThread ...[]adapter.CombinedCounter) adapter.StatEntry {
	return adapter.StatEntry{StatIdentifier: adapter.StatIdentifier{Name: adapter.Name(name)}, Type: adapter.CombinedCounterVector,
		Data: adapter.CombinedCounterStat(perThread)}
}

// The hit counters of the renderer's ACLs, summed over VPP's threads and
// the ACLs' rules, by table; other ACLs' counters are left out.
func TestMatchesAreExportedByTable(t *testing.T) {
	r := newRenderer(t, newFakeVPP(t))
	r.synced = true
	r.local["local-1"] = aclState{index: 0}
	r.global = &aclState{index: 3}
	r.reflect = &aclState{index: 1}
	stats := &fakeStats{entries: []adapter.StatEntry{
		matches("/acl/0/matches", []adapter.CombinedCounter{{3, 180}, {1, 60}}, []adapter.CombinedCounter{{2, 120}, {0, 0}}),
		matches("/acl/1/matches", []adapter.CombinedCounter{{10, 1000}}),
		matches("/acl/2/matches", []adapter.CombinedCounter{{99, 9900}}),
		matches("/acl/3/matches\x00", []adapter.CombinedCounter{{0, 0}, {7, 700}}),
	}}
	c := &matchCollector{r: r, log: logr.Discard(), stats: &statsReader{stats: stats}}
	want := `
# HELP vcoil_vpp_policy_acl_matched_bytes_total Bytes of the packets counted by vcoil_vpp_policy_acl_matched_packets_total.
# TYPE vcoil_vpp_policy_acl_matched_bytes_total counter
vcoil_vpp_policy_acl_matched_bytes_total{table="global"} 700
vcoil_vpp_policy_acl_matched_bytes_total{table="local-1"} 360
vcoil_vpp_policy_acl_matched_bytes_total{table="reflect"} 1000
# HELP vcoil_vpp_policy_acl_matched_packets_total Packets that matched a rule of one of the VPP ACL policy renderer's ACLs, by table (local-N, global, reflect), from VPP's stats segment; VPP starts again from 0 when the ACL is replaced.
# TYPE vcoil_vpp_policy_acl_matched_packets_total counter
vcoil_vpp_policy_acl_matched_packets_total{table="global"} 7
vcoil_vpp_policy_acl_matched_packets_total{table="local-1"} 6
vcoil_vpp_policy_acl_matched_packets_total{table="reflect"} 10
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	if len(stats.patterns) != 1 || stats.patterns[0] != matchesPattern {
		t.Fatalf("dumped %v", stats.patterns)
	}
	r.synced = false
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Fatalf("%d counters while VPP's content is unknown", n)
	}
}

// The packets the deny rules of the ordered tables count are the denials
// of the policies the rules come from: each ACL rule's counter (over
// threads) goes to its table rule's origin, an "any" rule being two ACL
// rules; permit rules and rules without an origin count for nobody.
func TestDeniedPacketsAreCountedForThePolicyOfEachDenyRule(t *testing.T) {
	f := newFakeVPP(t)
	r := newRenderer(t, f)
	deny := func(policy, src string) renderer.TierRule {
		return renderer.TierRule{Action: renderer.TierDeny, Policy: policy, Match: renderer.Rule{SrcNetwork: prefix(src), SrcPort: renderer.AnyPort, DstPort: renderer.AnyPort}}
	}
	b := renderer.PodRules{Pod: podB, IPs: []netip.Addr{ipB},
		Ingress:         []renderer.Rule{permit(renderer.ProtocolTCP, "10.1.0.2/32", "", 8080), renderer.DenyAll},
		NetworkPolicies: [2][]string{{"ns/b-from-a"}, nil}}
	b.Admin[renderer.Ingress] = []renderer.TierRule{deny("no-x", "10.9.0.0/16"), {Action: renderer.TierAccept, Match: renderer.Rule{SrcNetwork: prefix("10.8.0.0/16"), SrcPort: renderer.AnyPort, DstPort: renderer.AnyPort}}}
	if err := r.Render(ctx(t), renderer.Txn{Resync: true, Pods: []renderer.PodRules{b}}); err != nil {
		t.Fatal(err)
	}
	tbls := r.cache.LocalTables()
	if len(tbls) != 1 || !r.ordered {
		t.Fatalf("tables %+v (ordered %v), want b's in the ordered cache", tbls, r.ordered)
	}
	a := r.local[tbls[0].ID]
	// The ACL: admin deny 10.9/16 (v4), accept 10.8/16 (v4), permit
	// tcp from a, deny all v4, deny all v6.
	if len(a.rules) != 5 {
		t.Fatalf("b's ACL has %d rules, want 5: %+v", len(a.rules), a.rules)
	}
	perRule := func(n ...uint64) []adapter.CombinedCounter {
		out := make([]adapter.CombinedCounter, len(n))
		for i, x := range n {
			out[i] = adapter.CombinedCounter{x, x * 100}
		}
		return out
	}
	r.stats = &statsReader{stats: &fakeStats{entries: []adapter.StatEntry{
		matches(fmt.Sprintf("/acl/%d/matches", a.index), perRule(2, 50, 70, 3, 1), perRule(1, 0, 0, 4, 0)),
	}}}
	got, err := r.Denied(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []renderer.Denied{
		{Tier: "admin", Policy: "no-x", Direction: renderer.Ingress, Packets: 3},
		{Tier: "networkpolicy", Policy: "ns/b-from-a", Direction: renderer.Ingress, Packets: 8},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Denied = %+v, want %+v", got, want)
	}
	// A render that fails leaves VPP's content unknown: nothing is counted.
	r.synced = false
	if got, _ := r.Denied(ctx(t)); len(got) != 0 {
		t.Fatalf("Denied while VPP's content is unknown: %+v", got)
	}
}

func TestDeniedNeedsTheCounters(t *testing.T) {
	r := newRenderer(t, newFakeVPP(t))
	if _, err := r.Denied(ctx(t)); err == nil || !strings.Contains(err.Error(), "counters are off") {
		t.Fatalf("Denied without a stats socket: %v", err)
	}
}
