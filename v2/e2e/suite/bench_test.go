package suite

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/e2e/netbench"
	"github.com/vcoil/vcoil/v2/internal/poll"
)

// The dataplane benchmark (make bench-dataplane): TCP throughput and round
// trips between pods, and the CPU they cost, on the lab's nodes. It runs
// only when VCOIL_BENCH_DATAPLANE names the JSON file to add its rows to:
// make bench-dataplane runs it in a Linux lab, then in a VPP lab, into
// one file, and prints the table of both.
const (
	benchEnv         = "VCOIL_BENCH_DATAPLANE"
	benchDurationEnv = "VCOIL_BENCH_DURATION"
	benchCountEnv    = "VCOIL_BENCH_ROUND_TRIPS"
	benchPort        = 5201
)

// benchRow is one path's figures on one dataplane.
type benchRow struct {
	Dataplane string `json:"dataplane"`
	Path      string `json:"path"`
	Family    string `json:"family"`
	// One and Four are the throughput of one and of four streams.
	One  *netbench.Throughput `json:"one_stream,omitempty"`
	Four *netbench.Throughput `json:"four_streams,omitempty"`
	// RoundTrip is the 1-byte ping-pong.
	RoundTrip *netbench.Latency `json:"round_trip,omitempty"`
	// CPUPerGB is the machine's busy CPU time (all cores, from
	// /proc/stat: the lab's nodes share its kernel) per 10^9 bytes moved
	// by the four streams, in seconds; VPPCPUPerGB the VPP processes'
	// own (their polling counted as it is).
	CPUPerGB    float64 `json:"cpu_s_per_gb"`
	VPPCPUPerGB float64 `json:"vpp_cpu_s_per_gb"`
	// Errors are the measurements that failed (a stalled transfer among
	// them), by name.
	Errors map[string]string `json:"errors,omitempty"`
}

// TestBenchDataplane measures, from a client pod on node A: a server pod
// on node A, a server pod on node B, a ClusterIP whose only backend is on
// node B, and, from node A's own network, the server pod on node A.
func TestBenchDataplane(t *testing.T) {
	out := os.Getenv(benchEnv)
	if out == "" {
		t.Skipf("skipped: set %s to the JSON file of make bench-dataplane", benchEnv)
	}
	k := need(t)
	duration := 10 * time.Second
	if v := os.Getenv(benchDurationEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", benchDurationEnv, v, err)
		}
		duration = d
	}
	count := 2000
	if v := os.Getenv(benchCountEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a count of round trips", benchCountEnv, v)
		}
		count = n
	}

	c := ctx(t, 5*time.Minute)
	a, b, ns := k.benchSetUp(c, t, "vcoil-bench-")
	dataplane := nodeDataplane(a)
	if other := nodeDataplane(b); other != dataplane {
		dataplane += "," + other
	}
	serve := []string{"bench-serve", "--port", strconv.Itoa(benchPort)}
	srvA := k.createAgentPod(t, ns.Name, "srv-a", a.Name, false, nil, serve)
	srvB := k.createAgentPod(t, ns.Name, "srv-b", b.Name, false, nil, serve)
	cli := k.createAgentPod(t, ns.Name, "client", a.Name, false, nil, []string{"serve"})
	host := k.createAgentPod(t, ns.Name, "host", a.Name, true, nil, []string{"serve"})
	for _, p := range []*corev1.Pod{srvA, srvB, cli, host} {
		k.waitRunning(t, p)
	}
	svc := k.service(t, ns.Name, "bench", map[string]string{"name": "srv-b"}, benchPort, benchPort, corev1.ServiceTypeClusterIP, false)
	poll.Eventually(t, time.Minute, func() error {
		if err := k.c.Get(c, client.ObjectKeyFromObject(svc), svc); err != nil {
			return err
		}
		if svc.Spec.ClusterIP == "" {
			return errors.New("no ClusterIP yet")
		}
		return nil
	})

	paths := []struct {
		name string
		from *corev1.Pod
		to   string
	}{
		{"pod → pod, same node", cli, podIP(srvA).String()},
		{"pod → pod, other node", cli, podIP(srvB).String()},
		{"pod → ClusterIP, backend on the other node", cli, svc.Spec.ClusterIP},
		{"node → pod, same node", host, podIP(srvA).String()},
	}
	var rows []benchRow
	for _, p := range paths {
		addr := net.JoinHostPort(p.to, strconv.Itoa(benchPort))
		row := benchRow{Dataplane: dataplane, Path: p.name, Family: familyOf(p.to), Errors: map[string]string{}}
		if err := k.benchReachable(c, p.from, addr); err != nil {
			row.Errors["reachable"] = err.Error()
			rows = append(rows, row)
			continue
		}
		pids, err := vppPIDs()
		if err != nil {
			t.Fatal(err)
		}
		var one, four netbench.Throughput
		if _, err := k.benchRun(ctx(t, 5*time.Minute), p.from, &one, "stream", addr, "--streams", "1", "--duration", duration.String()); err != nil {
			row.Errors["one_stream"] = err.Error()
		} else {
			row.One = &one
		}
		cost, err := k.benchRun(ctx(t, 5*time.Minute), p.from, &four, "stream", addr, "--streams", "4", "--duration", duration.String())
		if err != nil {
			row.Errors["four_streams"] = err.Error()
		} else {
			row.Four = &four
			if gb := float64(four.Bytes) / 1e9; gb > 0 {
				row.CPUPerGB, row.VPPCPUPerGB = cost.machine/gb, cost.vpp/gb
			}
		}
		var rtt netbench.Latency
		if _, err := k.benchRun(ctx(t, 5*time.Minute), p.from, &rtt, "pingpong", addr, "--count", strconv.Itoa(count)); err != nil {
			row.Errors["round_trip"] = err.Error()
		} else {
			row.RoundTrip = &rtt
		}
		// A VPP that its supervisor restarted under the measurement (an
		// unresponsive one) is a failure of the path, whatever the figures.
		after, err := vppPIDs()
		if err != nil {
			t.Fatal(err)
		}
		for node, pid := range pids {
			if after[node] != pid {
				row.Errors["vpp_restarted"] = fmt.Sprintf("VPP of %s was restarted during the measurement (PID %s, then %s)", node, pid, after[node])
			}
		}
		t.Logf("%s: %s", p.name, row.summary())
		rows = append(rows, row)
	}
	all, err := addBenchRows(out, rows)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(benchTable(all))
}

