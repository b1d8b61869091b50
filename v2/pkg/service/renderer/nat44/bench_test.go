package nat44_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/acl"
	interfaces "go.fd.io/govpp/binapi/interface"
	"go.fd.io/govpp/binapi/interface_types"
	"go.fd.io/govpp/binapi/ip_types"
	"go.fd.io/govpp/binapi/nat44_ed"
	"go.fd.io/govpp/binapi/nat_types"
	"go.fd.io/govpp/core"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/vppbench"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
	"github.com/vcoil/vcoil/v2/pkg/service"
	"github.com/vcoil/vcoil/v2/pkg/service/renderer/nat44"
)

// The benchmark's shape: every service has one cluster IP with one TCP
// port and benchBackends endpoints (remote ones, so every local has the
// same weight), hence one load-balancing static mapping per service.
const (
	benchBackends = 10
	benchChanges  = 200
	benchWindow   = nat44.DefaultMaxInFlight
	// benchSessions sizes NAT44-ED's session table as a node would.
	benchSessions = 262144
)

// The targets.
const (
	targetResync10k = 200 * time.Millisecond
	targetChange    = time.Millisecond
)

// TestBenchVPPServices measures the NAT44 renderer against a real VPP
// (VCOIL_VPP_BIN) in a namespace of its own: for N services of
// benchBackends backends, the time of a Resync from an empty VPP, of a
// second Resync that finds everything in place (the restart of vcoild), and
// of one backend change through Update (benchChanges of them: p50, p99);
// VPP's main heap and the test process's memory after the Resync. As the
// reference, a fresh VPP gets the same mappings from a bare pipelined GoVPP
// loop ("raw VPP"), with the same window, and then the cost of giving one
// more interface the NAT outside role while the mappings exist (VPP then
// walks every mapping). It runs only when VCOIL_BENCH_VPP_SERVICES names
// the JSON file to write (make bench-vpp-services): it is a measurement,
// not a check. VCOIL_BENCH_VPP_SERVICES_SIZES overrides the sizes
// ("1000,10000").
func TestBenchVPPServices(t *testing.T) {
	out := os.Getenv("VCOIL_BENCH_VPP_SERVICES")
	if out == "" {
		t.Skip("skipped: set VCOIL_BENCH_VPP_SERVICES to the JSON output file (make bench-vpp-services)")
	}
	netnstest.RequireRoot(t)
	bin := vpptest.Binary(t)
	sizes := []int{1000, 10000, 30000}
	if s := os.Getenv("VCOIL_BENCH_VPP_SERVICES_SIZES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				t.Fatalf("VCOIL_BENCH_VPP_SERVICES_SIZES=%q: %q is not a positive number", s, f)
			}
			sizes = append(sizes, n)
		}
	}
	report := benchReport{
		Backends: benchBackends, Window: benchWindow, Changes: benchChanges,
		TargetResync10kSeconds: targetResync10k.Seconds(), TargetChangeMs: ms(targetChange),
	}
	for _, n := range sizes {
		row := benchRow{Services: n, Mappings: n}
		benchRaw(t, bin, n, &row)
		benchRenderer(t, bin, n, &row)
		report.Rows = append(report.Rows, row)
		t.Logf("%d services: %+v", n, row)
	}
	report.VPP = report.Rows[0].version
	data, err := json.MarshalIndent(report, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + report.table())
}

type benchReport struct {
	VPP                    string     `json:"vpp"`
	Backends               int        `json:"backends_per_service"`
	Window                 int        `json:"requests_in_flight"`
	Changes                int        `json:"backend_changes"`
	TargetResync10kSeconds float64    `json:"target_resync_10k_s"`
	TargetChangeMs         float64    `json:"target_change_ms"`
	Rows                   []benchRow `json:"rows"`
}

