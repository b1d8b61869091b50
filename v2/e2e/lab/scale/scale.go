// Package scale simulates a large cluster around the lab's real nodes and
// measures what vcoil costs in it (`make bench-scale`, docs/scale-benchmark.md):
// simulated Nodes that kwok keeps Ready, their blocks asked for through
// vcoil's BlockRequests as each node's vcoild would ask, pods bound to them
// with addresses from those blocks, Services without selectors whose
// EndpointSlices the benchmark owns, NetworkPolicies, and churn at a steady
// rate. The lab's real nodes keep running vcoild and real pods beside them;
// the first one is measured.
//
// It measures vcoil-controller (every node's first block, with a leader
// failover in the middle, then an independent count of the blocks), the
// real vcoild (ready time, memory, CPU under churn, change-to-kernel
// latencies, CNI ADD under churn) and the apiserver's cost per node
// (simulated vcoild watch sets, 1, 10, 100 of them). Every figure carries
// the machine's CPU idle share and the apiserver's answer time of its
// interval. It is a benchmark, not a regression test: it records figures.
package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/e2e/lab/topology"
)

// Lab is what the benchmark needs of the running lab.
type Lab interface {
	StartKwok(bin, config string) error
	StopKwok() error
	APIServerPID() (int, error)
	NodeMountNS(topology.Node) string
}

// Options of one run.
type Options struct {
	Lab    Lab
	Client client.WithWatch
	Rest   *rest.Config
	// Self is the lab program (it runs the CNI probe on the node).
	Self string
	// Kwok is the kwok binary; KwokConfig the stage file it gets.
	Kwok, KwokConfig string
	// Node is the real node whose vcoild is measured; Others the lab's
	// other real nodes (they get the route to the simulated nodes too).
	Node   topology.Node
	Others []topology.Node
	// Sizes of the simulated cluster.
	Nodes, Pods, Services, Policies, Namespaces int
	// Rate bounds the creation of the simulated objects (objects/s).
	Rate float64
	// Concurrency of the apiserver writes.
	Concurrency int
	// ChurnRate is the steady churn (events/s): pods created and deleted,
	// labels changed, endpoints moved, in turn.
	ChurnRate float64
	// Changes is the number of service changes and of policy changes
	// measured under churn; Probes the CNI ADDs timed in each phase.
	Changes, Probes int
	// Watchers are the numbers of simulated vcoild watch sets, and
	// WatchWindow how long each count is measured.
	Watchers    []int
	WatchWindow time.Duration
	// ProfileDir receives vcoild's CPU profile of the timed changes and
	// its heap profile after them ("": none).
	ProfileDir string
	// Keep leaves the simulated cluster in place (make lab-scale).
	Keep bool
	Log  io.Writer
}

// Sim is one run's state.
type Sim struct {
	o      Options
	nodes  []*simNode
	recs   []Record
	mu     sync.Mutex
	rng    *rand.Rand
	podSeq int
	// backends are addresses of backend pods (the Services' endpoints);
	// clients the client pods, never endpoints, not yet probed.
	backends []netip.Addr
	clients  []PodSpec
	// churned are the pods churn created and has not deleted yet.
	churned []PodSpec
	// brw sees the BlockRequests answered.
	brw *brWatch
}

func (s *Sim) logf(format string, args ...any) {
	fmt.Fprintf(s.o.Log, "==> "+format+"\n", args...)
}

func (s *Sim) add(r Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, r)
	v := fmt.Sprintf("%.2f %s", r.Value, r.Unit)
	if r.Status != StatusOK {
		v = r.Status + ": " + r.Detail
	}
	s.logf("    %s %s: %s (CPU idle %.0f %%, apiserver GET p50/p99 %.1f/%.1f ms)", r.Phase, r.Metric, v, r.CPUIdlePct, r.APILatencyP50MS, r.APILatencyP99MS)
}

