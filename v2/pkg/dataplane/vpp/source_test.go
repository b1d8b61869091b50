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
// up, against the source tables, where the pod's interface adds paths to
// the pod's address, its source prefixes and (IPv6) the link-local range;
// a repeat with other source prefixes changes the paths only; TeardownPod
// turns the checks off and removes the paths before the interface.
func TestSourceValidationOfAPodFromSetupToTeardown(t *testing.T) {
	h := start(t, testConfig())
	h.vpp.take()
	if _, err := h.d.SetupPod(ctx(t), podS); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "the set-up", h.vpp.take(), []string{
		`tap_create_v3 tag="vcoil@2 5afe eth0" host_if="eth0" ns="/run/netns/pod-s"(true) mtu=1500(true) flags=16 random_mac=true queues=1/1 rings=256/256`,
		"sw_interface_set_unnumbered add=true 3 uses 1",
		"urpf_interface_dump 3",
		"ip_route_add_del add=true path table=2000000000 10.100.0.5/32 through 3 nh=none",
		"ip_route_add_del add=true path table=2000000000 203.0.113.0/24 through 3 nh=none",
		"ip_route_add_del add=true path table=2000000000 fd00:100::5/128 through 3 nh=none",
		"ip_route_add_del add=true path table=2000000000 2001:db8:5::/48 through 3 nh=none",
		"ip_route_add_del add=true path table=2000000000 fe80::/11 through 3 nh=none",
		"ip_route_add_del add=true path table=2000000000 fea0::/11 through 3 nh=none",
		"urpf_update_v2 3 ip4 input=true mode=URPF_API_MODE_STRICT table=2000000000",
		"urpf_update_v2 3 ip6 input=true mode=URPF_API_MODE_STRICT table=2000000000",
		"acl_interface_set_acl_list 3 count=2 n_input=2 acls=[100 101]",
		"sw_interface_set_flags 3 flags=1",
		"ip_route_add_del add=true 10.100.0.5/32 via 10.100.0.5 3",
		"ip_route_add_del add=true fd00:100::5/128 via fd00:100::5 3",
		"sw_interface_dump 3",
	})
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
		"ip_route_add_del add=true path table=2000000000 198.51.100.0/24 through 3 nh=none",
		"ip_route_add_del add=false path table=2000000000 203.0.113.0/24 through 3 nh=none",
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
	for k, rs := range h.vpp.source.tables {
		if len(rs) != 0 {
			t.Fatalf("source table %v after the teardown: %v", k, rs)
		}
	}
}

