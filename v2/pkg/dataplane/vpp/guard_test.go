package vpp

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.fd.io/govpp/adapter"
	"go.fd.io/govpp/binapi/acl"
	"go.fd.io/govpp/binapi/tapv2"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// The guard's rules deny the router-only ICMP types, every code, from and
// to anything, and nothing else.
func TestGuardDenyRules(t *testing.T) {
	var got []string
	for _, r := range GuardDenyRules() {
		got = append(got, fmt.Sprintf("%d %s->%s proto %d type %d-%d code %d-%d flags %d/%d", r.IsPermit, fromVPPPrefix(r.SrcPrefix), fromVPPPrefix(r.DstPrefix),
			r.Proto, r.SrcportOrIcmptypeFirst, r.SrcportOrIcmptypeLast, r.DstportOrIcmpcodeFirst, r.DstportOrIcmpcodeLast, r.TCPFlagsMask, r.TCPFlagsValue))
	}
	wantLines(t, "the guard's rules", got, []string{
		"0 ::/0->::/0 proto 58 type 134-134 code 0-255 flags 0/0",
		"0 ::/0->::/0 proto 58 type 137-137 code 0-255 flags 0/0",
		"0 0.0.0.0/0->0.0.0.0/0 proto 1 type 5-5 code 0-255 flags 0/0",
	})
}

// A sync adopts the guard's ACLs VPP holds: unchanged ones are left alone,
// one whose rules differ is replaced in place (its index, used by the
// interfaces, stays), and a second copy is deleted.
func TestSyncAdoptsThePodGuard(t *testing.T) {
	h := start(t, testConfig(), func(h *harness) {
		a := h.vpp.aclPlugin
		a.byIndex[3] = &acl.ACLDetails{ACLIndex: 3, Tag: guardDenyTag, R: GuardDenyRules()[:1], Count: 1}
		a.byIndex[4] = &acl.ACLDetails{ACLIndex: 4, Tag: guardPermitTag, R: guardPermitRules(), Count: 2}
		a.byIndex[5] = &acl.ACLDetails{ACLIndex: 5, Tag: guardPermitTag, R: guardPermitRules(), Count: 2}
		a.byIndex[6] = &acl.ACLDetails{ACLIndex: 6, Tag: "vcoil-pol@2 global"}
	})
	got := h.vpp.take()
	i := slices.Index(got, "acl_dump")
	if i < 0 {
		t.Fatalf("no acl_dump in the sync:\n%s", strings.Join(got, "\n"))
	}
	wantLines(t, "the guard's sync", got[i:i+3], []string{
		"acl_dump",
		`acl_add_replace 3 "vcoil-guard@2 deny" 3 rules`,
		"acl_del 5",
	})
	h.vpp.mu.Lock()
	defer h.vpp.mu.Unlock()
	if d := h.vpp.aclPlugin.byIndex[3]; !SameACLRules(d.R, GuardDenyRules()) {
		t.Fatalf("the deny ACL holds %v", d.R)
	}
	if h.vpp.aclPlugin.byIndex[5] != nil || h.vpp.aclPlugin.byIndex[6] == nil {
		t.Fatal("the sync deleted the wrong ACLs")
	}
	if g := h.d.guard; !g.ok || g.deny != 3 || g.permit != 4 {
		t.Fatalf("the driver's guard is %+v, want deny 3, permit 4", g)
	}
}

// A guard ACL of a newer vcoild stops the sync, naming it.
func TestSyncRefusesANewerPodGuard(t *testing.T) {
	cfg, _ := testConfig().withDefaults()
	f, k := newFakeVPP(), newFakeKernel()
	newer := strings.Replace(guardDenyTag, fmt.Sprintf("@%d", formatversion.VPPTag), fmt.Sprintf("@%d", formatversion.VPPTag+1), 1)
	f.aclPlugin.byIndex[0] = &acl.ACLDetails{ACLIndex: 0, Tag: newer}
	d := newDriver(cfg, logr.Discard(), f.dialer(), k)
	defer d.Close()
	err := d.Init(ctx(t))
	if err == nil || !strings.Contains(err.Error(), "VPP ACL 0") || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("Init = %v, want a refusal naming VPP ACL 0", err)
	}
}