// Run simulates the cluster, measures, and removes the simulated cluster
// (unless Keep) whatever happens.
func Run(ctx context.Context, o Options) (recs []Record, err error) {
	if o.Nodes > MaxNodes || o.Services > MaxServices {
		return nil, fmt.Errorf("%d nodes and %d services: the benchmark's ranges hold %d and %d", o.Nodes, o.Services, MaxNodes, MaxServices)
	}
	if o.Nodes < 1 || o.Namespaces < 1 {
		return nil, errors.New("at least one node and one namespace")
	}
	s := &Sim{o: o, rng: rand.New(rand.NewPCG(1, 2))}
	defer func() {
		if o.Keep && err == nil {
			s.logf("the simulated cluster stays (make lab-scale-down removes it)")
			return
		}
		if cerr := Cleanup(context.WithoutCancel(ctx), o); cerr != nil {
			err = errors.Join(err, fmt.Errorf("clean up: %w", cerr))
		}
	}()
	if err := s.setup(ctx); err != nil {
		return s.recs, err
	}
	if o.Probes > 0 {
		if err := s.measureCNI(ctx, "empty", "cni_add_empty_lab"); err != nil {
			return s.recs, err
		}
	}
	if err := s.createNodes(ctx); err != nil {
		return s.recs, err
	}
	if err := s.firstBlocks(ctx); err != nil {
		return s.recs, err
	}
	if err := s.populate(ctx); err != nil {
		return s.recs, err
	}
	if o.Keep && o.ChurnRate == 0 {
		return s.recs, nil
	}
	if err := s.measureUnderChurn(ctx); err != nil {
		return s.recs, err
	}
	return s.recs, nil
}

// setup starts kwok and makes the objects every phase needs.
func (s *Sim) setup(ctx context.Context) error {
	s.logf("kwok (%s) started in the control plane's namespace; route to %s on the real nodes", s.o.Kwok, NodeNet)
	if err := s.o.Lab.StartKwok(s.o.Kwok, s.o.KwokConfig); err != nil {
		return err
	}
	for _, n := range append([]topology.Node{s.o.Node}, s.o.Others...) {
		if err := nodeRoute(ctx, n, true); err != nil {
			return err
		}
	}
	var err error
	if s.brw, err = startBRWatch(ctx, s.o.Client); err != nil {
		return err
	}
	objs := []client.Object{NewPool(), NewServiceCIDR(), nodeRuntimeClass.DeepCopy()}
	for _, ns := range append([]string{RealNamespace, ProbeNamespace}, namespaces(s.o.Namespaces)...) {
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: benchLabels(nil)}})
	}
	objs = append(objs, NewProbePolicy(), NewRealPod(s.o.Node.Name))
	for _, obj := range objs {
		if err := createRetry(ctx, s.o.Client, obj); err != nil {
			return err
		}
	}
	// The real pod must be running (its rules rendered) before policy
	// changes are timed.
	return waitPodIP(ctx, s.o.Client, RealNamespace, "target", 2*time.Minute)
}

func namespaces(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = Namespace(i)
	}
	return out
}

