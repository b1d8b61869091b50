package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/gobuild"
	"github.com/vcoil/vcoil/v2/internal/netnstest"
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

	var rows []benchRow
	for _, sc := range []struct {
		name       string
		pods       int
		concurrent bool
	}{
		{"sequential", 200, false},
		{"concurrent", 50, true},
	} {
		for _, v := range variants {
			plugin := v.plugin
			f := newFabric(t)
			var n *node
			var vppProc *vpptest.VPP
			podIf := "veth"
			if v.dataplane == "vpp" {
				podIf = vpptest.PodInterface()
				n, vppProc = newVPPBenchNode(t, f, 10+len(rows), vppBin, podIf)
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
			row := benchRow{Plugin: plugin, Dataplane: v.dataplane, PodInterface: podIf, Family: v.family, Scenario: sc.name, Pods: sc.pods}
			start := time.Now()
			adds := timeEach(t, n, pods, sc.concurrent, func(p *pod) error { return n.add(p) })
			dels := timeEach(t, n, pods, sc.concurrent, n.del)
			row.TotalSeconds = time.Since(start).Seconds()
			row.AddP50, row.AddP99 = percentile(adds, 50), percentile(adds, 99)
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
	fmt.Fprintf(&b, "\n| plugin | dataplane | pod interface | family | scenario | pods | ADD p50 | ADD p99 | DEL p50 | DEL p99 | ADD+DEL p50 | ADD+DEL p99 | total |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.1f s |\n",
			r.Plugin, r.Dataplane, r.PodInterface, r.Family, r.Scenario, r.Pods, r.AddP50, r.AddP99, r.DelP50, r.DelP99, r.AddDelP50, r.AddDelP99, r.TotalSeconds)
	}
	t.Log(b.String())
}

// benchVariant is what one row measures: a plugin on a dataplane
// (linux: the kernel's; vpp: vcoil's VPP dataplane) for an address family.
type benchVariant struct {
	plugin, family, dataplane string
}

type benchRow struct {
	Plugin    string `json:"plugin"`
	Dataplane string `json:"dataplane"`
	// PodInterface is what links a pod to the node: a veth into the
	// kernel (linux), or VPP's af_packet (a veth) or tap interface (vpp).
	PodInterface string  `json:"pod_interface"`
	Family       string  `json:"family"`
	Scenario     string  `json:"scenario"`
	Pods         int     `json:"pods"`
	AddP50       float64 `json:"add_p50_ms"`
	AddP99       float64 `json:"add_p99_ms"`
	DelP50       float64 `json:"del_p50_ms"`
	DelP99       float64 `json:"del_p99_ms"`
	AddDelP50    float64 `json:"add_del_p50_ms"`
	AddDelP99    float64 `json:"add_del_p99_ms"`
	TotalSeconds float64 `json:"total_s"`
}

// newVPPBenchNode starts VPP in a new node's namespace and vcoild on the
// VPP dataplane against it, pods on podIf. The row measures the
// dataplane's wiring of a pod (its interface, routes and neighbours), so
// the service proxy is off: with it, the NAT44 renderer would also give
// every pod its NAT role. No uplink: VPP's default route goes through the
// host interconnect, which the measurement does not use.
func newVPPBenchNode(t *testing.T, f *fabric, index int, bin, podIf string) (*node, *vpptest.VPP) {
	t.Helper()
	v := vpptest.Prepare(t, bin)
	n := newNodeWith(t, f, index, nodeOptions{
		args: []string{"--dataplane=vpp", "--vpp-api-socket", v.APISocket, "--vpp-pod-interface", podIf, "--service-proxy=false"},
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
