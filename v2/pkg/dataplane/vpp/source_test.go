package vpp

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.fd.io/govpp/binapi/fib_types"
	"go.fd.io/govpp/binapi/tapv2"
	"go.fd.io/govpp/binapi/urpf"

	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
)

// podS is a dual-stack pod that may send from two more prefixes.
var podS = dataplane.Pod{
	PodKey: dataplane.PodKey{ContainerID: "5afe", IfName: "eth0"}, Netns: "/run/netns/pod-s",
	IPv4: netip.MustParseAddr("10.100.0.5"), IPv6: netip.MustParseAddr("fd00:100::5"),
	SourcePrefixes: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("2001:db8:5::/48")},
}

// SetupPod validates the sources of both families before the interface is
// up, against a table per family that holds the pod's address, its source
// prefixes and (IPv6) the link-local range; a repeat with other source
// prefixes changes the tables' routes only; TeardownPod turns the checks
// off and removes the routes and tables before the interface.
func TestSourceValidationOfAPodFromSetupToTeardown(t *testing.T) {
	h := start(t, testConfig())
	h.vpp.take()
	if _, err := h.d.SetupPod(ctx(t), podS); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "the set-up", h.vpp.take(), slices.Concat([]string{
		`tap_create_v3 tag="vcoil@2 5afe eth0" host_if="eth0" ns="/run/netns/pod-s"(true) mtu=1500(true) flags=16 random_mac=true queues=1/1 rings=256/256`,
		"sw_interface_set_unnumbered add=true 3 uses 1",
		"urpf_interface_dump 3",
		`ip_table_add_del add=true table=2000000003 ip6=false name="vcoil-source-check-3"`,
		"ip_route_add_del add=true table=2000000003 10.100.0.5/32 through 3 nh=none",
		"ip_route_add_del add=true table=2000000003 203.0.113.0/24 through 3 nh=none",
		"urpf_update_v2 3 ip4 input=true mode=URPF_API_MODE_STRICT table=2000000003",
		`ip_table_add_del add=true table=2000000003 ip6=true name="vcoil-source-check-3"`,
		"ip_route_add_del add=true table=2000000003 fd00:100::5/128 through 3 nh=none",
		"ip_route_add_del add=true table=2000000003 2001:db8:5::/48 through 3 nh=none",
		"ip_route_add_del add=true table=2000000003 fe80::/11 through 3 nh=none",
		"ip_route_add_del add=true table=2000000003 fea0::/11 through 3 nh=none",
		"urpf_update_v2 3 ip6 input=true mode=URPF_API_MODE_STRICT table=2000000003",
		"sw_interface_set_flags 3 flags=1",
	}, []string{
		"ip_route_add_del add=true 10.100.0.5/32 via 10.100.0.5 3",
		"ip_route_add_del add=true fd00:100::5/128 via fd00:100::5 3",
		"sw_interface_dump 3",
	}))
	for _, v6 := range sourceFamilies {
		if !h.vpp.source.checked(3, v6) {
			t.Fatalf("VPP does not validate the %s sources of the pod", familyName(v6))
		}
	}
	if err := h.d.CheckPod(ctx(t), podS); err != nil {
		t.Fatalf("CheckPod: %v", err)
	}
	wantLines(t, "CheckPod", h.vpp.take(), []string{"sw_interface_dump 3", "urpf_interface_dump 3"})

	changed := podS
	changed.SourcePrefixes = []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8:5::/48")}
	if _, err := h.d.SetupPod(ctx(t), changed); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "a repeat with other source prefixes", h.vpp.take(), []string{
		"sw_interface_dump 3",
		"urpf_interface_dump 3",
		"ip_route_dump table=2000000003 ip6=false",
		"ip_route_add_del add=true table=2000000003 198.51.100.0/24 through 3 nh=none",
		"ip_route_add_del add=false table=2000000003 203.0.113.0/24 through 3 nh=none",
		"ip_route_dump table=2000000003 ip6=true",
	})

	if err := h.d.TeardownPod(ctx(t), dataplane.Pod{PodKey: podS.PodKey}); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "the teardown", h.vpp.take(), slices.Concat([]string{
		"ip_route_add_del add=false 10.100.0.5/32 via 10.100.0.5 3",
		"ip_route_add_del add=false fd00:100::5/128 via fd00:100::5 3",
	}, sourceTearDown(3, "10.100.0.5", "fd00:100::5", "198.51.100.0/24", "2001:db8:5::/48"), []string{
		"tap_delete_v2 3",
	}))
	if s := h.vpp.source; len(s.tables) != 0 || len(s.destroyedWithRoutes) != 0 {
		t.Fatalf("source tables after the teardown: %v (destroyed with routes: %v)", s.tables, s.destroyedWithRoutes)
	}
}

