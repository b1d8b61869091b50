package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/gobuild"
	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
)

// TestBenchCNI measures ADD and DEL latency of vcoil beside the reference
// plugins ptp + host-local, called the same way (libcni, from inside a node
// namespace, with portmap chained, on pods that are namespaces). The two are
// compared on IPv4 only: ptp waits for IPv6 duplicate address detection to
// settle (about 1.8 s per ADD here), which vcoil does not need for a /128 on
// a point-to-point link. vcoil is measured in dual stack too. When
// VCOIL_VPP_BIN names a VPP binary, vcoil on the VPP dataplane is measured
// in the same run (IPv4, the same scenarios), against a VPP started in the
// node's namespace; without it those rows are skipped, saying so. It runs
// only when VCOIL_BENCH_CNI names the JSON file to write (make bench-cni):
// it is a measurement, not a check.
func TestBenchCNI(t *testing.T) {
	out := os.Getenv("VCOIL_BENCH_CNI")
	if out == "" {
		t.Skip("skipped: set VCOIL_BENCH_CNI to the JSON output file (make bench-cni)")
	}
	netnstest.RequireRoot(t)
	refDir := gobuild.Dir(t,
		"github.com/containernetworking/plugins/plugins/main/ptp",
		"github.com/containernetworking/plugins/plugins/ipam/host-local",
		"github.com/containernetworking/plugins/plugins/meta/portmap")
	ctx := context.Background()
	createPool(t, "bench", 5, "10.120.0.0/16", "fd00:120::/112")
	v4only := &vcoilv2.AddressPool{ObjectMeta: metav1.ObjectMeta{Name: "bench4"},
		Spec: vcoilv2.AddressPoolSpec{BlockSizeBits: 5, Subnets: []vcoilv2.SubnetSet{{IPv4: ptrTo("10.122.0.0/16")}}}}
	if err := env.Client.Create(ctx, v4only); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"bench", "bench4"} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: ns, Annotations: map[string]string{vcoilv2.AnnotationPool: ns},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	defaultPool(t)
	variants := []benchVariant{
		{plugin: "vcoil", family: "ipv4", dataplane: "linux"},
		{plugin: "ptp+host-local", family: "ipv4", dataplane: "linux"},
		{plugin: "vcoil", family: "dual", dataplane: "linux"},
		{plugin: "vcoil", family: "ipv4", dataplane: "linux", noPrefetch: true},
		{plugin: "vcoil", family: "ipv4", dataplane: "linux", policiesOff: true},
	}
	// Not vpptest.Binary: it would skip the whole test, Linux rows too.
	vppBin := os.Getenv(vpptest.BinEnv)
	if vppBin == "" {
		t.Logf("VPP rows skipped: set %s to a VPP 25.10 binary to measure vcoil on the VPP dataplane too", vpptest.BinEnv)
	} else {
		if _, err := os.Stat(vppBin); err != nil {
			t.Fatalf("%s=%s: %v", vpptest.BinEnv, vppBin, err)
		}
		variants = append(variants, benchVariant{plugin: "vcoil", family: "ipv4", dataplane: "vpp"})
	}

	type scenario struct {
		name       string
		pods       int
		concurrent bool
	}
	scenarios := []scenario{{"sequential", 200, false}, {"concurrent", 50, true}}
	type run struct {
		sc scenario
		v  benchVariant
	}
	var runs []run
	for _, sc := range scenarios {
		for _, v := range variants {
			runs = append(runs, run{sc, v})
		}
	}
	// With VCOIL_BENCH_CNI_SERVICES=N (make bench-cni SERVICES=N), VPP rows
	// whose vcoild serves Services with the cnat renderer: with none, then
	// with N (each of one TCP cluster IP and 10 remote endpoints) created
	// between. NAT44 is not measured so: with 10,000 Services each new
	// pod's NAT roles take longer (docs/vpp-services.md), and about the
	// 119th sequential ADD failed when VPP did not answer in time.
	services := 0
	if s := os.Getenv("VCOIL_BENCH_CNI_SERVICES"); s != "" {
		var err error
		if services, err = strconv.Atoi(s); err != nil || services < 0 {
			t.Fatalf("VCOIL_BENCH_CNI_SERVICES=%q: want a number of Services", s)
		}
	}
	if services > 0 && vppBin != "" {
		for _, n := range []int{0, services} {
			for _, sc := range scenarios {
				runs = append(runs, run{sc, benchVariant{plugin: "vcoil", family: "ipv4", dataplane: "vpp", renderer: "cnat", services: n}})
			}
		}
	}
	created := 0
	var rows []benchRow
	for _, r := range runs {
		sc, v := r.sc, r.v
		{
			if v.services > created {
				createBenchServices(t, v.services)
				created = v.services
			}
			plugin := v.plugin
			f := newFabric(t)
			var n *node
			var vppProc *vpptest.VPP
			podIf := "veth"
			if v.dataplane == "vpp" {
				podIf = vpptest.PodInterface()
				n, vppProc = newVPPBenchNode(t, f, 10+len(rows), vppBin, podIf, v.renderer)
				if v.renderer != "" {
					waitRendered(t, n, v.renderer, v.services)
				}
			} else if v.noPrefetch {
				n = newNode(t, f, 10+len(rows), "--block-low-watermark=0")
			} else if v.policiesOff {
				n = newNode(t, f, 10+len(rows), "--network-policies=false", "--egress=false")
			} else {
				n = newNode(t, f, 10+len(rows))
			}
			if plugin != "vcoil" {
				n.cni = libcni.NewCNIConfigWithCacheDir([]string{refDir}, filepath.Join(n.dir, "ref-cache"), nil)
				conf, err := libcni.ConfListFromBytes([]byte(fmt.Sprintf(`{
  "cniVersion": "1.1.0", "name": "ref",
  "plugins": [
    {"type": "ptp", "ipMasq": false, "mtu": 1500,
     "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": "10.121.0.0/16"}]]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]}`, filepath.Join(n.dir, "host-local"))))
				if err != nil {
					t.Fatal(err)
				}
				n.conf = conf
			}
			pods := make([]*pod, sc.pods)
			for i := range pods {
				pods[i] = newPod(t, fmt.Sprintf("b%d-%03d", len(rows), i))
				pods[i].namespace = map[string]string{"ipv4": "bench4", "dual": "bench"}[v.family]
			}
			// The Pod objects exist before the runtime calls CNI, as in a
			// cluster: creating them is not part of ADD's time.
			for _, p := range pods {
				if err := n.ensurePodObject(p); err != nil {
					t.Fatal(err)
				}
			}
			row := benchRow{Plugin: plugin, Dataplane: v.dataplane, PodInterface: podIf, Family: v.family, Scenario: sc.name, Pods: sc.pods,
				Renderer: v.renderer, Services: v.services, NoPrefetch: v.noPrefetch, PoliciesOff: v.policiesOff}
			start := time.Now()
			adds := timeEach(t, n, pods, sc.concurrent, func(p *pod) error { return n.add(p) })
			if plugin == "vcoil" {
				pool := `pool="` + pods[0].namespace + `"`
				waits, ahead := n.sumMetric(t, "vcoil_node_allocation_waits_total", pool), n.sumMetric(t, "vcoil_node_block_prefetches_total", pool, `result="ok"`)
				row.AllocationWaits, row.Prefetches = &waits, &ahead
				// vcoild's own share of the row's ADDs (its node is new).
				sum, _ := strconv.ParseFloat(n.metric(`vcoil_cni_request_duration_seconds_sum{verb="ADD"}`), 64)
				count, _ := strconv.ParseFloat(n.metric(`vcoil_cni_request_duration_seconds_count{verb="ADD"}`), 64)
				if count > 0 {
					mean := sum / count * 1000
					row.VcoildAddMean = &mean
				}
			}
			dels := timeEach(t, n, pods, sc.concurrent, n.del)
			row.TotalSeconds = time.Since(start).Seconds()
			row.AddP50, row.AddP99, row.AddMax = percentile(adds, 50), percentile(adds, 99), slices.Max(adds)
			row.DelP50, row.DelP99 = percentile(dels, 50), percentile(dels, 99)
			sums := make([]float64, len(adds))
			for i := range adds {
				sums[i] = adds[i] + dels[i]
			}
			row.AddDelP50, row.AddDelP99 = percentile(sums, 50), percentile(sums, 99)
			rows = append(rows, row)
			for _, p := range pods {
				p.ns.Remove()
			}
			// vcoild's log of the row, beside the JSON: where the time
			// of a slow ADD went.
			logFile := strings.TrimSuffix(out, ".json") + fmt.Sprintf("-row%d-vcoild.log", len(rows))
			if err := os.WriteFile(logFile, []byte(n.log.String()), 0o644); err != nil {
				t.Error(err)
			}
			if vppProc != nil {
				// Stop VPP, and its vcoild first, so that neither weighs
				// on the rows that follow.
				n.kill()
				vppProc.Kill()
			}
		}
	}
	data, _ := json.MarshalIndent(rows, "", "  ")
	if err := os.WriteFile(out, append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| plugin | dataplane | pod interface | family | Services (renderer) | scenario | pods | ADD p50 | ADD p99 | ADD max | DEL p50 | DEL p99 | ADD+DEL p50 | ADD+DEL p99 | total | vcoild's mean share of an ADD |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		svc := "off"
		if r.Renderer != "" {
			svc = fmt.Sprintf("%d (%s)", r.Services, r.Renderer)
		}
		share := ""
		if r.VcoildAddMean != nil {
			share = fmt.Sprintf("%.1f ms", *r.VcoildAddMean)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %d | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.1f s | %s |\n",
			r.Plugin, r.Dataplane, r.PodInterface, r.Family, svc, r.Scenario, r.Pods, r.AddP50, r.AddP99, r.AddMax, r.DelP50, r.DelP99, r.AddDelP50, r.AddDelP99, r.TotalSeconds, share)
	}
	t.Log(b.String())
}