type benchRow struct {
	Services int `json:"services"`
	Mappings int `json:"mappings"`

	// Raw VPP: the same mappings from a bare pipelined loop.
	RawSeconds     float64 `json:"raw_s"`
	RawPerSecond   float64 `json:"raw_mappings_per_s"`
	RawChangeP50Ms float64 `json:"raw_change_p50_ms"`
	RawChangeP99Ms float64 `json:"raw_change_p99_ms"`
	// OutsideRoleMs: giving one more interface the NAT inside and outside
	// features while the mappings exist, for each of three interfaces in
	// turn.
	OutsideRoleMs []float64 `json:"outside_role_ms"`
	// OutsideRoleRemovalMs: taking the features away again, last
	// interface first.
	OutsideRoleRemovalMs []float64 `json:"outside_role_removal_ms"`

	// The renderer.
	ResyncSeconds     float64 `json:"resync_s"`
	ResyncPerSecond   float64 `json:"resync_mappings_per_s"`
	ResyncNoopSeconds float64 `json:"resync_noop_s"`
	ChangeP50Ms       float64 `json:"change_p50_ms"`
	ChangeP99Ms       float64 `json:"change_p99_ms"`
	ChangeMaxMs       float64 `json:"change_max_ms"`

	VPPHeapUsedMB    float64 `json:"vpp_main_heap_used_mb"`
	VPPHeapEmptyMB   float64 `json:"vpp_main_heap_used_empty_mb"`
	GoHeapMB         float64 `json:"go_heap_mb"`
	ProcessRSSMB     float64 `json:"process_rss_mb"`
	ProcessRSSIdleMB float64 `json:"process_rss_before_mb"`

	version string
}

func (r benchReport) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "VPP %s, %d backends per service, %d requests in flight\n\n", r.VPP, r.Backends, r.Window)
	b.WriteString("| services | raw VPP | raw VPP rate | Resync | Resync rate | Resync, nothing to do | one change p50 / p99 (raw VPP) | outside role for one more interface (removal) | VPP heap used (empty) | Go heap / RSS (before) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, w := range r.Rows {
		fmt.Fprintf(&b, "| %d | %.3f s | %.0f/s | %.3f s | %.0f/s | %.3f s | %.2f / %.2f ms (%.2f / %.2f ms) | %s ms (%s ms) | %.0f MB (%.0f MB) | %.0f MB / %.0f MB (%.0f MB) |\n",
			w.Services, w.RawSeconds, w.RawPerSecond, w.ResyncSeconds, w.ResyncPerSecond, w.ResyncNoopSeconds,
			w.ChangeP50Ms, w.ChangeP99Ms, w.RawChangeP50Ms, w.RawChangeP99Ms, joinMs(w.OutsideRoleMs), joinMs(w.OutsideRoleRemovalMs),
			w.VPPHeapUsedMB, w.VPPHeapEmptyMB, w.GoHeapMB, w.ProcessRSSMB, w.ProcessRSSIdleMB)
	}
	return b.String()
}

func joinMs(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strings.Join(s, ", ")
}

func ms(d time.Duration) float64 { return vppbench.Ms(d) }

func benchVPP(t *testing.T, bin string, n int) (*core.Connection, *vpptest.VPP) {
	return vppbench.StartVPP(t, bin, n)
}

func benchChannel(t *testing.T, conn *core.Connection) api.Channel {
	return vppbench.Channel(t, conn, benchWindow)
}

func benchCall(t *testing.T, ch api.Channel, req, reply api.Message) {
	t.Helper()
	vppbench.Call(t, ch, req, reply)
}

func benchCLI(t *testing.T, ch api.Channel, cmd string) string { return vppbench.CLI(t, ch, cmd) }

func benchHeapMB(t *testing.T, ch api.Channel) float64 { return vppbench.HeapMB(t, ch) }

func benchEnableNAT(t *testing.T, ch api.Channel) {
	t.Helper()
	benchCall(t, ch, &nat44_ed.Nat44EdPluginEnableDisable{Enable: true, Sessions: benchSessions}, &nat44_ed.Nat44EdPluginEnableDisableReply{})
}

// benchState is n services, each with one cluster IP in 10.96.0.0/12, TCP
// port 80, and benchBackends remote endpoints of its own in 10.128.0.0/9.
func benchState(n int) *service.State {
	st := &service.State{
		Node:     service.Node{Name: "bench", NATLoopback: []netip.Addr{netip.MustParseAddr("10.1.0.255")}},
		Services: make(map[service.ID]*service.Service, n),
	}
	for i := range n {
		s := benchService(i, 0)
		st.Services[s.ID] = s
	}
	return st
}

func benchClusterIP(i int) netip.Addr { return addrPlus(netip.MustParseAddr("10.96.0.1"), i) }

func benchBackend(i, b int) netip.Addr {
	return addrPlus(netip.MustParseAddr("10.128.0.0"), i*benchBackends+b)
}

func addrPlus(a netip.Addr, n int) netip.Addr { return vppbench.AddrPlus(a, n) }

