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

	vppacl "go.fd.io/govpp/binapi/acl"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/policyoracle"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
	pcache "github.com/vcoil/vcoil/v2/pkg/policy/cache"
	"github.com/vcoil/vcoil/v2/pkg/policy/configurator"
	"github.com/vcoil/vcoil/v2/pkg/policy/processor"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer/acl"
	polnft "github.com/vcoil/vcoil/v2/pkg/policy/renderer/nftables"
)

// kernelBenchRow is one result of TestBenchPolicyKernel, as make
// bench-policy writes it.
type kernelBenchRow struct {
	Renderer         string  `json:"renderer"`
	Pods             int     `json:"pods"`
	Policies         int     `json:"policies"`
	ClusterPolicies  int     `json:"cluster_network_policies"`
	FullSeconds      float64 `json:"full_seconds"`
	ChangeP50Ms      float64 `json:"label_change_p50_ms"`
	ChangeP99Ms      float64 `json:"label_change_p99_ms"`
	Changes          int     `json:"label_changes"`
	Chains           int     `json:"chains,omitempty"`
	Sets             int     `json:"sets,omitempty"`
	Elements         int     `json:"elements,omitempty"`
	ACLs             int     `json:"acls,omitempty"`
	ACLRules         int     `json:"acl_rules,omitempty"`
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
	for _, tiers := range []bool{false, true} {
		benchKernel(t, out, tiers)
	}
}

