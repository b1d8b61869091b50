package acl

import (
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.fd.io/govpp/adapter"
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
	c := &matchCollector{r: r, log: logr.Discard(), stats: stats}
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
