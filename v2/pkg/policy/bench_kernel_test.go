package policy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	pcache "github.com/vcoil/vcoil/v2/pkg/policy/cache"
	"github.com/vcoil/vcoil/v2/pkg/policy/configurator"
	"github.com/vcoil/vcoil/v2/pkg/policy/processor"
	polnft "github.com/vcoil/vcoil/v2/pkg/policy/renderer/nftables"
)

// kernelBenchRow is one result of TestBenchPolicyKernel, as make
// bench-policy writes it.
type kernelBenchRow struct {
	Renderer         string  `json:"renderer"`
	Pods             int     `json:"pods"`
	Policies         int     `json:"policies"`
	FullSeconds      float64 `json:"full_seconds"`
	ChangeP50Ms      float64 `json:"label_change_p50_ms"`
	ChangeP99Ms      float64 `json:"label_change_p99_ms"`
	Changes          int     `json:"label_changes"`
	Chains           int     `json:"chains"`
	Sets             int     `json:"sets"`
	Elements         int     `json:"elements"`
	HeapInuseMB      float64 `json:"heap_inuse_mb"`
	ProcessRSSMB     float64 `json:"process_rss_mb"`
	RendererRSSNote  string  `json:"rss_note"`
	TargetFullSecond float64 `json:"target_full_seconds"`
	TargetChangeMs   float64 `json:"target_change_ms"`
}

// TestBenchPolicyKernel is make bench-policy: the benchmark cluster (1,000
// local pods, 500 policies) through the whole stack into the nftables
// renderer in a test namespace, from nothing to rules in the kernel, then
// one pod's label changing back and forth, each change timed until its
// nft transaction returned. It runs only when VCOIL_BENCH_POLICY names the
// JSON file to write (as root).
func TestBenchPolicyKernel(t *testing.T) {
	out := os.Getenv("VCOIL_BENCH_POLICY")
	if out == "" {
		t.Skip("VCOIL_BENCH_POLICY is not set: run make bench-policy")
	}
	netnstest.RequireRoot(t)
	n := netnstest.New(t, "polbench")
	c := benchCluster()
	ctx := context.Background()

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r, err := polnft.New(polnft.Config{Netns: n.Path(), Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	conf, err := configurator.New(configurator.Config{NATLoopback: c.NATLoopback, NodeAddresses: c.NodeAddresses})
	if err != nil {
		t.Fatal(err)
	}
	conf.Register("nftables", r)
	pc := pcache.New()
	pc.Watch(processor.New(c.Node, pc, conf, logr.Discard()))
	start := time.Now()
	if err := pc.Replace(ctx, c.Pods, c.Namespaces, c.Policies); err != nil {
		t.Fatal(err)
	}
	row := kernelBenchRow{Renderer: "nftables", Pods: len(c.Pods), Policies: len(c.Policies),
		FullSeconds: time.Since(start).Seconds(), TargetFullSecond: 1, TargetChangeMs: 10}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	row.HeapInuseMB = float64(after.HeapInuse-min(after.HeapInuse, before.HeapInuse)) / (1 << 20)
	row.ProcessRSSMB = rssMB(t)
	row.RendererRSSNote = "heap_inuse_mb: the Go heap the stack holds after the full render (cache, processor, configurator, renderer); process_rss_mb: the whole test process, the cluster objects included"

	orig := c.Pods[120]
	other := orig.DeepCopy()
	other.Labels = map[string]string{"app": "app5", "tier": "db"}
	versions := []*corev1.Pod{other, orig}
	var ms []float64
	for i := range 100 {
		t0 := time.Now()
		if err := pc.SetPod(ctx, versions[i%2]); err != nil {
			t.Fatal(err)
		}
		ms = append(ms, float64(time.Since(t0).Microseconds())/1000)
	}
	slices.Sort(ms)
	row.Changes = len(ms)
	row.ChangeP50Ms, row.ChangeP99Ms = ms[len(ms)/2], ms[len(ms)*99/100]

	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(n.Exec("nft", "-j", "list", "table", "inet", "vcoil-policy")), &doc); err != nil {
		t.Fatal(err)
	}
	for _, o := range doc.Nftables {
		if _, ok := o["chain"]; ok {
			row.Chains++
		}
		for _, kind := range []string{"set", "map"} {
			if raw, ok := o[kind]; ok {
				row.Sets++
				var s struct{ Elem []json.RawMessage }
				if err := json.Unmarshal(raw, &s); err != nil {
					t.Fatal(err)
				}
				row.Elements += len(s.Elem)
			}
		}
	}
	t.Logf("| renderer | pods | policies | full render to the kernel (target < 1 s) | label change p50 / p99 (target < 10 ms) | chains | sets and maps | elements | Go heap of the stack | test process RSS |")
	t.Logf("| %s | %d | %d | %.3f s | %.2f / %.2f ms | %d | %d | %d | %.0f MB | %.0f MB |", row.Renderer, row.Pods, row.Policies,
		row.FullSeconds, row.ChangeP50Ms, row.ChangeP99Ms, row.Chains, row.Sets, row.Elements, row.HeapInuseMB, row.ProcessRSSMB)
	data, err := json.MarshalIndent([]kernelBenchRow{row}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// rssMB reads the process's resident set size.
func rssMB(t *testing.T) float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(err)
			}
			return float64(kb) / 1024
		}
	}
	t.Fatal(fmt.Errorf("no VmRSS in /proc/self/status"))
	return 0
}
