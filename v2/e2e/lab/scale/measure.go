package scale

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/e2e/lab/bench"
	"github.com/vcoil/vcoil/v2/e2e/lab/netnsdial"
	"github.com/vcoil/vcoil/v2/e2e/lab/topology"
	"github.com/vcoil/vcoil/v2/internal/poll"
)

// nodeRuntimeClass is the probe pods' RuntimeClass, whose handler no
// containerd of the lab has (cniprobe.go).
var nodeRuntimeClass = nodev1.RuntimeClass{
	ObjectMeta: metav1.ObjectMeta{Name: ProbeRuntimeClass, Labels: map[string]string{BenchLabel: "1"}},
	Handler:    "vcoil-scale-none",
}

// nodeRoute adds (or removes) the link route to the simulated nodes'
// addresses in a real node's namespace.
func nodeRoute(ctx context.Context, n topology.Node, add bool) error {
	verb := "replace"
	if !add {
		verb = "del"
	}
	out, err := exec.CommandContext(ctx, "nsenter", "--net=/run/netns/"+n.Netns, "--", "ip", "route", verb, NodeNet.String(), "dev", "eth0", "scope", "link").CombinedOutput()
	if err != nil && (add || !strings.Contains(string(out), "No such process")) {
		return fmt.Errorf("ip route %s %s on %s: %w: %s", verb, NodeNet, n.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// measureCNI times Probes CNI ADDs on the measured node.
func (s *Sim) measureCNI(ctx context.Context, run, metric string) error {
	hc := httpIn(s.o.Node)
	// vcoild's own histograms around the probe tell its share of an ADD
	// (absent, the probe's figures stand alone).
	before, berr := addTimes(ctx, hc)
	smp := startSampler(ctx, s.o.Client)
	res, err := s.cniProbe(ctx, run, s.o.Probes)
	c := smp.stop()
	if err != nil {
		s.add(Record{Phase: PhaseNode, Metric: metric + "_p99_ms", Status: StatusFailed, Detail: err.Error(), Context: c})
		return nil
	}
	add := msDurations(res.AddMS)
	s.add(Record{Phase: PhaseNode, Metric: metric + "_p50_ms", Value: percentileMS(add, 50), Unit: "ms", Count: len(add), Context: c, Status: StatusOK, Samples: res.AddMS})
	s.add(Record{Phase: PhaseNode, Metric: metric + "_p99_ms", Value: percentileMS(add, 99), Unit: "ms", Count: len(add), Context: c, Status: StatusOK})
	after, aerr := addTimes(ctx, hc)
	if err := errors.Join(berr, aerr); err != nil {
		s.add(Record{Phase: PhaseNode, Metric: metric + "_vcoild_mean_ms", Status: StatusFailed, Detail: err.Error(), Context: c})
		return nil
	}
	if mean, detail, ok := addShares(before, after); ok {
		s.add(Record{Phase: PhaseNode, Metric: metric + "_vcoild_mean_ms", Value: mean, Unit: "ms", Count: len(add), Context: c, Status: StatusOK, Detail: detail})
	}
	return nil
}

func msDurations(ms []float64) []time.Duration {
	d := make([]time.Duration, len(ms))
	for i, v := range ms {
		d[i] = time.Duration(v * float64(time.Millisecond))
	}
	return d
}

// httpIn is an HTTP client whose connections start in a node's network
// namespace.
func httpIn(n topology.Node) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: netnsdial.Dialer("/run/netns/" + n.Netns), DisableKeepAlives: true}}
}

// metricValue reads one sample of vcoild's metrics.
func metricValue(ctx context.Context, hc *http.Client, name string) (float64, error) {
	v, err := scrape(ctx, hc, false, []string{name})
	if err != nil {
		return 0, err
	}
	return v[0], nil
}

// scrape reads the samples names from one scrape of vcoild's metrics, each
// named as exposed (with its labels: name{label="value"}); a sample that is
// absent is an error, or 0 when absentIsZero (a labelled series appears
// with its first observation: a vcoild just restarted has no ADD yet).
func scrape(ctx context.Context, hc *http.Client, absentIsZero bool, names []string) ([]float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:9388/metrics", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	found := make(map[string]float64, len(names))
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<22)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || !slices.Contains(names, name) {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return nil, fmt.Errorf("metric %s of vcoild: %w", name, err)
		}
		found[name] = f
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("vcoild's metrics: %w", err)
	}
	out := make([]float64, len(names))
	for i, name := range names {
		f, ok := found[name]
		if !ok && !absentIsZero {
			return nil, fmt.Errorf("no metric %s in vcoild's metrics", name)
		}
		out[i] = f
	}
	return out, nil
}