// Pods share the source tables: a prefix two pods may use is one route with
// a path through each, and one pod's teardown leaves the other's path; a
// pod's own address is a host route only through its interface, so that
// another pod's wider prefix does not let that pod send from it.
func TestSourceTablesAreSharedByPods(t *testing.T) {
	h := start(t, testConfig())
	wide := podS
	wide.IPv6 = netip.Addr{}
	wide.SourcePrefixes = []netip.Prefix{netip.MustParsePrefix("10.100.0.0/24")}
	other := podA
	other.SourcePrefixes = []netip.Prefix{netip.MustParsePrefix("10.100.0.0/24")}
	for _, p := range []dataplane.Pod{wide, other} {
		if _, err := h.d.SetupPod(ctx(t), p); err != nil {
			t.Fatal(err)
		}
	}
	h.vpp.mu.Lock()
	v4 := h.vpp.source.tables[fakeTable{SourceTableID, false}]
	shared := v4[netip.MustParsePrefix("10.100.0.0/24")]
	own := v4[hostPrefix(other.IPv4)]
	h.vpp.mu.Unlock()
	if len(shared) != 2 || len(own) != 1 || own[0].SwIfIndex != 4 {
		t.Fatalf("the shared prefix goes through %v, the second pod's address through %v; want both pods, and the second pod (4) only", shared, own)
	}
	if err := h.d.TeardownPod(ctx(t), dataplane.Pod{PodKey: wide.PodKey}); err != nil {
		t.Fatal(err)
	}
	h.vpp.mu.Lock()
	defer h.vpp.mu.Unlock()
	if got := h.vpp.source.through(4, false); !slices.Equal(got, []netip.Prefix{netip.MustParsePrefix("10.100.0.0/24"), hostPrefix(other.IPv4)}) {
		t.Fatalf("after the first pod's teardown, the second one's IPv4 paths are %v", got)
	}
	if got := h.vpp.source.through(3, false); len(got) != 0 {
		t.Fatalf("the torn-down pod's paths are left: %v", got)
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
// would run unchecked. SetupPod finds and removes such a leftover first.
func TestSourceValidationOfAReusedInterfaceIndex(t *testing.T) {
	h := start(t, testConfig())
	h.vpp.take()
	h.vpp.mu.Lock()
	h.vpp.source.cfg[3] = map[bool]urpf.UrpfInterfaceDetails{false: {SwIfIndex: 3, IsInput: true, Mode: urpf.URPF_API_MODE_STRICT, TableID: SourceTableID}}
	h.vpp.mu.Unlock()

	if _, err := h.d.SetupPod(ctx(t), podB); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "the set-up", h.vpp.take(), slices.Concat([]string{
		`tap_create_v3 tag="vcoil@2 beef eth0" host_if="eth0" ns="/run/netns/pod-b"(true) mtu=1500(true) flags=16 random_mac=true queues=1/1 rings=256/256`,
		"sw_interface_set_unnumbered add=true 3 uses 1",
		"urpf_interface_dump 3",
		"urpf_update_v2 3 ip4 input=true mode=URPF_API_MODE_OFF table=none",
	}, sourceSetUp(3, "10.100.0.3", "")[1:], []string{
		"acl_interface_set_acl_list 3 count=2 n_input=2 acls=[100 101]",
		"sw_interface_set_flags 3 flags=1",
		"ip_route_add_del add=true 10.100.0.3/32 via 10.100.0.3 3",
		"sw_interface_dump 3",
	}))
	for _, v6 := range sourceFamilies {
		if !h.vpp.source.checked(3, v6) {
			t.Fatalf("the new interface runs without its %s source validation", familyName(v6))
		}
	}
}

// After a vcoild restart on a VPP that kept its pods, the sync gives a
// kept pod the source validation it lacks (an earlier vcoild had none, or
// a table per interface, which is moved into the source tables and
// deleted) and the source prefixes vcoild's allocations name, and removes
// the paths and checks of interfaces that are gone.
func TestSyncRestoresSourceValidationAndRemovesStalePaths(t *testing.T) {
	cfg := testConfig()
	pod := podS
	pod.SourcePrefixes = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}
	cfg.Allocations = allocations{pod}
	legacy := fakeTable{SourceTableID + 3, false}
	h := start(t, cfg, func(h *harness) {
		f := h.vpp
		f.add(&fakeIf{name: "loop1", tag: loopbackTag, addrs: []netip.Prefix{LoopbackIPv4}, up: true})
		f.add(&fakeIf{name: "tap2", tag: interconnectTag, addrs: []netip.Prefix{InterconnectVPPIPv4}, up: true, tap: &tapv2.TapCreateV3{}})
		a := f.add(&fakeIf{name: "tap3", tag: podTag(pod.PodKey), up: true, mtu: 1500, tap: &tapv2.TapCreateV3{HostNamespace: pod.Netns, HostMtuSize: 1500}})
		for _, addr := range []netip.Addr{pod.IPv4, pod.IPv6} {
			f.routes[hostPrefix(addr)] = viaPath(a.sw, addr)
		}
		// An earlier vcoild's IPv4 table of the pod, in use.
		f.source.tables[legacy] = map[netip.Prefix][]fib_types.FibPath{
			hostPrefix(pod.IPv4): {throughInterface(a.sw, false)},
		}
		f.source.cfg[a.sw] = map[bool]urpf.UrpfInterfaceDetails{false: {SwIfIndex: index(a.sw), IsInput: true, Mode: urpf.URPF_API_MODE_STRICT, TableID: legacy.id}}
		f.source.feature[a.sw] = map[bool]bool{false: true}
		// The IPv6 source table holds a prefix the pod lost, and a path of
		// an interface that is gone, whose uRPF configuration VPP kept.
		f.source.tables[fakeTable{SourceTableID, true}] = map[netip.Prefix][]fib_types.FibPath{
			netip.MustParsePrefix("2001:db8:9::/48"): {throughInterface(a.sw, true)},
			netip.MustParsePrefix("fe80::/11"):       {throughInterface(9, true)},
		}
		f.source.cfg[9] = map[bool]urpf.UrpfInterfaceDetails{true: {SwIfIndex: 9, IsInput: true, Mode: urpf.URPF_API_MODE_STRICT, Af: 1, TableID: SourceTableID}}
	})
	got := h.vpp.take()
	for _, w := range []string{
		`ip_table_add_del add=true table=2000000000 ip6=false name="vcoil-source-check"`,
		"ip_route_add_del add=true path table=2000000000 10.100.0.5/32 through 3 nh=none",
		"urpf_update_v2 3 ip4 input=true mode=URPF_API_MODE_STRICT table=2000000000",
		"ip_route_add_del add=false table=2000000003 10.100.0.5/32",
		`ip_table_add_del add=false table=2000000003 ip6=false name=""`,
		"ip_route_add_del add=true path table=2000000000 203.0.113.0/24 through 3 nh=none",
		"ip_route_add_del add=true path table=2000000000 fe80::/11 through 3 nh=none",
		"ip_route_add_del add=false path table=2000000000 2001:db8:9::/48 through 3 nh=none",
		"urpf_update_v2 3 ip6 input=true mode=URPF_API_MODE_STRICT table=2000000000",
		"acl_interface_set_acl_list 3 count=2 n_input=2 acls=[100 101]",
		"ip_route_add_del add=false path table=2000000000 fe80::/11 through 9 nh=none",
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
	h.vpp.mu.Lock()
	for _, v6 := range sourceFamilies {
		if !h.vpp.source.checked(3, v6) {
			t.Fatalf("the kept pod's %s sources are not validated", familyName(v6))
		}
	}
	if _, ok := h.vpp.source.tables[legacy]; ok || len(h.vpp.source.destroyedWithRoutes) != 0 {
		t.Fatalf("the earlier vcoild's table is left (destroyed with routes: %v)", h.vpp.source.destroyedWithRoutes)
	}
	if got := h.vpp.source.through(9, true); len(got) != 0 {
		t.Fatalf("the gone interface's paths are left: %v", got)
	}
	if got := h.vpp.source.through(3, true); !slices.Equal(got, []netip.Prefix{hostPrefix(pod.IPv6), netip.MustParsePrefix("fe80::/11"), netip.MustParsePrefix("fea0::/11")}) {
		t.Fatalf("the kept pod's IPv6 paths are %v", got)
	}
	h.vpp.mu.Unlock()

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
		if strings.HasPrefix(m, "urpf_update") || strings.HasPrefix(m, "ip_table_add_del add=false") || strings.Contains(m, "table=2000000000 ") && strings.HasPrefix(m, "ip_route_add_del") ||
			strings.HasPrefix(m, "acl_interface_set_acl_list") || strings.HasPrefix(m, "acl_add_replace") {
			t.Fatalf("a sync of a VPP that holds the wanted source validation and guard changed them: %s", m)
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

const sourceDropsHelp = "# HELP vcoil_source_validation_drops_total Packets from pod interfaces that VPP dropped because their source address is not the pod's (nor one of its allowed source prefixes), or because they are router advertisements or redirects (counted with --vpp-stats-socket), by address family, since VPP started.\n"

// vcoil_source_validation_drops_total is read from VPP's error counters of
// the uRPF nodes at each scrape, on a channel of its own, summed over
// VPP's threads.
func TestSourceValidationDropsMetric(t *testing.T) {
	h := start(t, testConfig())
	h.vpp.mu.Lock()
	h.vpp.source.showErrors = urpfErrors
	h.vpp.opened = nil
	h.vpp.mu.Unlock()
	h.vpp.take()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(newSourceDropCollector(h.d)); err != nil {
		t.Fatal(err)
	}
	want := sourceDropsHelp + `# TYPE vcoil_source_validation_drops_total counter
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

const urpfErrors = `   Count                  Node                              Reason               Severity
         3            ip4-rx-urpf-strict                   uRPF Drop                 error
         2            ip4-rx-urpf-strict                   uRPF Drop                 error
         7            ip6-rx-urpf-strict                   uRPF Drop                 error
        12                ip4-input                       ip4 ttl <= 1               error
         4            ip4-rx-urpf-loose                    uRPF Drop                 error
`

// A pod adopted from VPP (vcoild does not know it) may have paths to
// prefixes vcoild never heard of: its teardown removes every path of its
// interface.
func TestTeardownOfAnAdoptedPodRemovesTheSourcePathsItFinds(t *testing.T) {
	h := start(t, testConfig(), func(h *harness) {
		f := h.vpp
		f.add(&fakeIf{name: "loop1", tag: loopbackTag, addrs: []netip.Prefix{LoopbackIPv4}, up: true})
		f.add(&fakeIf{name: "tap2", tag: interconnectTag, addrs: []netip.Prefix{InterconnectVPPIPv4}, up: true, tap: &tapv2.TapCreateV3{}})
		b := f.add(&fakeIf{name: "tap3", tag: podTag(podB.PodKey), up: true, mtu: 1500, tap: &tapv2.TapCreateV3{HostNamespace: podB.Netns, HostMtuSize: 1500}})
		f.routes[hostPrefix(podB.IPv4)] = viaPath(b.sw, podB.IPv4)
		f.source.tables[fakeTable{SourceTableID, false}] = map[netip.Prefix][]fib_types.FibPath{
			hostPrefix(podB.IPv4):                    {throughInterface(b.sw, false)},
			netip.MustParsePrefix("198.51.100.0/24"): {throughInterface(b.sw, false)},
		}
		f.source.cfg[b.sw] = map[bool]urpf.UrpfInterfaceDetails{false: {SwIfIndex: index(b.sw), IsInput: true, Mode: urpf.URPF_API_MODE_STRICT, TableID: SourceTableID}}
		f.source.feature[b.sw] = map[bool]bool{false: true}
	})
	h.vpp.mu.Lock()
	if got := h.vpp.source.through(3, false); len(got) != 2 || !h.vpp.source.checked(3, true) {
		t.Fatalf("the adopted pod's IPv4 paths are %v and its IPv6 check is on: %t; want its two kept, and a check", got, h.vpp.source.checked(3, true))
	}
	h.vpp.mu.Unlock()
	if err := h.d.TeardownPod(ctx(t), dataplane.Pod{PodKey: podB.PodKey}); err != nil {
		t.Fatal(err)
	}
	h.vpp.mu.Lock()
	defer h.vpp.mu.Unlock()
	if s := h.vpp.source; len(s.through(3, false))+len(s.through(3, true)) != 0 || s.cfg[3][false].Mode != urpf.URPF_API_MODE_OFF {
		t.Fatalf("after the teardown: tables %v, uRPF %v", s.tables, s.cfg[3])
	}
}