func waitPodIP(ctx context.Context, cl client.Client, ns, name string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		p := &corev1.Pod{}
		err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p)
		if err == nil && p.Status.PodIP != "" && p.Status.Phase == corev1.PodRunning {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pod %s/%s not running with an address after %s (%v)", ns, name, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// createNodes creates the simulated nodes and waits until kwok has made
// them Ready.
func (s *Sim) createNodes(ctx context.Context) error {
	s.logf("%d simulated nodes", s.o.Nodes)
	s.nodes = make([]*simNode, s.o.Nodes)
	smp := startSampler(ctx, s.o.Client)
	start := time.Now()
	err := s.parallel(ctx, s.o.Nodes, func(ctx context.Context, i int) error {
		n := NewNode(i)
		if err := createRetry(ctx, s.o.Client, n); err != nil {
			return err
		}
		if n.UID == "" {
			if err := s.o.Client.Get(ctx, client.ObjectKeyFromObject(n), n); err != nil {
				return err
			}
		}
		s.nodes[i] = &simNode{name: n.Name, uid: string(n.UID)}
		return nil
	})
	if err != nil {
		return err
	}
	created := time.Since(start)
	if err := s.waitNodesReady(ctx, 5*time.Minute); err != nil {
		return err
	}
	s.add(Record{Phase: PhaseCluster, Metric: "nodes_created_s", Value: created.Seconds(), Unit: "s", Count: s.o.Nodes, Context: smp.stop(), Status: StatusOK})
	s.add(Record{Phase: PhaseCluster, Metric: "nodes_ready_s", Value: time.Since(start).Seconds(), Unit: "s", Count: s.o.Nodes, Status: StatusOK})
	// New nodes set the DaemonSet controller and kwok going (a vcoild pod
	// per node): the blocks are timed once that has settled, so that
	// their figures measure vcoil-controller rather than the rush.
	ready, desired, err := s.waitDaemonSet(ctx, 10*time.Minute)
	if err != nil {
		return err
	}
	s.add(Record{Phase: PhaseCluster, Metric: "daemonset_settled_s", Value: time.Since(start).Seconds(), Unit: "s", Count: s.o.Nodes, Status: StatusOK,
		Detail: fmt.Sprintf("vcoild's DaemonSet: %d of %d pods ready, simulated ones included", ready, desired)})
	return nil
}

// waitDaemonSet waits until vcoild's DaemonSet has a ready pod on every
// node, or until the count of ready pods has not moved for a minute with
// nearly all of them ready: kwok has left a few simulated pods unready in
// a run (25 of 1,002), and those load nothing. It returns the pods ready
// and desired.
func (s *Sim) waitDaemonSet(ctx context.Context, timeout time.Duration) (ready, desired int32, err error) {
	const still = time.Minute
	deadline := time.Now().Add(timeout)
	last, since := int32(-1), time.Now()
	for {
		ds := &appsv1.DaemonSet{}
		err := s.o.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "vcoil-daemon"}, ds)
		ready, desired = ds.Status.NumberReady, ds.Status.DesiredNumberScheduled
		if err == nil && desired >= int32(s.o.Nodes) {
			if ready == desired {
				return ready, desired, nil
			}
			if ready != last {
				last, since = ready, time.Now()
			} else if time.Since(since) >= still && ready*100 >= desired*97 {
				s.logf("vcoild's DaemonSet: %d of %d pods ready, unchanged for %s: settled", ready, desired, still)
				return ready, desired, nil
			}
		}
		if time.Now().After(deadline) {
			return ready, desired, fmt.Errorf("vcoild's DaemonSet not ready on every node after %s: %d of %d (%v)", timeout, ready, desired, err)
		}
		select {
		case <-ctx.Done():
			return ready, desired, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

func (s *Sim) waitNodesReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var nodes corev1.NodeList
		err := s.o.Client.List(ctx, &nodes, client.HasLabels{BenchLabel})
		ready := 0
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		if err == nil && ready == s.o.Nodes {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d simulated nodes Ready after %s (is kwok running? %v)", ready, s.o.Nodes, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// firstBlocks asks for every node's first block at once, as the nodes'
// vcoilds would when the cluster comes up, kills vcoil-controller's leader
// when half the requests are created, and checks the pool independently.
func (s *Sim) firstBlocks(ctx context.Context) error {
	s.logf("every simulated node's first block (%d BlockRequests, %d at a time); the leader of vcoil-controller killed halfway", s.o.Nodes, s.o.Concurrency)
	ctrl := trackCPU(ctx, "vcoil-controller")
	smp := startSampler(ctx, s.o.Client)
	var (
		mu        sync.Mutex
		lat       []time.Duration
		first     time.Time
		last      time.Time
		killed    string
		killedAt  time.Time
		startedN  int
		failOnce  sync.Once
		failErr   error
		wctx, end = context.WithTimeout(ctx, 10*time.Minute)
	)
	defer end()
	first = time.Now()
	err := s.parallel(wctx, s.o.Nodes, func(ctx context.Context, i int) error {
		mu.Lock()
		startedN++
		half := startedN == s.o.Nodes/2
		mu.Unlock()
		if half {
			failOnce.Do(func() {
				killed, failErr = failover(ctx, s.o.Client)
				killedAt = time.Now()
			})
		}
		created, done, err := s.requestBlock(ctx, s.nodes[i], s.brw)
		if err != nil {
			return err
		}
		mu.Lock()
		lat = append(lat, done.Sub(created))
		if done.After(last) {
			last = done
		}
		mu.Unlock()
		return nil
	})
	c := smp.stop()
	if err != nil {
		return err
	}
	if failErr != nil {
		return fmt.Errorf("leader failover: %w", failErr)
	}
	total := last.Sub(first)
	detail := fmt.Sprintf("leader pod %s killed at %.1f s", killed, killedAt.Sub(first).Seconds())
	s.add(Record{Phase: PhaseController, Metric: "first_blocks_all_s", Value: total.Seconds(), Unit: "s", Target: "≤ 60 s", Met: total <= time.Minute, Count: len(lat), Detail: detail, Context: c, Status: StatusOK})
	s.add(Record{Phase: PhaseController, Metric: "first_block_p50_ms", Value: percentileMS(lat, 50), Unit: "ms", Count: len(lat), Context: c, Status: StatusOK})
	s.add(Record{Phase: PhaseController, Metric: "first_block_p99_ms", Value: percentileMS(lat, 99), Unit: "ms", Count: len(lat), Detail: detail, Context: c, Status: StatusOK})
	cpu, rss := ctrl.stop()
	s.add(Record{Phase: PhaseController, Metric: "controller_cpu_pct", Value: cpu, Unit: "% of a core", Detail: "every replica, the killed leader's to its last second and its replacement's", Context: c, Status: StatusOK})
	s.add(Record{Phase: PhaseController, Metric: "controller_rss_mb", Value: rss, Unit: "MB", Detail: "largest replica", Context: c, Status: StatusOK})
	// The independent count: every block unique, inside the pool, owned
	// by a node of the benchmark, one per node, and the pool's status
	// agreeing.
	nodes := map[string]bool{}
	for _, n := range s.nodes {
		nodes[n.name] = true
	}
	check := waitPoolStatus(ctx, s.o.Client, s.o.Nodes, time.Minute)
	perNode, err := checkBlocks(ctx, s.o.Client, nodes)
	check = errors.Join(check, err)
	for _, n := range s.nodes {
		if perNode[n.name] != 1 {
			check = errors.Join(check, fmt.Errorf("node %s has %d blocks, want 1", n.name, perNode[n.name]))
		}
	}
	r := Record{Phase: PhaseController, Metric: "blocks_checked", Value: float64(len(perNode)), Unit: "nodes", Target: "no block twice, none leaked", Met: check == nil, Status: StatusOK}
	if check != nil {
		r.Status, r.Detail = StatusFailed, firstLines(check.Error(), 5)
	}
	s.add(r)
	return nil
}

// populate creates the pods, Services and policies at Rate.
func (s *Sim) populate(ctx context.Context) error {
	s.logf("%d pods, %d Services x %d endpoints, %d NetworkPolicies, at most %.0f objects/s", s.o.Pods, s.o.Services, EndpointsPerService, s.o.Policies, s.o.Rate)
	smp := startSampler(ctx, s.o.Client)
	start := time.Now()
	limit := newLimiter(s.o.Rate)
	defer limit.stop()
	pods := make([]PodSpec, s.o.Pods)
	for i := range pods {
		n := s.nodes[i%len(s.nodes)]
		pods[i] = PodSpec{Namespace: Namespace(i % s.o.Namespaces), Name: fmt.Sprintf("p-%05d", i), Node: n.name, App: i % apps, Client: i%3 == 2}
	}
	err := s.parallel(ctx, len(pods), func(ctx context.Context, i int) error {
		limit.wait(ctx)
		ip, err := s.address(ctx, s.nodes[i%len(s.nodes)])
		if err != nil {
			return err
		}
		pods[i].IP = ip
		return s.createPod(ctx, pods[i])
	})
	if err != nil {
		return err
	}
	for _, p := range pods {
		if p.Client {
			s.clients = append(s.clients, p)
		} else {
			s.backends = append(s.backends, p.IP)
		}
	}
	s.podSeq = len(pods)
	if len(s.backends) == 0 {
		return errors.New("no backend pods: more pods needed")
	}
	err = s.parallel(ctx, s.o.Services, func(ctx context.Context, i int) error {
		ns := Namespace(i % s.o.Namespaces)
		limit.wait(ctx)
		if err := createRetry(ctx, s.o.Client, NewService(ns, i)); err != nil {
			return err
		}
		addrs := make([]netip.Addr, EndpointsPerService)
		for k := range addrs {
			addrs[k] = s.backends[(i*EndpointsPerService+k)%len(s.backends)]
		}
		limit.wait(ctx)
		return createRetry(ctx, s.o.Client, NewEndpointSlice(ns, i, addrs))
	})
	if err != nil {
		return err
	}
	err = s.parallel(ctx, s.o.Policies, func(ctx context.Context, i int) error {
		limit.wait(ctx)
		return createRetry(ctx, s.o.Client, NewPolicy(Namespace(i%s.o.Namespaces), i))
	})
	if err != nil {
		return err
	}
	created := time.Since(start)
	// kwok writes the pods' status after them.
	running, err := s.waitPodsRunning(ctx, s.o.Pods, 10*time.Minute)
	c := smp.stop()
	s.add(Record{Phase: PhaseCluster, Metric: "objects_created_s", Value: created.Seconds(), Unit: "s", Count: s.o.Pods + 2*s.o.Services + s.o.Policies, Context: c, Status: StatusOK})
	r := Record{Phase: PhaseCluster, Metric: "pods_running_s", Value: time.Since(start).Seconds(), Unit: "s", Count: running, Context: c, Status: StatusOK}
	if err != nil {
		r.Status, r.Detail = StatusFailed, err.Error()
	}
	s.add(r)
	return err
}

// waitPodsRunning waits until want simulated pods have their address in
// their status (kwok's stage).
func (s *Sim) waitPodsRunning(ctx context.Context, want int, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		n := 0
		var err error
		for _, ns := range namespaces(s.o.Namespaces) {
			var pods corev1.PodList
			if err = s.o.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
				break
			}
			for _, p := range pods.Items {
				if p.Status.PodIP != "" && p.Status.PodIP == p.Annotations[IPAnnotation] {
					n++
				}
			}
		}
		if err == nil && n >= want {
			return n, nil
		}
		if time.Now().After(deadline) {
			return n, fmt.Errorf("%d of %d simulated pods running with their address after %s (%v)", n, want, timeout, err)
		}
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-time.After(5 * time.Second):
		}
	}
}