// addPhases are the phases of vcoild's CNI ADD, as its metric
// vcoil_cni_add_phase_duration_seconds names them.
var addPhases = []string{"read", "allocate", "wire", "policies", "egress"}

// addTimes are the sums and counts of vcoild's ADD histograms: the whole
// request, then each of addPhases.
func addTimes(ctx context.Context, hc *http.Client) ([]float64, error) {
	names := []string{`vcoil_cni_request_duration_seconds_sum{verb="ADD"}`, `vcoil_cni_request_duration_seconds_count{verb="ADD"}`}
	for _, p := range addPhases {
		names = append(names, `vcoil_cni_add_phase_duration_seconds_sum{phase="`+p+`"}`, `vcoil_cni_add_phase_duration_seconds_count{phase="`+p+`"}`)
	}
	return scrape(ctx, hc, true, names)
}

// addShares tells, from vcoild's ADD histograms before and after a probe,
// the mean time vcoild took to answer an ADD and each phase's mean, in
// ms: the rest of the probe's ADD is the CNI binary's start, its gRPC
// call and the runtime's side.
func addShares(before, after []float64) (mean float64, detail string, ok bool) {
	meanOf := func(i int) (float64, bool) {
		n := after[i+1] - before[i+1]
		if n <= 0 {
			return 0, false
		}
		return (after[i] - before[i]) / n * 1000, true
	}
	mean, ok = meanOf(0)
	if !ok {
		return 0, "", false
	}
	parts := make([]string, 0, len(addPhases))
	for j, p := range addPhases {
		if m, ok := meanOf(2 + 2*j); ok {
			parts = append(parts, fmt.Sprintf("%s %.1f", p, m))
		}
	}
	return mean, "vcoild's mean by phase (ms): " + strings.Join(parts, ", "), true
}

// restartVcoild kills the measured node's vcoild (its pod starts it
// again) and times the new process from its start to /readyz answering
// 200.
func (s *Sim) restartVcoild(ctx context.Context) (pid int, ready time.Duration, err error) {
	ns := "/run/netns/" + s.o.Node.Netns
	old, err := bench.FindProcess("vcoild", ns)
	if err != nil {
		return 0, 0, err
	}
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		return 0, 0, fmt.Errorf("kill vcoild %d: %w", old, err)
	}
	err = poll.Until(ctx, 2*time.Minute, 20*time.Millisecond, func(context.Context) error {
		p, err := bench.FindProcess("vcoild", ns)
		if err != nil || p == old {
			return fmt.Errorf("vcoild not restarted yet on %s", s.o.Node.Name)
		}
		pid = p
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	started, err := bench.StartTime(pid)
	if err != nil {
		return 0, 0, err
	}
	hc := httpIn(s.o.Node)
	err = poll.Until(ctx, 3*time.Minute, 50*time.Millisecond, func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:9389/readyz", nil)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("vcoild /readyz: %s", resp.Status)
		}
		return nil
	})
	return pid, time.Since(started), err
}