// CheckPod fails, naming it, when VPP no longer validates a pod's sources.
func TestCheckPodNamesAMissingSourceValidation(t *testing.T) {
	h := start(t, testConfig())
	if _, err := h.d.SetupPod(ctx(t), podA); err != nil {
		t.Fatal(err)
	}
	h.vpp.mu.Lock()
	delete(h.vpp.source.cfg[3], true)
	h.vpp.mu.Unlock()
	err := h.d.CheckPod(ctx(t), podA)
	if err == nil || !strings.Contains(err.Error(), "does not validate the IPv6 sources") {
		t.Fatalf("CheckPod = %v, want an error naming the IPv6 source validation", err)
	}
}

// VPP keeps an interface's uRPF configuration when the interface is
// deleted, and takes the same configuration again for no change: a new
// interface with the sw_if_index of one that was deleted with its check on
// would run unchecked. SetupPod finds and removes such a leftover (and its
// table, which holds another pod's sources) first.
func TestSourceValidationOfAReusedInterfaceIndex(t *testing.T) {
	h := start(t, testConfig())
	h.vpp.take()
	h.vpp.mu.Lock()
	gone := fakeTable{sourceTable(3), false}
	h.vpp.source.tables[gone] = map[netip.Prefix]fib_types.FibPath{netip.MustParsePrefix("10.100.0.77/32"): throughInterface(3, false)}
	h.vpp.source.cfg[3] = map[bool]urpf.UrpfInterfaceDetails{false: {SwIfIndex: 3, IsInput: true, Mode: urpf.URPF_API_MODE_STRICT, TableID: sourceTable(3)}}
	h.vpp.mu.Unlock()

	if _, err := h.d.SetupPod(ctx(t), podB); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "the set-up", h.vpp.take(), slices.Concat([]string{
		`tap_create_v3 tag="vcoil@2 beef eth0" host_if="eth0" ns="/run/netns/pod-b"(true) mtu=1500(true) flags=16 random_mac=true queues=1/1 rings=256/256`,
		"sw_interface_set_unnumbered add=true 3 uses 1",
		"urpf_interface_dump 3",
		"ip_route_dump table=2000000003 ip6=false",
		"urpf_update_v2 3 ip4 input=true mode=URPF_API_MODE_OFF table=none",
		"ip_route_add_del add=false table=2000000003 10.100.0.77/32 through 3 nh=none",
		`ip_table_add_del add=false table=2000000003 ip6=false name=""`,
		"ip_route_dump table=2000000003 ip6=true",
		"urpf_update_v2 3 ip6 input=true mode=URPF_API_MODE_OFF table=none",
		`ip_table_add_del add=false table=2000000003 ip6=true name=""`,
	}, sourceSetUp(3, "10.100.0.3", "")[1:], []string{
		"sw_interface_set_flags 3 flags=1",
		"ip_route_add_del add=true 10.100.0.3/32 via 10.100.0.3 3",
		"sw_interface_dump 3",
	}))
	for _, v6 := range sourceFamilies {
		if !h.vpp.source.checked(3, v6) {
			t.Fatalf("the new interface runs without its %s source validation", familyName(v6))
		}
	}
	if rs := h.vpp.source.tables[gone]; len(rs) != 1 || rs[netip.MustParsePrefix("10.100.0.3/32")] == (fib_types.FibPath{}) {
		t.Fatalf("the IPv4 source table holds %v, want the new pod's address only", rs)
	}
}

