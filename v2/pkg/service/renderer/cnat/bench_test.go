package cnat_test

import (
	"context"
	"encoding/json"
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
	"go.fd.io/govpp/binapi/cnat"
	"go.fd.io/govpp/binapi/feature"
	interfaces "go.fd.io/govpp/binapi/interface"
	"go.fd.io/govpp/binapi/interface_types"
	"go.fd.io/govpp/binapi/ip_types"
	"go.fd.io/govpp/core"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/vppbench"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
	"github.com/vcoil/vcoil/v2/pkg/service"
	cnatr "github.com/vcoil/vcoil/v2/pkg/service/renderer/cnat"
)

// The benchmark's shape, the NAT44 renderer's: every service has one
// cluster IP with one TCP port and benchBackends remote endpoints, hence
// one translation of benchBackends paths.
const (
	benchBackends = 10
	benchChanges  = 200
	benchWindow   = cnatr.DefaultMaxInFlight
)

// TestBenchVPPCnat measures the cnat renderer against a real VPP
// (VCOIL_VPP_BIN) in a namespace of its own: for N services, the time of a
// Resync from an empty VPP, of a second Resync that finds everything in
// place, and of one backend change through Update (benchChanges of them:
// p50, p99); VPP's main heap and the process's memory. As the reference,
// a fresh VPP gets the same translations from a bare pipelined GoVPP loop
// ("raw VPP"), a backend change as one update, and the cost of what a new
// pod gets from cnat (its pod bit and four features) while the
// translations exist. It runs only when VCOIL_BENCH_VPP_CNAT names the JSON
// file to write (make bench-vpp-services); VCOIL_BENCH_VPP_SERVICES_SIZES
// overrides the sizes ("1000,10000").
func TestBenchVPPCnat(t *testing.T) {
	out := os.Getenv("VCOIL_BENCH_VPP_CNAT")
	if out == "" {
		t.Skip("skipped: set VCOIL_BENCH_VPP_CNAT to the JSON output file (make bench-vpp-services)")
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
	report := benchReport{Backends: benchBackends, Window: benchWindow, Changes: benchChanges}
	for _, n := range sizes {
		row := benchRow{Services: n}
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
	VPP      string     `json:"vpp"`
	Backends int        `json:"backends_per_service"`
	Window   int        `json:"requests_in_flight"`
	Changes  int        `json:"backend_changes"`
	Rows     []benchRow `json:"rows"`
}

type benchRow struct {
	Services int `json:"services"`

	RawSeconds     float64 `json:"raw_s"`
	RawPerSecond   float64 `json:"raw_translations_per_s"`
	RawChangeP50Ms float64 `json:"raw_change_p50_ms"`
	RawChangeP99Ms float64 `json:"raw_change_p99_ms"`
	// PodMs: what a new pod gets from cnat (its bit in the pod table, the
	// four input and output features) while the translations exist, for
	// three interfaces in turn; PodRemovalMs: taking it away.
	PodMs        []float64 `json:"pod_ms"`
	PodRemovalMs []float64 `json:"pod_removal_ms"`

	ResyncSeconds     float64 `json:"resync_s"`
	ResyncPerSecond   float64 `json:"resync_translations_per_s"`
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
	fmt.Fprintf(&b, "VPP %s, cnat, %d backends per service, %d requests in flight\n\n", r.VPP, r.Backends, r.Window)
	b.WriteString("| services | raw VPP | Resync | Resync, nothing to do | one change p50 / p99 (raw VPP) | one more pod's cnat set-up (removal) | VPP heap used (empty) | Go heap / RSS (before) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, w := range r.Rows {
		fmt.Fprintf(&b, "| %d | %.3f s | %.3f s | %.3f s | %.2f / %.2f ms (%.2f / %.2f ms) | %s ms (%s ms) | %.0f MB (%.0f MB) | %.0f MB / %.0f MB (%.0f MB) |\n",
			w.Services, w.RawSeconds, w.ResyncSeconds, w.ResyncNoopSeconds,
			w.ChangeP50Ms, w.ChangeP99Ms, w.RawChangeP50Ms, w.RawChangeP99Ms, joinMs(w.PodMs), joinMs(w.PodRemovalMs),
			w.VPPHeapUsedMB, w.VPPHeapEmptyMB, w.GoHeapMB, w.ProcessRSSMB, w.ProcessRSSIdleMB)
	}
	return b.String()
}

func joinMs(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strings.Join(s, ", ")
}

func benchClusterIP(i int) netip.Addr { return vppbench.AddrPlus(netip.MustParseAddr("10.96.0.1"), i) }

func benchBackend(i, b int) netip.Addr {
	return vppbench.AddrPlus(netip.MustParseAddr("10.128.0.0"), i*benchBackends+b)
}

// benchService is service i whose backends are numbered from first: a
// backend change moves first by one, which replaces one endpoint.
func benchService(i, first int) *service.Service {
	eps := make([]service.Endpoint, 0, benchBackends)
	for b := first; b < first+benchBackends; b++ {
		a := benchBackend(i, b)
		if b >= benchBackends {
			a = vppbench.AddrPlus(netip.MustParseAddr("10.127.0.0"), i*8+b)
		}
		eps = append(eps, service.Endpoint{Addr: a, Port: 8080, NodeName: "other", Ready: true, Serving: true})
	}
	slices.SortFunc(eps, func(a, b service.Endpoint) int { return a.Addr.Compare(b.Addr) })
	return &service.Service{
		ID:         service.ID{Namespace: "bench", Name: fmt.Sprintf("svc-%d", i)},
		ClusterIPs: []netip.Addr{benchClusterIP(i)},
		Ports:      []service.Port{{Name: "http", Protocol: service.TCP, Port: 80, Endpoints: eps, Cluster: eps, HasEndpoints: true}},
	}
}

func endpoint(a netip.Addr, port uint16) cnat.CnatEndpoint {
	addr := ip_types.NewAddress(a.AsSlice())
	return cnat.CnatEndpoint{Addr: addr, SwIfIndex: interface_types.InterfaceIndex(vpp.NoInterface), IfAf: addr.Af, Port: port}
}

// rawTranslation is service i's translation, its first backend replaced by
// alt when valid.
func rawTranslation(i int, alt netip.Addr) *cnat.CnatTranslationUpdate {
	tr := cnat.CnatTranslation{Vip: endpoint(benchClusterIP(i), 80), IPProto: ip_types.IP_API_PROTO_TCP}
	for b := range benchBackends {
		a := benchBackend(i, b)
		if b == 0 && alt.IsValid() {
			a = alt
		}
		tr.Paths = append(tr.Paths, cnat.CnatEndpointTuple{DstEp: endpoint(a, 8080), SrcEp: cnat.CnatEndpoint{SwIfIndex: interface_types.InterfaceIndex(vpp.NoInterface), IfAf: ip_types.ADDRESS_IP4}})
	}
	tr.NPaths = uint32(len(tr.Paths))
	return &cnat.CnatTranslationUpdate{Translation: tr}
}

// benchRaw programs n translations into a fresh VPP with a bare loop of
// pipelined requests, then times single backend changes and a new pod's
// cnat set-up.
func benchRaw(t *testing.T, bin string, n int, row *benchRow) {
	conn, _ := vppbench.StartVPP(t, bin, n)
	ch := vppbench.Channel(t, conn, benchWindow)
	row.version = vppbench.Version(t, ch)
	reqs := make([]api.Message, n)
	for i := range n {
		reqs[i] = rawTranslation(i, netip.Addr{})
	}
	start := time.Now()
	vppbench.Pipeline(t, ch, benchWindow, reqs, func() api.Message { return &cnat.CnatTranslationUpdateReply{} })
	d := time.Since(start)
	row.RawSeconds, row.RawPerSecond = d.Seconds(), float64(n)/d.Seconds()

	changes := make([]float64, 0, benchChanges)
	for c := range benchChanges {
		i := (c * 7919) % n
		start := time.Now()
		vppbench.Call(t, ch, rawTranslation(i, vppbench.AddrPlus(netip.MustParseAddr("10.126.0.0"), c)), &cnat.CnatTranslationUpdateReply{})
		changes = append(changes, vppbench.Ms(time.Since(start)))
		vppbench.Call(t, ch, rawTranslation(i, netip.Addr{}), &cnat.CnatTranslationUpdateReply{})
	}
	row.RawChangeP50Ms, row.RawChangeP99Ms = vppbench.Percentile(changes, 50), vppbench.Percentile(changes, 99)

	// What the driver gives each new pod with the cnat renderer, on
	// loopbacks, and takes away at its DEL.
	podSetUp := func(sw interface_types.InterfaceIndex, on bool) {
		req := &cnat.CnatSnatPolicyAddDelIf{SwIfIndex: sw, Table: cnat.CNAT_POLICY_POD}
		if on {
			req.IsAdd = 1
		}
		vppbench.Call(t, ch, req, &cnat.CnatSnatPolicyAddDelIfReply{})
		for _, f := range [][2]string{{"ip4-unicast", "cnat-input-ip4"}, {"ip4-output", "cnat-output-ip4"}, {"ip6-unicast", "cnat-input-ip6"}, {"ip6-output", "cnat-output-ip6"}} {
			vppbench.Call(t, ch, &feature.FeatureEnableDisable{SwIfIndex: sw, Enable: on, ArcName: f[0], FeatureName: f[1]}, &feature.FeatureEnableDisableReply{})
		}
	}
	var los []interface_types.InterfaceIndex
	for range 3 {
		lo := &interfaces.CreateLoopbackReply{}
		vppbench.Call(t, ch, &interfaces.CreateLoopback{}, lo)
		los = append(los, lo.SwIfIndex)
		start := time.Now()
		podSetUp(lo.SwIfIndex, true)
		row.PodMs = append(row.PodMs, vppbench.Ms(time.Since(start)))
	}
	for _, lo := range slices.Backward(los) {
		start := time.Now()
		podSetUp(lo, false)
		row.PodRemovalMs = append(row.PodRemovalMs, vppbench.Ms(time.Since(start)))
	}
}

// benchRenderer runs the renderer against a fresh VPP.
func benchRenderer(t *testing.T, bin string, n int, row *benchRow) {
	conn, _ := vppbench.StartVPP(t, bin, n)
	ch := vppbench.Channel(t, conn, benchWindow)
	row.VPPHeapEmptyMB = vppbench.HeapMB(t, ch)
	r, err := cnatr.New(&benchDataplane{conn: conn}, cnatr.Config{ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	state := &service.State{
		Node:     service.Node{Name: "bench", NATLoopback: []netip.Addr{netip.MustParseAddr("10.1.0.255")}},
		Services: make(map[service.ID]*service.Service, n),
	}
	for i := range n {
		s := benchService(i, 0)
		state.Services[s.ID] = s
	}
	runtime.GC()
	row.ProcessRSSIdleMB = vppbench.RSSMB(t)
	ctx := context.Background()
	start := time.Now()
	if err := r.Resync(ctx, state); err != nil {
		t.Fatalf("Resync of %d services: %v", n, err)
	}
	d := time.Since(start)
	row.ResyncSeconds, row.ResyncPerSecond = d.Seconds(), float64(n)/d.Seconds()
	if got := countTranslations(t, ch); got != n+1 {
		t.Fatalf("after Resync VPP holds %d translations, want %d and the marker", got, n)
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
		changes = append(changes, vppbench.Ms(time.Since(start)))
	}
	row.ChangeP50Ms, row.ChangeP99Ms, row.ChangeMaxMs = vppbench.Percentile(changes, 50), vppbench.Percentile(changes, 99), slices.Max(changes)

	row.VPPHeapUsedMB = vppbench.HeapMB(t, ch)
	runtime.GC()
	debug.FreeOSMemory()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	row.GoHeapMB = float64(m.HeapAlloc) / (1 << 20)
	row.ProcessRSSMB = vppbench.RSSMB(t)
	runtime.KeepAlive(state)
	runtime.KeepAlive(r)
}

func countTranslations(t *testing.T, ch api.Channel) int {
	t.Helper()
	n := 0
	err := vppapi.Dump(ch, &cnat.CnatTranslationDump{}, func() *cnat.CnatTranslationDetails { return &cnat.CnatTranslationDetails{} },
		func(*cnat.CnatTranslationDetails) { n++ })
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// benchDataplane is the renderer's Dataplane on a direct GoVPP
// connection, without the driver: channels on the connection; no uplink or
// host interconnect, no pods and no kernel, so the service network, the
// pods' cnat set-up and the ACL lists are only recorded.
type benchDataplane struct {
	conn *core.Connection

	mu      sync.Mutex
	network vpp.ServiceNetwork
	snat    vpp.CnatSNAT
}

func (d *benchDataplane) Channel(ctx context.Context, maxInFlight int) (api.Channel, vpp.NodeInterfaces, error) {
	ch, err := d.conn.NewAPIChannelBuffered(maxInFlight, maxInFlight)
	return ch, vpp.NodeInterfaces{Incarnation: 1, Uplink: vpp.NoInterface, HostInterconnect: vpp.NoInterface, Loopback: vpp.NoInterface}, err
}

func (d *benchDataplane) SetServiceNetwork(ctx context.Context, net vpp.ServiceNetwork) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.network = net
	return nil
}

func (d *benchDataplane) SetCnatPods(ctx context.Context, snat vpp.CnatSNAT) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.snat = snat
	return nil
}

func (d *benchDataplane) SetInterfaceACLs(context.Context, vpp.Incarnation, vpp.NodeInterface, vpp.ACLOwner, []uint32) error {
	return nil
}