// benchKernel is one row of TestBenchPolicyKernel: the benchmark cluster,
// with its 100 ClusterNetworkPolicies when tiers is set.
func benchKernel(t *testing.T, out string, tiers bool) {
	n := netnstest.New(t, "polbench")
	r, err := polnft.New(polnft.Config{Netns: n.Path(), PodIfPrefix: "vcoil", Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	name, c := "nftables", benchCluster()
	if tiers {
		name, c = "nftables+cnp", benchClusterWithTiers()
	}
	row := benchFullRender(t, name, c, r)
	row.RendererRSSNote = "heap_inuse_mb: the Go heap the stack holds after the full render (cache, processor, configurator, renderer); process_rss_mb: the whole test process, the cluster objects included"

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
	t.Logf("| renderer | pods | policies | cluster policies | full render to the kernel (target < 1 s) | label change p50 / p99 (target < 10 ms) | chains | sets and maps | elements | Go heap of the stack | test process RSS |")
	t.Logf("| %s | %d | %d | %d | %.3f s | %.2f / %.2f ms | %d | %d | %d | %.0f MB | %.0f MB |", row.Renderer, row.Pods, row.Policies, row.ClusterPolicies,
		row.FullSeconds, row.ChangeP50Ms, row.ChangeP99Ms, row.Chains, row.Sets, row.Elements, row.HeapInuseMB, row.ProcessRSSMB)
	writeBenchRow(t, out, row)
}

// benchFullRender builds the benchmark's cluster and the stack into r, and
// times the full render (the cache's Replace, until r returned); then the
// label changes. The Go heap is what the stack holds after the full render
// (the cluster's objects are made before the first measure).
func benchFullRender(t *testing.T, name string, c *policyoracle.Cluster, r renderer.Renderer) kernelBenchRow {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	conf, err := configurator.New(configurator.Config{NATLoopback: c.NATLoopback, NodeAddresses: c.NodeAddresses})
	if err != nil {
		t.Fatal(err)
	}
	conf.Register(name, r)
	pc := pcache.New()
	pc.Watch(processor.New(c.Node, pc, conf, logr.Discard()))
	start := time.Now()
	all := pcache.Contents{Pods: c.Pods, Namespaces: c.Namespaces, Policies: c.Policies, ClusterPolicies: c.ClusterPolicies}
	if err := pc.ReplaceAll(context.Background(), all); err != nil {
		t.Fatal(err)
	}
	row := kernelBenchRow{Renderer: name, Pods: len(c.Pods), Policies: len(c.Policies), ClusterPolicies: len(c.ClusterPolicies),
		FullSeconds: time.Since(start).Seconds(), TargetFullSecond: 1, TargetChangeMs: 10}
	if strings.HasPrefix(name, "vpp") {
		row.TargetChangeMs = 20
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	row.HeapInuseMB = float64(after.HeapInuse-min(after.HeapInuse, before.HeapInuse)) / (1 << 20)
	row.ProcessRSSMB = rssMB(t)
	labelChanges(t, pc, c, &row)
	return row
}

// labelChanges times one pod's label changing back and forth 100 times,
// each until its transaction returned; past 2 minutes it stops after at
// least 10 changes (the row says how many).
func labelChanges(t *testing.T, pc *pcache.Cache, c *policyoracle.Cluster, row *kernelBenchRow) {
	t.Helper()
	orig := c.Pods[120]
	other := orig.DeepCopy()
	other.Labels = map[string]string{"app": "app5", "tier": "db"}
	versions := []*corev1.Pod{other, orig}
	var ms []float64
	start := time.Now()
	for i := range 100 {
		if i >= 10 && time.Since(start) > 2*time.Minute {
			break
		}
		t0 := time.Now()
		if err := pc.SetPod(context.Background(), versions[i%2]); err != nil {
			t.Fatal(err)
		}
		ms = append(ms, float64(time.Since(t0).Microseconds())/1000)
	}
	slices.Sort(ms)
	row.Changes = len(ms)
	row.ChangeP50Ms, row.ChangeP99Ms = ms[len(ms)/2], ms[len(ms)*99/100]
}

// writeBenchRow adds row to the JSON list in file out, replacing a row of
// the same renderer.
func writeBenchRow(t *testing.T, out string, row kernelBenchRow) {
	t.Helper()
	var rows []kernelBenchRow
	if data, err := os.ReadFile(out); err == nil {
		_ = json.Unmarshal(data, &rows)
	}
	rows = slices.DeleteFunc(rows, func(r kernelBenchRow) bool { return r.Renderer == row.Renderer })
	rows = append(rows, row)
	data, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestBenchPolicyVPP is make bench-policy's VPP row (VCOIL_VPP_BIN set):
// the same cluster through the whole stack into the ACL renderer on a real
// VPP, from nothing to ACLs in VPP, then the same label changes. The pods
// are not wired into VPP (a thousand af_packet interfaces would not fit
// this machine): their ACL lists wait in the dataplane, so this measures
// the tables, the ACLs VPP makes and their batches, not the interfaces'
// lists.
func TestBenchPolicyVPP(t *testing.T) {
	out := os.Getenv("VCOIL_BENCH_POLICY")
	if out == "" {
		t.Skip("VCOIL_BENCH_POLICY is not set: run make bench-policy")
	}
	netnstest.RequireRoot(t)
	bin := vpptest.Binary(t)
	for _, tiers := range []bool{false, true} {
		benchVPP(t, out, bin, tiers)
	}
}

// benchVPP is one row of TestBenchPolicyVPP, on a VPP of its own.
func benchVPP(t *testing.T, out, bin string, tiers bool) {
	node := netnstest.New(t, "polbenchvpp")
	// The tables of 100 ClusterNetworkPolicies hold a million ACL rules
	// (docs/policy.md): more than the default heap and stats segment (a
	// counter per rule) hold.
	opts := vpptest.Options{}
	if tiers {
		opts = vpptest.Options{MainHeapSize: "6G", StatsegSize: "1G"}
	}
	v := vpptest.StartWith(t, bin, node.Path(), opts)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d, err := vpp.New(vpp.Config{APISocket: v.APISocket, NodeNetns: node.Path(), PodInterface: vpp.InterfaceType(vpptest.PodInterface()),
		RequestTimeout: 30 * time.Second, ReadyWait: 30 * time.Second}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Init(ctx); err != nil {
		t.Fatal(err)
	}
	// The ClusterNetworkPolicy rows need far more rules than the default
	// budget; VPP is started with the memory they take (above).
	r, err := acl.New(d, acl.Config{MaxRules: 4_000_000}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	name, c := "vpp-acl", benchCluster()
	if tiers {
		name, c = "vpp-acl+cnp", benchClusterWithTiers()
	}
	row := benchFullRender(t, name, c, r)
	row.RendererRSSNote = "the pods are not wired into VPP: their ACL lists wait in the dataplane; heap_inuse_mb: the Go heap the stack holds after the full render"
	ch, _, err := d.Channel(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if err := vppapi.Dump(ch, &vppacl.ACLDump{ACLIndex: ^uint32(0)}, func() *vppacl.ACLDetails { return &vppacl.ACLDetails{} }, func(a *vppacl.ACLDetails) {
		row.ACLs++
		row.ACLRules += len(a.R)
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("| renderer | pods | policies | cluster policies | full render into VPP (target < 1 s) | label change p50 / p99 (target < 20 ms) | ACLs | ACL rules | Go heap | test process RSS |")
	t.Logf("| %s | %d | %d | %d | %.3f s | %.2f / %.2f ms | %d | %d | %.0f MB | %.0f MB |", row.Renderer, row.Pods, row.Policies, row.ClusterPolicies,
		row.FullSeconds, row.ChangeP50Ms, row.ChangeP99Ms, row.ACLs, row.ACLRules, row.HeapInuseMB, row.ProcessRSSMB)
	writeBenchRow(t, out, row)
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