// After a vcoild restart on a VPP that kept its pods, the sync gives a
// kept pod the source validation it lacks (an earlier vcoild had none) and
// the source prefixes vcoild's allocations name, and removes the tables of
// interfaces that are gone.
func TestSyncRestoresSourceValidationAndRemovesStaleTables(t *testing.T) {
	cfg := testConfig()
	pod := podS
	pod.SourcePrefixes = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}
	cfg.Allocations = allocations{pod}
	var stale fakeTable
	h := start(t, cfg, func(h *harness) {
		f := h.vpp
		f.add(&fakeIf{name: "loop1", tag: loopbackTag, addrs: []netip.Prefix{LoopbackIPv4}, up: true})
		f.add(&fakeIf{name: "tap2", tag: interconnectTag, addrs: []netip.Prefix{InterconnectVPPIPv4}, up: true, tap: &tapv2.TapCreateV3{}})
		a := f.add(&fakeIf{name: "tap3", tag: podTag(pod.PodKey), up: true, mtu: 1500, tap: &tapv2.TapCreateV3{HostNamespace: pod.Netns, HostMtuSize: 1500}})
		for _, addr := range []netip.Addr{pod.IPv4, pod.IPv6} {
			f.routes[hostPrefix(addr)] = viaPath(a.sw, addr)
		}
		// The IPv6 table exists already with a prefix the pod lost.
		f.source.tables[fakeTable{sourceTable(a.sw), true}] = map[netip.Prefix]fib_types.FibPath{
			netip.MustParsePrefix("2001:db8:9::/48"): throughInterface(a.sw, true),
		}
		stale = fakeTable{sourceTable(9), false}
		f.source.tables[stale] = map[netip.Prefix]fib_types.FibPath{netip.MustParsePrefix("10.100.0.9/32"): throughInterface(9, false)}
	})
	got := h.vpp.take()
	for _, w := range []string{
		`ip_table_add_del add=true table=2000000003 ip6=false name="vcoil-source-check-3"`,
		"ip_route_add_del add=true table=2000000003 10.100.0.5/32 through 3 nh=none",
		"ip_route_add_del add=true table=2000000003 203.0.113.0/24 through 3 nh=none",
		"urpf_update_v2 3 ip4 input=true mode=URPF_API_MODE_STRICT table=2000000003",
		"ip_route_add_del add=true table=2000000003 fe80::/11 through 3 nh=none",
		"ip_route_add_del add=false table=2000000003 2001:db8:9::/48 through 3 nh=none",
		"urpf_update_v2 3 ip6 input=true mode=URPF_API_MODE_STRICT table=2000000003",
		"ip_route_add_del add=false table=2000000009 10.100.0.9/32 through 9 nh=none",
		`ip_table_add_del add=false table=2000000009 ip6=false name=""`,
	} {
		if !slices.Contains(got, w) {
			t.Fatalf("the sync did not send %q:\n%s", w, strings.Join(got, "\n"))
		}
	}
	for _, m := range got {
		if strings.HasPrefix(m, "tap_") {
			t.Fatalf("the sync rewired the kept pod: %s", m)
		}
	}
	for _, v6 := range sourceFamilies {
		if !h.vpp.source.checked(3, v6) {
			t.Fatalf("the kept pod's %s sources are not validated", familyName(v6))
		}
	}
	if _, ok := h.vpp.source.tables[stale]; ok || len(h.vpp.source.destroyedWithRoutes) != 0 {
		t.Fatalf("the stale table is left (destroyed with routes: %v)", h.vpp.source.destroyedWithRoutes)
	}

	// A second sync (a reconnection) finds everything as wanted.
	h.vpp.setDown(true)
	poll.Eventually(t, 5*time.Second, func() error {
		if h.d.Healthy(ctx(t)) == nil {
			return errors.New("still healthy")
		}
		return nil
	})
	h.vpp.take()
	h.vpp.setDown(false)
	poll.Eventually(t, 5*time.Second, func() error { return h.d.Healthy(ctx(t)) })
	for _, m := range h.vpp.take() {
		if strings.HasPrefix(m, "urpf_update") || strings.HasPrefix(m, "ip_table_add_del") || strings.Contains(m, "table=2000000003 ") && strings.HasPrefix(m, "ip_route_add_del") {
			t.Fatalf("a sync of a VPP that holds the wanted source validation changed it: %s", m)
		}
	}
}

// Without VPP's uRPF plugin, vcoild does not start and its readiness names
// the plugin.
func TestHealthyNamesAMissingURPFPlugin(t *testing.T) {
	cfg, _ := testConfig().withDefaults()
	f, k := newFakeVPP(), newFakeKernel()
	for _, m := range urpfMessages() {
		f.unknown = append(f.unknown, m.GetMessageName()+"_"+m.GetCrcString())
	}
	d := newDriver(cfg, logr.Discard(), f.dialer(), k)
	defer d.Close()
	const want = "VPP plugin urpf_plugin.so is not loaded (source validation needs it)"
	err := d.Init(ctx(t))
	if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Init = %v, want ErrIncompatible saying %q", err, want)
	}
	if err := d.Healthy(ctx(t)); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Healthy = %v, want %q", err, want)
	}
}