// benchService is service i whose backends are numbered from first: a
// backend change moves first by one, which replaces one endpoint.
func benchService(i, first int) *service.Service {
	eps := make([]service.Endpoint, 0, benchBackends)
	for b := first; b < first+benchBackends; b++ {
		// Past the service's own range, borrow addresses from 10.127/16,
		// which no other service uses.
		a := benchBackend(i, b)
		if b >= benchBackends {
			a = addrPlus(netip.MustParseAddr("10.127.0.0"), i*8+b)
		}
		eps = append(eps, service.Endpoint{Addr: a, Port: 8080, NodeName: "other", Ready: true, Serving: true})
	}
	slices.SortFunc(eps, func(a, b service.Endpoint) int { return a.Addr.Compare(b.Addr) })
	return &service.Service{
		ID:         service.ID{Namespace: "bench", Name: fmt.Sprintf("svc-%d", i)},
		ClusterIPs: []netip.Addr{benchClusterIP(i)},
		Ports: []service.Port{{
			Name: "http", Protocol: service.TCP, Port: 80,
			Endpoints: eps, Cluster: eps, HasEndpoints: true,
		}},
	}
}

// benchRaw programs n load-balancing static mappings into a fresh VPP with
// a bare loop of pipelined requests, then times single backend changes and
// the outside role of new interfaces.
func benchRaw(t *testing.T, bin string, n int, row *benchRow) {
	conn, _ := benchVPP(t, bin, n)
	ch := benchChannel(t, conn)
	if f := strings.Fields(benchCLI(t, ch, "show version")); len(f) >= 2 {
		row.version = f[1] // "vpp v25.10-release built by ..."
	}
	benchEnableNAT(t, ch)
	reqs := make([]api.Message, n)
	for i := range n {
		m := &nat44_ed.Nat44AddDelLbStaticMapping{
			IsAdd: true, Flags: nat_types.NAT_IS_OUT2IN_ONLY | nat_types.NAT_IS_SELF_TWICE_NAT,
			ExternalAddr: ip_types.IP4Address(benchClusterIP(i).As4()), ExternalPort: 80, Protocol: 6,
			Tag: fmt.Sprintf("vcoil-svc@2 bench/svc-%d", i), LocalNum: benchBackends,
		}
		for b := range benchBackends {
			m.Locals = append(m.Locals, nat44_ed.Nat44LbAddrPort{Addr: ip_types.IP4Address(benchBackend(i, b).As4()), Port: 8080, Probability: 2})
		}
		reqs[i] = m
	}
	start := time.Now()
	pipeline(t, ch, reqs, func() api.Message { return &nat44_ed.Nat44AddDelLbStaticMappingReply{} })
	d := time.Since(start)
	row.RawSeconds, row.RawPerSecond = d.Seconds(), float64(n)/d.Seconds()

	// One backend change: add the new local, then remove an old one (the
	// order that keeps two locals), sequentially as an Update would.
	changes := make([]float64, 0, benchChanges)
	for c := range benchChanges {
		i := (c * 7919) % n
		ext := ip_types.IP4Address(benchClusterIP(i).As4())
		local := func(a netip.Addr) nat44_ed.Nat44LbAddrPort {
			return nat44_ed.Nat44LbAddrPort{Addr: ip_types.IP4Address(a.As4()), Port: 8080, Probability: 2}
		}
		start := time.Now()
		benchCall(t, ch, &nat44_ed.Nat44LbStaticMappingAddDelLocal{IsAdd: true, ExternalAddr: ext, ExternalPort: 80, Protocol: 6,
			Local: local(addrPlus(netip.MustParseAddr("10.126.0.0"), c))}, &nat44_ed.Nat44LbStaticMappingAddDelLocalReply{})
		benchCall(t, ch, &nat44_ed.Nat44LbStaticMappingAddDelLocal{ExternalAddr: ext, ExternalPort: 80, Protocol: 6,
			Local: local(benchBackend(i, 0))}, &nat44_ed.Nat44LbStaticMappingAddDelLocalReply{})
		changes = append(changes, ms(time.Since(start)))
		// Put the mapping back as it was.
		benchCall(t, ch, &nat44_ed.Nat44LbStaticMappingAddDelLocal{IsAdd: true, ExternalAddr: ext, ExternalPort: 80, Protocol: 6,
			Local: local(benchBackend(i, 0))}, &nat44_ed.Nat44LbStaticMappingAddDelLocalReply{})
		benchCall(t, ch, &nat44_ed.Nat44LbStaticMappingAddDelLocal{ExternalAddr: ext, ExternalPort: 80, Protocol: 6,
			Local: local(addrPlus(netip.MustParseAddr("10.126.0.0"), c))}, &nat44_ed.Nat44LbStaticMappingAddDelLocalReply{})
	}
	row.RawChangeP50Ms, row.RawChangeP99Ms = percentile(changes, 50), percentile(changes, 99)

	// A pod is a NAT frontend, so each new pod gets the outside role while
	// the services' mappings exist, and loses it at its DEL: time both on
	// loopbacks.
	var los []interface_types.InterfaceIndex
	for range 3 {
		lo := &interfaces.CreateLoopbackReply{}
		benchCall(t, ch, &interfaces.CreateLoopback{}, lo)
		los = append(los, lo.SwIfIndex)
		start := time.Now()
		benchCall(t, ch, &nat44_ed.Nat44InterfaceAddDelFeature{IsAdd: true, Flags: nat_types.NAT_IS_INSIDE, SwIfIndex: lo.SwIfIndex}, &nat44_ed.Nat44InterfaceAddDelFeatureReply{})
		benchCall(t, ch, &nat44_ed.Nat44InterfaceAddDelFeature{IsAdd: true, SwIfIndex: lo.SwIfIndex}, &nat44_ed.Nat44InterfaceAddDelFeatureReply{})
		row.OutsideRoleMs = append(row.OutsideRoleMs, ms(time.Since(start)))
	}
	for _, lo := range slices.Backward(los) {
		start := time.Now()
		benchCall(t, ch, &nat44_ed.Nat44InterfaceAddDelFeature{SwIfIndex: lo}, &nat44_ed.Nat44InterfaceAddDelFeatureReply{})
		benchCall(t, ch, &nat44_ed.Nat44InterfaceAddDelFeature{Flags: nat_types.NAT_IS_INSIDE, SwIfIndex: lo}, &nat44_ed.Nat44InterfaceAddDelFeatureReply{})
		row.OutsideRoleRemovalMs = append(row.OutsideRoleRemovalMs, ms(time.Since(start)))
	}
}