// benchVariant is what one row measures: a plugin on a dataplane
// (linux: the kernel's; vpp: vcoil's VPP dataplane) for an address family.
type benchVariant struct {
	plugin, family, dataplane string
	// renderer and services: on VPP, the service renderer vcoild runs with
	// (empty: the service proxy is off) and the Services the cluster holds.
	renderer string
	services int
	// noPrefetch runs vcoild with --block-low-watermark=0: blocks are
	// asked for only when the pool is full (the reference for the
	// watermark's effect, in the same run).
	noPrefetch bool
	// policiesOff runs vcoild without its policies and egress side: what
	// they cost an ADD (the pod's rules put in, its PodEndpoint
	// published, the informer events that follow), in the same run.
	policiesOff bool
}

type benchRow struct {
	Plugin    string `json:"plugin"`
	Dataplane string `json:"dataplane"`
	// PodInterface is what links a pod to the node: a veth into the
	// kernel (linux), or VPP's af_packet (a veth) or tap interface (vpp).
	PodInterface string `json:"pod_interface"`
	// Renderer and Services: the VPP node's service renderer ("" when the
	// service proxy is off) and the Services it rendered before the ADDs.
	Renderer string  `json:"service_renderer,omitempty"`
	Services int     `json:"services"`
	Family   string  `json:"family"`
	Scenario string  `json:"scenario"`
	Pods     int     `json:"pods"`
	AddP50   float64 `json:"add_p50_ms"`
	AddP99   float64 `json:"add_p99_ms"`
	// AddMax is the slowest ADD: one ADD that waits long (for the node's
	// first block, say) is above p99 of 200.
	AddMax       float64 `json:"add_max_ms"`
	DelP50       float64 `json:"del_p50_ms"`
	DelP99       float64 `json:"del_p99_ms"`
	AddDelP50    float64 `json:"add_del_p50_ms"`
	AddDelP99    float64 `json:"add_del_p99_ms"`
	TotalSeconds float64 `json:"total_s"`
	// AllocationWaits are the ADDs that found their pool's blocks full
	// and waited for vcoil-controller (vcoild's
	// vcoil_node_allocation_waits_total, both kinds), and Prefetches the
	// blocks vcoild asked for ahead; vcoil rows only.
	AllocationWaits *int `json:"allocation_waits,omitempty"`
	// VcoildAddMean is the mean time vcoild took to answer the row's ADDs
	// (its vcoil_cni_request_duration_seconds); the rest of an ADD is the
	// plugin binaries' start and libcni's side. vcoil rows only.
	VcoildAddMean *float64 `json:"vcoild_add_mean_ms,omitempty"`
	// NoPrefetch: vcoild ran with --block-low-watermark=0.
	NoPrefetch bool `json:"no_prefetch,omitempty"`
	// PoliciesOff: vcoild ran with --network-policies=false --egress=false.
	PoliciesOff bool `json:"policies_off,omitempty"`
	Prefetches  *int `json:"block_prefetches,omitempty"`
}