// address takes a free address of the node, asking for another block
// when its blocks are full, as vcoild does.
func (s *Sim) address(ctx context.Context, n *simNode) (netip.Addr, error) {
	for range 3 {
		if a, ok := n.take(); ok {
			return a, nil
		}
		if _, _, err := s.requestBlock(ctx, n, s.brw); err != nil {
			return netip.Addr{}, err
		}
	}
	return netip.Addr{}, fmt.Errorf("node %s: no free address after asking for blocks", n.name)
}

// parallel runs f for 0..n-1, Concurrency at a time, and returns the first
// error (the others are cancelled).
func (s *Sim) parallel(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for range max(s.o.Concurrency, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
	for i := 0; i < n && ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// limiter spaces calls at a rate.
type limiter struct {
	t *time.Ticker
}

func newLimiter(rate float64) *limiter {
	return &limiter{t: time.NewTicker(time.Duration(float64(time.Second) / max(rate, 1)))}
}

func (l *limiter) wait(ctx context.Context) {
	select {
	case <-l.t.C:
	case <-ctx.Done():
	}
}

func (l *limiter) stop() { l.t.Stop() }

// createRetry creates obj, retrying what a loaded apiserver refuses for a
// moment; an object that exists already counts as created.
func createRetry(ctx context.Context, cl client.Client, obj client.Object) error {
	err := retry.OnError(retry.DefaultBackoff, transient, func() error {
		err := cl.Create(ctx, obj)
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("create %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

func transient(err error) bool {
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsInternalError(err) || errors.Is(err, context.DeadlineExceeded) || apierrors.IsConflict(err)
}

func typesUID(s string) types.UID { return types.UID(s) }

func firstLines(s string, n int) string {
	lines := 0
	for i, c := range s {
		if c == '\n' {
			lines++
			if lines == n {
				return s[:i] + " ..."
			}
		}
	}
	return s
}