// measureUnderChurn restarts the measured vcoild into the full cluster,
// then, under steady churn: its CPU, service and policy change latencies
// to the kernel, CNI ADD, one vcoild's watch traffic, and the apiserver's
// cost per simulated vcoild.
func (s *Sim) measureUnderChurn(ctx context.Context) error {
	s.logf("the real vcoild on %s restarted into the full cluster", s.o.Node.Name)
	smp := startSampler(ctx, s.o.Client)
	pid, ready, err := s.restartVcoild(ctx)
	c := smp.stop()
	if err != nil {
		s.add(Record{Phase: PhaseNode, Metric: "vcoild_ready_s", Status: StatusFailed, Detail: err.Error(), Context: c})
		return err
	}
	s.add(Record{Phase: PhaseNode, Metric: "vcoild_ready_s", Value: ready.Seconds(), Unit: "s", Target: "≤ 30 s", Met: ready <= 30*time.Second, Context: c, Status: StatusOK})

	mon, err := startKernelWatch(ctx, "/run/netns/"+s.o.Node.Netns)
	if err != nil {
		return err
	}
	s.logf("churn at %.0f events/s (pods created, deleted, relabelled; endpoints moved, in turn)", s.o.ChurnRate)
	ch := s.startChurn(ctx)
	defer ch.stop()
	// Settle: the first seconds of churn are not the steady state.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(10 * time.Second):
	}
	use, err := startUsage(pid)
	if err != nil {
		return err
	}
	apiPID, err := s.o.Lab.APIServerPID()
	if err != nil {
		return err
	}
	// One simulated vcoild with today's watch set, one with the set before
	// PodEndpoints (every Pod of the cluster), side by side.
	one, err := startWatchers(ctx, s.o.Rest, 1, false)
	if err != nil {
		return err
	}
	before, err := startWatchers(ctx, s.o.Rest, 1, true)
	if err != nil {
		one.stop()
		return err
	}
	hc := httpIn(s.o.Node)
	gc0, gcErr := scrape(ctx, hc, false, gcMetrics)
	// The CPU profile covers the timed changes' first 30 s, under churn.
	profiled := make(chan struct{})
	go func() {
		defer close(profiled)
		s.saveProfile(ctx, s.o.Node, "profile", "seconds=30", 30*time.Second)
	}()
	smp = startSampler(ctx, s.o.Client)
	t0 := time.Now()
	svc, pol := s.changes(ctx, mon)
	c = smp.stop()
	wall := time.Since(t0).Seconds()
	one.stop()
	before.stop()
	cpu, rss, hwm, err := use.since()
	if err != nil {
		return err
	}
	heap, herr := metricValue(ctx, hc, "go_memstats_heap_inuse_bytes")
	gc1, err := scrape(ctx, hc, false, gcMetrics)
	if gcErr == nil && err == nil {
		s.add(Record{Phase: PhaseNode, Metric: "vcoild_gc_per_s", Value: (gc1[0] - gc0[0]) / wall, Unit: "cycles/s", Context: c, Status: StatusOK,
			Detail: fmt.Sprintf("%.0f collections in %.0f s; GOMEMLIMIT %.0f MiB", gc1[0]-gc0[0], wall, gc1[1]/(1<<20))})
	} else {
		s.add(Record{Phase: PhaseNode, Metric: "vcoild_gc_per_s", Status: StatusFailed, Detail: errors.Join(gcErr, err).Error(), Context: c})
	}
	s.saveProfile(ctx, s.o.Node, "heap", "", 5*time.Second)
	<-profiled
	for _, r := range []Record{
		latencyRecord("service_change_p50_ms", svc, 50, ""),
		latencyRecord("service_change_p99_ms", svc, 99, "≤ 100 ms"),
		latencyRecord("policy_change_p50_ms", pol, 50, ""),
		latencyRecord("policy_change_p99_ms", pol, 99, "≤ 100 ms"),
		{Phase: PhaseNode, Metric: "vcoild_cpu_pct", Value: cpu, Unit: "% of a core", Target: "≤ 5 %", Met: cpu <= 5, Status: StatusOK,
			Detail: "under churn and the timed changes"},
		{Phase: PhaseNode, Metric: "vcoild_rss_mb", Value: rss, Unit: "MB", Target: "≤ 250 MB", Met: rss <= 250, Status: StatusOK, Detail: fmt.Sprintf("peak %.0f MB", hwm)},
		{Phase: PhaseAPIServer, Metric: "one_vcoild_watch_events_per_s", Value: float64(one.events.Load()) / wall, Unit: "events/s", Status: StatusOK,
			Detail: fmt.Sprintf("%d watch errors", one.errs.Load())},
		{Phase: PhaseAPIServer, Metric: "one_vcoild_watch_kb_per_s", Value: float64(one.bytes.Load()) / wall / 1024, Unit: "KB/s", Status: StatusOK,
			Detail: "by resource: " + byResource(one, wall)},
		{Phase: PhaseAPIServer, Metric: "one_vcoild_watch_events_per_s_all_pods", Value: float64(before.events.Load()) / wall, Unit: "events/s", Status: StatusOK,
			Detail: fmt.Sprintf("the watch set before PodEndpoints (every Pod); %d watch errors", before.errs.Load())},
		{Phase: PhaseAPIServer, Metric: "one_vcoild_watch_kb_per_s_all_pods", Value: float64(before.bytes.Load()) / wall / 1024, Unit: "KB/s", Status: StatusOK,
			Detail: "by resource: " + byResource(before, wall)},
	} {
		r.Context = c
		s.add(r)
	}
	if herr == nil {
		s.add(Record{Phase: PhaseNode, Metric: "vcoild_heap_mb", Value: heap / (1 << 20), Unit: "MB", Context: c, Status: StatusOK, Detail: "go_memstats_heap_inuse_bytes"})
	}
	if s.o.Probes > 0 {
		if err := s.measureCNI(ctx, "churn", "cni_add_under_churn"); err != nil {
			return err
		}
	}
	if err := s.apiserverCost(ctx, apiPID, false); err != nil {
		return err
	}
	if err := s.apiserverCost(ctx, apiPID, true); err != nil {
		return err
	}
	events, errs, last := ch.stop()
	r := Record{Phase: PhaseCluster, Metric: "churn_events", Value: float64(events), Unit: "events", Status: StatusOK, Detail: fmt.Sprintf("%d failed", errs)}
	if errs > 0 {
		r.Detail += "; last: " + last
	}
	s.add(r)
	return nil
}