// A pod interface VPP kept from an earlier vcoild without the guard gets
// it in front of the lists it holds, which stay in force: an isolated pod
// keeps its ACLs, an open one gets the guard's permit behind it.
func TestSyncPutsTheGuardOnKeptPods(t *testing.T) {
	cfg := testConfig()
	cfg.Allocations = allocations{podA, podB}
	h := start(t, cfg, func(h *harness) {
		f := h.vpp
		f.add(&fakeIf{name: "loop1", tag: loopbackTag, addrs: []netip.Prefix{LoopbackIPv4}, up: true})
		f.add(&fakeIf{name: "tap2", tag: interconnectTag, addrs: []netip.Prefix{InterconnectVPPIPv4}, up: true, tap: &tapv2.TapCreateV3{}})
		for _, p := range []struct {
			name string
			pod  dataplane.Pod
		}{{"tap3", podA}, {"tap4", podB}} {
			i := f.add(&fakeIf{name: p.name, tag: podTag(p.pod.PodKey), up: true, mtu: 1500, tap: &tapv2.TapCreateV3{HostNamespace: p.pod.Netns, HostMtuSize: 1500}})
			for _, a := range addrsOf(p.pod.IPv4, p.pod.IPv6) {
				f.routes[hostPrefix(a)] = viaPath(i.sw, a)
			}
		}
		// Pod A is isolated by the policies: input 7, output 8.
		f.aclLists[3] = []uint32{1, 7, 8}
	})
	got := h.vpp.take()
	for _, w := range []string{
		"acl_interface_set_acl_list 3 count=3 n_input=2 acls=[100 7 8]",
		"acl_interface_set_acl_list 4 count=2 n_input=2 acls=[100 101]",
	} {
		if !slices.Contains(got, w) {
			t.Fatalf("the sync did not send %q:\n%s", w, strings.Join(got, "\n"))
		}
	}
	if slices.ContainsFunc(got, func(m string) bool { return strings.HasPrefix(m, "tap_") }) {
		t.Fatalf("the sync rewired a kept pod:\n%s", strings.Join(got, "\n"))
	}
}

// A scrape with a stats socket adds the guard's drops, by the family of
// each rule, summed over VPP's threads, to the source checks'.
func TestGuardDropsAreCounted(t *testing.T) {
	h := start(t, testConfig())
	h.vpp.mu.Lock()
	h.vpp.source.showErrors = urpfErrors
	h.vpp.mu.Unlock()
	c := newSourceDropCollector(h.d)
	stats := &fakeStats{entries: []adapter.StatEntry{
		{StatIdentifier: adapter.StatIdentifier{Name: []byte("/acl/100/matches")}, Data: adapter.CombinedCounterStat{
			{{1, 100}, {2, 200}, {3, 300}}, // thread 0: RA, redirect (IPv6), redirect (IPv4)
			{{10, 1000}, {0, 0}, {20, 2000}},
		}},
	}}
	c.stats = stats
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	want := sourceDropsHelp + `# TYPE vcoil_source_validation_drops_total counter
vcoil_source_validation_drops_total{family="ipv4"} 28
vcoil_source_validation_drops_total{family="ipv6"} 20
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(stats.patterns, []string{"^/acl/100/matches$"}) {
		t.Fatalf("the scrape read %v from the stats segment", stats.patterns)
	}

	// A stats segment that cannot be read: no sample rather than a false
	// count.
	stats.err = fmt.Errorf("no stats segment")
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Fatalf("%d samples (%v) while the stats segment cannot be read", n, err)
	}
}

type fakeStats struct {
	entries  []adapter.StatEntry
	patterns []string
	err      error
}

func (f *fakeStats) Connect() error { return nil }

func (f *fakeStats) DumpStats(patterns ...string) ([]adapter.StatEntry, error) {
	f.patterns = append(f.patterns, patterns...)
	return f.entries, f.err
}

// With a stats socket, the sync turns the ACL plugin's counters on: the
// guard's drops are counted only while they are.
func TestGuardTurnsTheACLCountersOnWithAStatsSocket(t *testing.T) {
	cfg := testConfig()
	cfg.StatsSocket = "/run/vpp/stats.sock"
	h := start(t, cfg)
	h.vpp.mu.Lock()
	defer h.vpp.mu.Unlock()
	if !h.vpp.aclPlugin.countersOn {
		t.Fatal("the ACL counters are off")
	}
}