// vcoil_source_validation_drops_total is read from VPP's error counters of
// the uRPF nodes at each scrape, on a channel of its own, summed over
// VPP's threads.
func TestSourceValidationDropsMetric(t *testing.T) {
	h := start(t, testConfig())
	h.vpp.mu.Lock()
	h.vpp.source.showErrors = `   Count                  Node                              Reason               Severity
         3            ip4-rx-urpf-strict                   uRPF Drop                 error
         2            ip4-rx-urpf-strict                   uRPF Drop                 error
         7            ip6-rx-urpf-strict                   uRPF Drop                 error
        12                ip4-input                       ip4 ttl <= 1               error
         4            ip4-rx-urpf-loose                    uRPF Drop                 error
`
	h.vpp.opened = nil
	h.vpp.mu.Unlock()
	h.vpp.take()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(newSourceDropCollector(h.d)); err != nil {
		t.Fatal(err)
	}
	want := `# HELP vcoil_source_validation_drops_total Packets from pod interfaces that VPP dropped because their source address is not the pod's (nor one of its allowed source prefixes), by address family, since VPP started.
# TYPE vcoil_source_validation_drops_total counter
vcoil_source_validation_drops_total{family="ipv4"} 5
vcoil_source_validation_drops_total{family="ipv6"} 7
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "VPP messages of a scrape", h.vpp.take(), []string{`cli_inband "show errors"`})
	if len(h.vpp.opened) != 1 {
		t.Fatalf("a scrape opened %d channels, want one of its own", len(h.vpp.opened))
	}

	// Without VPP, a scrape has no sample rather than a false zero.
	h.vpp.setDown(true)
	poll.Eventually(t, 5*time.Second, func() error {
		if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
			return fmt.Errorf("%d samples (%v) while VPP is gone", n, err)
		}
		return nil
	})
}

// A pod adopted from VPP (vcoild does not know it) may have source tables
// with prefixes vcoild never heard of: its teardown reads them, so that no
// table is deleted with routes in it.
func TestTeardownOfAnAdoptedPodRemovesTheSourceRoutesItFinds(t *testing.T) {
	h := start(t, testConfig(), func(h *harness) {
		f := h.vpp
		f.add(&fakeIf{name: "loop1", tag: loopbackTag, addrs: []netip.Prefix{LoopbackIPv4}, up: true})
		f.add(&fakeIf{name: "tap2", tag: interconnectTag, addrs: []netip.Prefix{InterconnectVPPIPv4}, up: true, tap: &tapv2.TapCreateV3{}})
		b := f.add(&fakeIf{name: "tap3", tag: podTag(podB.PodKey), up: true, mtu: 1500, tap: &tapv2.TapCreateV3{HostNamespace: podB.Netns, HostMtuSize: 1500}})
		f.routes[hostPrefix(podB.IPv4)] = viaPath(b.sw, podB.IPv4)
		f.source.tables[fakeTable{sourceTable(b.sw), false}] = map[netip.Prefix]fib_types.FibPath{
			hostPrefix(podB.IPv4):                    throughInterface(b.sw, false),
			netip.MustParsePrefix("198.51.100.0/24"): throughInterface(b.sw, false),
		}
		f.source.cfg[b.sw] = map[bool]urpf.UrpfInterfaceDetails{false: {SwIfIndex: index(b.sw), IsInput: true, Mode: urpf.URPF_API_MODE_STRICT, TableID: sourceTable(b.sw)}}
		f.source.feature[b.sw] = map[bool]bool{false: true}
	})
	if err := h.d.TeardownPod(ctx(t), dataplane.Pod{PodKey: podB.PodKey}); err != nil {
		t.Fatal(err)
	}
	if s := h.vpp.source; len(s.tables) != 0 || len(s.destroyedWithRoutes) != 0 || s.cfg[3][false].Mode != urpf.URPF_API_MODE_OFF {
		t.Fatalf("after the teardown: tables %v, destroyed with routes %v, uRPF %v", s.tables, s.destroyedWithRoutes, s.cfg[3])
	}
}