func latencyRecord(metric string, d []time.Duration, p int, target string) Record {
	r := Record{Phase: PhaseNode, Metric: metric, Value: percentileMS(d, p), Unit: "ms", Count: len(d), Target: target, Status: StatusOK}
	if target != "" {
		r.Met = r.Value <= 100
	} else {
		// The record without a target (the median) carries the single
		// latencies, in order: an outlier shows where it fell.
		r.Samples = make([]float64, len(d))
		for i, x := range d {
			r.Samples[i] = float64(x.Microseconds()) / 1000
		}
	}
	if len(d) == 0 {
		r.Status, r.Detail = StatusFailed, "no change showed in the kernel"
	}
	return r
}

// changes times Changes service changes (an endpoint replaced by a fresh
// address) and Changes policy changes (a client pod labelled as a peer of
// the probe policy), in turn, 1.1 s apart, from just before the apiserver
// call to the kernel's notice of the first element naming the address in
// the measured node (kernelWatch).
func (s *Sim) changes(ctx context.Context, mon *kernelWatch) (svc, pol []time.Duration) {
	for k := range 2 * s.o.Changes {
		paced := time.After(1100 * time.Millisecond)
		var (
			addr   = addrPlus(ChangeBase, k)
			change func(context.Context) error
		)
		if k%2 == 0 {
			i := (k*7919 + 13) % s.o.Services
			change = func(ctx context.Context) error { return s.setEndpoint(ctx, i, k, addr) }
		} else {
			s.mu.Lock()
			if len(s.clients) == 0 {
				s.mu.Unlock()
				continue
			}
			p := s.clients[0]
			s.clients = s.clients[1:]
			s.mu.Unlock()
			addr = p.IP
			change = func(ctx context.Context) error {
				return s.labelPod(ctx, p.Namespace, p.Name, map[string]string{ProbeLabel: "yes"})
			}
		}
		wait := mon.Expect(addr)
		before := time.Now()
		if err := change(ctx); err != nil {
			s.logf("    change %d: %v", k, err)
			continue
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		at, err := wait(wctx)
		cancel()
		if err == nil {
			if k%2 == 0 {
				svc = append(svc, at.Sub(before))
			} else {
				pol = append(pol, at.Sub(before))
			}
		} else {
			s.logf("    change %d (%s): %v", k, addr, err)
		}
		select {
		case <-ctx.Done():
			return svc, pol
		case <-paced:
		}
	}
	return svc, pol
}

// apiserverCost measures the apiserver's CPU and memory under the churn
// with 0 and each number of simulated vcoild watch sets, and extrapolates
// linearly to 1,000 and 5,000 nodes.
func (s *Sim) apiserverCost(ctx context.Context, apiPID int, allPods bool) error {
	type point struct{ n, cpu, rss, kbps float64 }
	var pts []point
	suffix, set := "", "today's watch set (the node's Pods, every PodEndpoint)"
	if allPods {
		suffix, set = "_all_pods", "the watch set before PodEndpoints (every Pod)"
	}
	for _, n := range append([]int{0}, s.o.Watchers...) {
		var w *watchers
		if n > 0 {
			var err error
			if w, err = startWatchers(ctx, s.o.Rest, n, allPods); err != nil {
				return err
			}
			// The new streams settle first.
			time.Sleep(3 * time.Second)
			w.reset()
		}
		u, err := startUsage(apiPID)
		if err != nil {
			return err
		}
		smp := startSampler(ctx, s.o.Client)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(s.o.WatchWindow):
		}
		c := smp.stop()
		cpu, rss, _, err := u.since()
		if err != nil {
			return err
		}
		var ev, kb float64
		var werrs int64
		if w != nil {
			ev = float64(w.events.Load()) / s.o.WatchWindow.Seconds()
			kb = float64(w.bytes.Load()) / s.o.WatchWindow.Seconds() / 1024
			werrs = w.errs.Load()
			w.stop()
		}
		pts = append(pts, point{float64(n), cpu, rss, kb})
		detail := fmt.Sprintf("%d simulated vcoild watch sets, %s: %.0f events/s, %.0f KB/s sent to them in all; %d watch errors", n, set, ev, kb, werrs)
		s.add(Record{Phase: PhaseAPIServer, Metric: fmt.Sprintf("apiserver_cpu_pct_%d_watchers%s", n, suffix), Value: cpu, Unit: "% of a core", Count: n, Detail: detail, Context: c, Status: StatusOK})
		s.add(Record{Phase: PhaseAPIServer, Metric: fmt.Sprintf("apiserver_rss_mb_%d_watchers%s", n, suffix), Value: rss, Unit: "MB", Count: n, Context: c, Status: StatusOK})
	}
	if len(pts) < 2 {
		return nil
	}
	// Least squares over the points: the cost of one more watch set.
	fit := func(y func(point) float64) (a, b float64) {
		var sx, sy, sxx, sxy float64
		for _, p := range pts {
			sx, sy, sxx, sxy = sx+p.n, sy+y(p), sxx+p.n*p.n, sxy+p.n*y(p)
		}
		k := float64(len(pts))
		b = (k*sxy - sx*sy) / (k*sxx - sx*sx)
		return (sy - b*sx) / k, b
	}
	ca, cb := fit(func(p point) float64 { return p.cpu })
	ra, rb := fit(func(p point) float64 { return p.rss })
	ka, kb := fit(func(p point) float64 { return p.kbps })
	s.add(Record{Phase: PhaseAPIServer, Metric: "apiserver_cpu_pct_per_node" + suffix, Value: cb, Unit: "% of a core", Status: StatusOK, Detail: fmt.Sprintf("%s; fit over %d points, base %.1f %%", set, len(pts), ca)})
	s.add(Record{Phase: PhaseAPIServer, Metric: "apiserver_rss_mb_per_node" + suffix, Value: rb, Unit: "MB", Status: StatusOK, Detail: fmt.Sprintf("%s; base %.0f MB", set, ra)})
	s.add(Record{Phase: PhaseAPIServer, Metric: "watch_kb_per_s_per_node" + suffix, Value: kb, Unit: "KB/s", Status: StatusOK, Detail: fmt.Sprintf("%s; base %.1f", set, ka)})
	for _, nodes := range []float64{1000, 5000} {
		s.add(Record{Phase: PhaseAPIServer, Metric: fmt.Sprintf("apiserver_cpu_cores_at_%.0f_nodes%s", nodes, suffix), Value: (ca + cb*nodes) / 100, Unit: "cores", Status: StatusOK, Detail: set + "; extrapolated linearly"})
		s.add(Record{Phase: PhaseAPIServer, Metric: fmt.Sprintf("apiserver_rss_gb_at_%.0f_nodes%s", nodes, suffix), Value: (ra + rb*nodes) / 1024, Unit: "GB", Status: StatusOK, Detail: set + "; extrapolated linearly"})
		s.add(Record{Phase: PhaseAPIServer, Metric: fmt.Sprintf("watch_mb_per_s_at_%.0f_nodes%s", nodes, suffix), Value: kb * nodes / 1024, Unit: "MB/s", Status: StatusOK, Detail: set + "; the apiserver's watch traffic to the nodes' vcoilds"})
	}
	return nil
}