// sumMetric sums the samples of a counter of vcoild's /metrics whose
// labels hold every one of labels.
func (n *node) sumMetric(t *testing.T, name string, labels ...string) int {
	t.Helper()
	_, body := testenv.HTTPGet(n.metrics)
	total := 0.0
	for _, l := range strings.Split(body, "\n") {
		if !strings.HasPrefix(l, name+"{") {
			continue
		}
		ok := true
		for _, x := range labels {
			ok = ok && strings.Contains(l, x)
		}
		if !ok {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v); err != nil {
			t.Fatalf("metric line %q: %v", l, err)
		}
		total += v
	}
	return int(total)
}

// newVPPBenchNode starts VPP in a new node's namespace and vcoild on the
// VPP dataplane against it, pods on podIf. The row measures the
// dataplane's wiring of a pod (its interface, routes and neighbours), so
// the service proxy is off, unless renderer names the VPP service
// renderer of rows that measure ADD with Services. No uplink: VPP's default route goes through the
// host interconnect, which the measurement does not use.
func newVPPBenchNode(t *testing.T, f *fabric, index int, bin, podIf, renderer string) (*node, *vpptest.VPP) {
	t.Helper()
	v := vpptest.Prepare(t, bin)
	args := []string{"--dataplane=vpp", "--vpp-api-socket", v.APISocket, "--vpp-pod-interface", podIf, "--service-proxy=false"}
	if renderer != "" {
		args = []string{"--dataplane=vpp", "--vpp-api-socket", v.APISocket, "--vpp-pod-interface", podIf,
			"--vpp-service-renderer", renderer, "--service-cidr", benchServiceCIDR}
	}
	n := newNodeWith(t, f, index, nodeOptions{
		args: args,
		beforeStart: func(n *node) {
			if err := v.Launch(n.ns.Path()); err != nil {
				t.Fatal(err)
			}
		},
	})
	return n, v
}