// benchSetUp finds the two nodes the benchmark and the soak run on (node A
// and node B, the first two schedulable ones) and makes a namespace for
// their pods (named from prefix; the test's cleanup deletes it).
func (k *cluster) benchSetUp(c context.Context, t *testing.T, prefix string) (a, b *corev1.Node, ns *corev1.Namespace) {
	t.Helper()
	nodes, err := schedulableNodes(c, k)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) < 2 {
		t.Fatalf("%s needs two schedulable nodes, the cluster has %d", t.Name(), len(nodes))
	}
	ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := k.c.Create(c, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.c.Delete(context.Background(), ns) })
	return &nodes[0], &nodes[1], ns
}

// benchReachable waits (a minute at most) until one round trip from from
// to the agent bench-serve at addr works: a path must work before it is
// measured (a new service's rules, a new pod's routes).
func (k *cluster) benchReachable(c context.Context, from *corev1.Pod, addr string) error {
	return poll.Until(c, time.Minute, time.Second, func(c context.Context) error {
		_, err := k.exec(c, from, "/agent", "bench", "pingpong", addr, "--count", "1")
		return err
	})
}

// cpuCost is the CPU time a measurement cost, in seconds.
type cpuCost struct{ machine, vpp float64 }

// benchRun runs the agent's bench in from with args (within c), decodes
// its JSON into result and returns the CPU time spent meanwhile.
func (k *cluster) benchRun(c context.Context, from *corev1.Pod, result any, args ...string) (cpuCost, error) {
	m0, v0, err := cpuTimes()
	if err != nil {
		return cpuCost{}, err
	}
	out, err := k.exec(c, from, append([]string{"/agent", "bench"}, args...)...)
	if err != nil {
		return cpuCost{}, err
	}
	m1, v1, err := cpuTimes()
	if err != nil {
		return cpuCost{}, err
	}
	if out == "" {
		// The exec session ended without the agent's answer nor its exit
		// status: the way to the node's kubelet was lost meanwhile.
		return cpuCost{}, errors.New("no answer: the exec session ended before the agent printed its result")
	}
	if err := json.Unmarshal([]byte(out), result); err != nil {
		return cpuCost{}, fmt.Errorf("the agent's answer %q: %w", out, err)
	}
	return cpuCost{machine: m1 - m0, vpp: v1 - v0}, nil
}

// userHZ is the unit of /proc's CPU times (USER_HZ, 100 on Linux).
const userHZ = 100