// byResource tells a watch set's traffic per resource over wall seconds,
// the largest first, leaving out resources that sent nothing.
func byResource(w *watchers, wall float64) string {
	type row struct {
		name       string
		events, kb float64
	}
	var rows []row
	for name, c := range w.byResource {
		if b := c.bytes.Load(); b > 0 {
			rows = append(rows, row{name, float64(c.events.Load()) / wall, float64(b) / wall / 1024})
		}
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Compare(b.kb, a.kb) })
	parts := make([]string, len(rows))
	for i, r := range rows {
		parts[i] = fmt.Sprintf("%s %.1f events/s %.1f KB/s", r.name, r.events, r.kb)
	}
	return strings.Join(parts, "; ")
}

// Cleanup removes everything the benchmark made (also what an earlier,
// interrupted run left): the simulated pods, Services, slices, policies
// and namespaces, the nodes (vcoil-controller then releases their
// blocks), the pool, kwok and the routes.
func Cleanup(ctx context.Context, o Options) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	fmt.Fprintf(o.Log, "==> cleaning up: simulated pods, Services, policies, namespaces, nodes, pool %s, kwok, routes\n", Pool)
	cl := o.Client
	var errs []error
	var nsl corev1.NamespaceList
	if err := cl.List(ctx, &nsl, client.HasLabels{BenchLabel}); err != nil {
		return err
	}
	for _, ns := range nsl.Items {
		in := client.InNamespace(ns.Name)
		for _, obj := range []client.Object{&corev1.Pod{}, &vcoilv2.PodEndpoint{}, &corev1.Service{}} {
			if err := cl.DeleteAllOf(ctx, obj, in, client.GracePeriodSeconds(0)); err != nil {
				errs = append(errs, fmt.Errorf("delete %T in %s: %w", obj, ns.Name, err))
			}
		}
		if err := cl.Delete(ctx, &ns); err != nil && client.IgnoreNotFound(err) != nil {
			errs = append(errs, err)
		}
	}
	// Nodes last but one: their pods are gone, and the controller's
	// node GC releases their blocks.
	if err := cl.DeleteAllOf(ctx, &corev1.Node{}, client.HasLabels{BenchLabel}); err != nil {
		// A collection delete of a thousand nodes can outlast the client's
		// timeout or lose its stream part way: the wait below deletes the
		// rest one by one, and only what is left then fails the cleanup.
		fmt.Fprintf(o.Log, "==> deleting the simulated nodes at once failed (%v); deleting the rest one by one\n", err)
	}
	for _, obj := range []client.Object{NewPool(), NewServiceCIDR(), nodeRuntimeClass.DeepCopy()} {
		if err := cl.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", obj.GetName(), err))
		}
	}
	errs = append(errs, poll.Until(ctx, 10*time.Minute, 2*time.Second, func(ctx context.Context) error {
		var left []string
		var nodes corev1.NodeList
		if err := cl.List(ctx, &nodes, client.HasLabels{BenchLabel}); err != nil {
			return err
		}
		if len(nodes.Items) > 0 {
			left = append(left, fmt.Sprintf("%d nodes", len(nodes.Items)))
			for i := range nodes.Items {
				if err := cl.Delete(ctx, &nodes.Items[i]); client.IgnoreNotFound(err) != nil {
					return fmt.Errorf("delete node %s: %w", nodes.Items[i].Name, err)
				}
			}
		}
		var nss corev1.NamespaceList
		if err := cl.List(ctx, &nss, client.HasLabels{BenchLabel}); err != nil {
			return err
		}
		if len(nss.Items) > 0 {
			left = append(left, fmt.Sprintf("%d namespaces", len(nss.Items)))
		}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(NewPool()), NewPool()); err == nil {
			left = append(left, "pool "+Pool+" (blocks not yet released)")
		}
		if len(left) > 0 {
			return errors.New(strings.Join(left, ", ") + " still there")
		}
		return nil
	}))
	if o.Lab != nil {
		errs = append(errs, o.Lab.StopKwok())
	}
	for _, n := range append([]topology.Node{o.Node}, o.Others...) {
		if n.Netns != "" {
			errs = append(errs, nodeRoute(ctx, n, false))
		}
	}
	return errors.Join(errs...)
}