// timeEach runs op for every pod, one after another or all at once, and
// returns each call's duration in milliseconds, by pod.
func timeEach(t *testing.T, n *node, pods []*pod, concurrent bool, op func(*pod) error) []float64 {
	t.Helper()
	ms := make([]float64, len(pods))
	run := func(i int) error {
		start := time.Now()
		err := op(pods[i])
		ms[i] = float64(time.Since(start).Microseconds()) / 1000
		return err
	}
	if concurrent {
		for i, err := range parallel(len(pods), run) {
			if err != nil {
				t.Fatalf("%s: %v", pods[i].name, err)
			}
		}
		return ms
	}
	for i := range pods {
		if err := run(i); err != nil {
			t.Fatalf("%s: %v", pods[i].name, err)
		}
	}
	return ms
}

func percentile(v []float64, p int) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[i]
}

func ptrTo(s string) *string { return &s }

// benchServiceCIDR is the apiserver's service range when the benchmark
// creates Services (TestMain).
const benchServiceCIDR = "10.0.0.0/16"

// createBenchServices makes the cluster hold n Services in the namespace
// bench-svc (those it has are kept), each a selector-less ClusterIP with
// one TCP port and an EndpointSlice of 10 endpoints on another node, many
// requests at once.
func createBenchServices(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench-svc"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	start := time.Now()
	work := make(chan int)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := createBenchService(ctx, i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range n {
		select {
		case work <- i:
		case err := <-errs:
			close(work)
			wg.Wait()
			t.Fatal(err)
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	t.Logf("%d Services and EndpointSlices created in %s", n, time.Since(start).Round(time.Millisecond))
}

func createBenchService(ctx context.Context, i int) error {
	name := fmt.Sprintf("svc-%05d", i)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "bench-svc", Name: name},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}}
	if err := env.Client.Create(ctx, svc); err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return fmt.Errorf("Service %s: %w", name, err)
	}
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "bench-svc", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptrTo("http"), Protocol: new(corev1.ProtocolTCP), Port: new(int32(8080))}},
	}
	for b := range 10 {
		x := i*10 + b
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses: []string{fmt.Sprintf("10.%d.%d.%d", 128+x>>16, (x>>8)&255, x&255)}, NodeName: ptrTo("elsewhere"),
		})
	}
	if err := env.Client.Create(ctx, es); err != nil {
		return fmt.Errorf("EndpointSlice %s: %w", name, err)
	}
	return nil
}

// waitRendered waits until n's service renderer holds at least services
// translations (cnat) or load-balancing mappings (nat44) of endpoints.
func waitRendered(t *testing.T, n *node, renderer string, services int) {
	t.Helper()
	metric := `vcoil_vpp_cnat_translations{kind="backends"}`
	if renderer == "nat44" {
		metric = `vcoil_vpp_services_mappings{kind="lb"}`
	}
	start := time.Now()
	deadline := start.Add(10 * time.Minute)
	for {
		v, _ := strconv.ParseFloat(n.metric(metric), 64)
		if int(v) >= services {
			t.Logf("%s rendered %d Services in %s (%s %v)", renderer, services, time.Since(start).Round(time.Millisecond), metric, v)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s is %v after %s, want %d", renderer, metric, v, time.Since(start), services)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
