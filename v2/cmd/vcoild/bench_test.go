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
)

// TestBenchCNI measures ADD and DEL latency of vcoil beside the reference
// plugins ptp + host-local, called the same way (libcni, from inside a node
// namespace, with portmap chained, on pods that are namespaces). The two are
// compared on IPv4 only: ptp waits for IPv6 duplicate address detection to
// settle (about 1.8 s per ADD here), which vcoil does not need for a /128 on
// a point-to-point link. vcoil is measured in dual stack too. It runs only
// when VCOIL_BENCH_CNI names the JSON file to write (make bench-cni): it is a
// measurement, not a check.
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

	var rows []benchRow
	for _, sc := range []struct {
		name       string
		pods       int
		concurrent bool
	}{
		{"sequential", 200, false},
		{"concurrent", 50, true},
	} {
		for _, v := range []struct{ plugin, family string }{
			{"vcoil", "ipv4"}, {"ptp+host-local", "ipv4"}, {"vcoil", "dual"},
		} {
			plugin := v.plugin
			f := newFabric(t)
			n := newNode(t, f, 10+len(rows))
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
			row := benchRow{Plugin: plugin, Family: v.family, Scenario: sc.name, Pods: sc.pods}
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
		}
	}
	data, _ := json.MarshalIndent(rows, "", "  ")
	if err := os.WriteFile(out, append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| plugin | family | scenario | pods | ADD p50 | ADD p99 | DEL p50 | DEL p99 | ADD+DEL p50 | ADD+DEL p99 | total |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.1f s |\n",
			r.Plugin, r.Family, r.Scenario, r.Pods, r.AddP50, r.AddP99, r.DelP50, r.DelP99, r.AddDelP50, r.AddDelP99, r.TotalSeconds)
	}
	t.Log(b.String())
}

type benchRow struct {
	Plugin       string  `json:"plugin"`
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