func pipeline(t *testing.T, ch api.Channel, reqs []api.Message, reply func() api.Message) {
	t.Helper()
	vppbench.Pipeline(t, ch, benchWindow, reqs, reply)
}

// benchRenderer runs the renderer against a fresh VPP.
func benchRenderer(t *testing.T, bin string, n int, row *benchRow) {
	conn, _ := benchVPP(t, bin, n)
	dp := newBenchDataplane(t, conn)
	ch := benchChannel(t, conn)
	// NAT44-ED's tables are allocated when it is enabled: count them in the
	// empty heap.
	benchEnableNAT(t, ch)
	dp.natEnabled = true
	row.VPPHeapEmptyMB = benchHeapMB(t, ch)
	r, err := nat44.New(dp, nat44.Config{ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	state := benchState(n)
	runtime.GC()
	row.ProcessRSSIdleMB = rssMB(t)
	ctx := context.Background()
	start := time.Now()
	if err := r.Resync(ctx, state); err != nil {
		t.Fatalf("Resync of %d services: %v", n, err)
	}
	d := time.Since(start)
	row.ResyncSeconds, row.ResyncPerSecond = d.Seconds(), float64(n)/d.Seconds()
	if got := countLBMappings(t, ch); got != n {
		t.Fatalf("after Resync VPP holds %d load-balancing mappings, want %d", got, n)
	}

	start = time.Now()
	if err := r.Resync(ctx, state); err != nil {
		t.Fatalf("second Resync: %v", err)
	}
	row.ResyncNoopSeconds = time.Since(start).Seconds()

	changes := make([]float64, 0, benchChanges)
	for c := range benchChanges {
		i := (c * 7919) % n
		s := benchService(i, 1+c/n)
		start := time.Now()
		if err := r.Update(ctx, &service.Changes{Upsert: []*service.Service{s}}); err != nil {
			t.Fatalf("Update of %s: %v", s.ID, err)
		}
		changes = append(changes, ms(time.Since(start)))
	}
	row.ChangeP50Ms, row.ChangeP99Ms, row.ChangeMaxMs = percentile(changes, 50), percentile(changes, 99), slices.Max(changes)

	row.VPPHeapUsedMB = benchHeapMB(t, ch)
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	row.GoHeapMB = float64(m.HeapAlloc) / (1 << 20)
	row.ProcessRSSMB = rssMB(t)
	runtime.KeepAlive(state)
	runtime.KeepAlive(r)
}

func countLBMappings(t *testing.T, ch api.Channel) int {
	t.Helper()
	n := 0
	err := vppapi.Dump(ch, &nat44_ed.Nat44LbStaticMappingDump{},
		func() *nat44_ed.Nat44LbStaticMappingDetails { return &nat44_ed.Nat44LbStaticMappingDetails{} },
		func(*nat44_ed.Nat44LbStaticMappingDetails) { n++ })
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func rssMB(t *testing.T) float64 { return vppbench.RSSMB(t) }

func percentile(v []float64, p int) float64 { return vppbench.Percentile(v, p) }

// benchDataplane is the renderer's Dataplane on a direct GoVPP connection,
// without the driver: channels on the connection, NAT roles set with the
// real messages on a loopback that plays the host interconnect, ACL lists
// set directly. No pods and no kernel: SetPodNATRoles and
// SetServiceNetwork only record what they were asked.
type benchDataplane struct {
	t          *testing.T
	conn       *core.Connection
	host       uint32
	natEnabled bool

	mu       sync.Mutex
	backends []netip.Addr
	network  vpp.ServiceNetwork
}

func newBenchDataplane(t *testing.T, conn *core.Connection) *benchDataplane {
	ch := benchChannel(t, conn)
	lo := &interfaces.CreateLoopbackReply{}
	benchCall(t, ch, &interfaces.CreateLoopback{}, lo)
	benchCall(t, ch, &interfaces.SwInterfaceSetFlags{SwIfIndex: lo.SwIfIndex, Flags: interface_types.IF_STATUS_API_FLAG_ADMIN_UP}, &interfaces.SwInterfaceSetFlagsReply{})
	return &benchDataplane{t: t, conn: conn, host: uint32(lo.SwIfIndex)}
}

func (d *benchDataplane) Channel(ctx context.Context, maxInFlight int) (api.Channel, vpp.NodeInterfaces, error) {
	ch, err := d.conn.NewAPIChannelBuffered(maxInFlight, maxInFlight)
	return ch, vpp.NodeInterfaces{Incarnation: 1, Uplink: vpp.NoInterface, HostInterconnect: d.host, Loopback: vpp.NoInterface}, err
}

func (d *benchDataplane) iface(i vpp.NodeInterface) (uint32, error) {
	if i != vpp.HostInterconnect {
		return 0, fmt.Errorf("bench dataplane: no interface %s", i)
	}
	return d.host, nil
}

func (d *benchDataplane) SetNodeNATRole(ctx context.Context, iface vpp.NodeInterface, role vpp.NATRole) error {
	sw, err := d.iface(iface)
	if err != nil {
		return err
	}
	ch, err := d.conn.NewAPIChannel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if !d.natEnabled {
		if err := ch.SendRequest(&nat44_ed.Nat44EdPluginEnableDisable{Enable: true, Sessions: benchSessions}).ReceiveReply(&nat44_ed.Nat44EdPluginEnableDisableReply{}); err != nil {
			return err
		}
		d.natEnabled = true
	}
	for _, f := range []struct {
		on    bool
		flags nat_types.NatConfigFlags
	}{{role&vpp.NATBackend != 0, nat_types.NAT_IS_INSIDE}, {role&vpp.NATFrontend != 0, 0}} {
		err := ch.SendRequest(&nat44_ed.Nat44InterfaceAddDelFeature{IsAdd: f.on, Flags: f.flags, SwIfIndex: interface_types.InterfaceIndex(sw)}).
			ReceiveReply(&nat44_ed.Nat44InterfaceAddDelFeatureReply{})
		var rv api.VPPApiError
		if err != nil && !(errors.As(err, &rv) && (rv == api.VALUE_EXIST || rv == api.NO_SUCH_ENTRY)) {
			return fmt.Errorf("NAT feature on %s: %w", iface, err)
		}
	}
	return nil
}

func (d *benchDataplane) SetPodNATRoles(ctx context.Context, backends []netip.Addr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.backends = slices.Clone(backends)
	return nil
}

func (d *benchDataplane) SetServiceNetwork(ctx context.Context, net vpp.ServiceNetwork) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.network = net
	return nil
}

func (d *benchDataplane) SetInterfaceACLs(ctx context.Context, inc vpp.Incarnation, iface vpp.NodeInterface, owner vpp.ACLOwner, input []uint32) error {
	sw, err := d.iface(iface)
	if err != nil {
		return err
	}
	ch, err := d.conn.NewAPIChannel()
	if err != nil {
		return err
	}
	defer ch.Close()
	return ch.SendRequest(&acl.ACLInterfaceSetACLList{SwIfIndex: interface_types.InterfaceIndex(sw), Count: uint8(len(input)), NInput: uint8(len(input)), Acls: input}).
		ReceiveReply(&acl.ACLInterfaceSetACLListReply{})
}