// cpuTimes reads the machine's busy CPU time (all but idle and iowait,
// over every core) and that of the VPP processes (those whose main thread
// VPP names vpp_main), in seconds.
func cpuTimes() (machine, vpp float64, err error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	if !s.Scan() {
		return 0, 0, errors.New("/proc/stat is empty")
	}
	fields := strings.Fields(s.Text())
	if len(fields) < 8 || fields[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected first line %q", s.Text())
	}
	var busy uint64
	for i, v := range fields[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
		// user nice system idle iowait irq softirq steal guest guest_nice;
		// guest time is counted in user already.
		if i == 3 || i == 4 || i >= 8 {
			continue
		}
		busy += n
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	var vppTicks uint64
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // gone meanwhile
		}
		st := string(b)
		open, end := strings.IndexByte(st, '('), strings.LastIndexByte(st, ')')
		if open < 0 || end < open || st[open+1:end] != "vpp_main" {
			continue
		}
		rest := strings.Fields(st[end+1:])
		// Fields after the name: state is 0, utime 11, stime 12.
		if len(rest) > 12 {
			u, _ := strconv.ParseUint(rest[11], 10, 64)
			k, _ := strconv.ParseUint(rest[12], 10, 64)
			vppTicks += u + k
		}
	}
	return float64(busy) / userHZ, float64(vppTicks) / userHZ, nil
}

func familyOf(addr string) string {
	if a, err := net.ResolveIPAddr("ip", addr); err == nil && a.IP.To4() == nil {
		return "ipv6"
	}
	return "ipv4"
}

func nodeDataplane(n *corev1.Node) string {
	if d := n.Labels["vcoil.io/dataplane"]; d != "" {
		return d
	}
	return "linux"
}

func (r benchRow) summary() string {
	var parts []string
	if r.One != nil {
		parts = append(parts, fmt.Sprintf("1 stream %.2f Gbit/s", r.One.Gbps))
	}
	if r.Four != nil {
		parts = append(parts, fmt.Sprintf("4 streams %.2f Gbit/s (%.2f CPU-s/GB, VPP %.2f)", r.Four.Gbps, r.CPUPerGB, r.VPPCPUPerGB))
	}
	if r.RoundTrip != nil {
		parts = append(parts, fmt.Sprintf("round trip p50 %.0f µs, p99 %.0f µs", r.RoundTrip.P50, r.RoundTrip.P99))
	}
	for k, v := range r.Errors {
		parts = append(parts, k+" failed: "+v)
	}
	return strings.Join(parts, "; ")
}

// addBenchRows adds rows to the JSON file at path (made when missing),
// replacing the rows of the same dataplane and path, and returns them all.
func addBenchRows(path string, rows []benchRow) ([]benchRow, error) {
	var all []benchRow
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &all); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for _, r := range rows {
		replaced := false
		for i := range all {
			if all[i].Dataplane == r.Dataplane && all[i].Path == r.Path {
				all[i], replaced = r, true
			}
		}
		if !replaced {
			all = append(all, r)
		}
	}
	b, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	return all, os.WriteFile(path, append(b, '\n'), 0o644)
}

// benchTable renders rows as docs/dataplane-benchmark.md's table.
func benchTable(rows []benchRow) string {
	var b strings.Builder
	b.WriteString("| dataplane | path | 1 stream | 4 streams | round trip p50 / p99 | CPU per GB (machine / VPP) |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- |\n")
	gbps := func(t *netbench.Throughput, err string) string {
		if t == nil {
			return "failed: " + err
		}
		return fmt.Sprintf("%.2f Gbit/s", t.Gbps)
	}
	for _, r := range rows {
		rtt := "failed: " + r.Errors["round_trip"]
		if r.RoundTrip != nil {
			rtt = fmt.Sprintf("%.0f / %.0f µs", r.RoundTrip.P50, r.RoundTrip.P99)
		}
		cpu := "—"
		if r.Four != nil {
			cpu = fmt.Sprintf("%.2f s / %.2f s", r.CPUPerGB, r.VPPCPUPerGB)
		}
		if e, ok := r.Errors["reachable"]; ok {
			fmt.Fprintf(&b, "| %s | %s | unreachable: %s | | | |\n", r.Dataplane, r.Path, e)
			continue
		}
		if e, ok := r.Errors["vpp_restarted"]; ok {
			cpu += " (" + e + ")"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.Dataplane, r.Path, gbps(r.One, r.Errors["one_stream"]), gbps(r.Four, r.Errors["four_streams"]), rtt, cpu)
	}
	return b.String()
}
