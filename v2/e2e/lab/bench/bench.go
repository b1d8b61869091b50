// Package bench measures vcoil's service renderer against kube-proxy in
// nftables mode in the lab, side by side in one run (`make
// bench-services`): N Services of 10 endpoints each, for each N the time of a
// full sync after a restart, the time from one endpoint change in the
// apiserver to the new address in the kernel, and the memory and CPU of the
// process. vcoil renders on the first node, kube-proxy on the second (whose
// vcoild is told to leave services alone by the node label
// vcoil.io/service-proxy=disabled).
//
// Both proxies are measured by the same reading of the kernel and of
// /proc: Monitor decodes the kernel's nftables netlink notices in each
// node's network namespace, where vcoil's endpoint addresses come as map
// elements and kube-proxy's in rules, and dates them by the commit of
// their transaction. Neither proxy's own metrics are used, since they do
// not define a sync alike. The package does not bring the lab up or down,
// and it is no regression test: it prints and writes figures.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"k8s.io/client-go/util/retry"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/e2e/lab/topology"
	"github.com/vcoil/vcoil/v2/internal/poll"
)

// Lab is what the benchmark needs of the running lab: kube-proxy started
// and stopped on a node as lab-up does with LAB_KUBE_PROXY=1.
type Lab interface {
	StartKubeProxy(topology.Node) error
	StopKubeProxy(topology.Node) error
	KubeProxyPID(topology.Node) (int, bool)
}

// ServiceProxyLabel turns vcoil's service renderer off on a node (read by
// vcoild when it starts).
const (
	ServiceProxyLabel    = "vcoil.io/service-proxy"
	ServiceProxyDisabled = "disabled"
	vcoilTable           = "vcoil-services"
)

// Options of one run.
type Options struct {
	Lab    Lab
	Client client.Client
	// VcoilNode renders with vcoil, KubeProxyNode with kube-proxy.
	VcoilNode, KubeProxyNode topology.Node
	// Sizes are the Service counts, ascending.
	Sizes []int
	// Changes is the number of endpoint changes per size.
	Changes int
	// ChangeSpacing separates two changes: more than the proxies' minimum
	// sync period (kube-proxy's is 1 s), so that no change waits for it.
	ChangeSpacing time.Duration
	// Timeouts per phase.
	CreateTimeout, VcoilSyncTimeout, KubeProxySyncTimeout, ChangeTimeout, CleanupTimeout time.Duration
	// Concurrency of the apiserver writes.
	Concurrency int
	Log         io.Writer
}

// Run runs the benchmark and returns its records; it cleans up after
// itself (the Services, EndpointSlices, namespace, ServiceCIDR, the label,
// the extra kube-proxy) whatever happens.
func Run(ctx context.Context, o Options) (recs []Record, err error) {
	if _, ok := o.Lab.KubeProxyPID(o.VcoilNode); ok {
		return nil, fmt.Errorf("kube-proxy runs on %s, where vcoil should render alone: the benchmark needs a lab without kube-proxy (make lab-up without LAB_KUBE_PROXY)", o.VcoilNode.Name)
	}
	if n := slices.Max(o.Sizes); n > MaxServices {
		return nil, fmt.Errorf("%d services: the benchmark's ranges hold %d", n, MaxServices)
	}
	defer func() {
		if cerr := cleanup(o); cerr != nil {
			err = errors.Join(err, fmt.Errorf("clean up: %w", cerr))
		}
	}()
	if err := setup(ctx, o); err != nil {
		return nil, err
	}
	monCtx, stop := context.WithCancel(ctx)
	defer stop()
	vcoilMon, err := StartMonitor(monCtx, netnsPath(o.VcoilNode))
	if err != nil {
		return nil, err
	}
	kpMon, err := StartMonitor(monCtx, netnsPath(o.KubeProxyNode))
	if err != nil {
		return nil, err
	}
	created, changes := 0, 0
	for _, n := range o.Sizes {
		o.logf("%d services x %d endpoints: creating %d more", n, EndpointsPerService, n-created)
		// kube-proxy is restarted for its full sync anyway: meanwhile it
		// would spend the apiserver's CPU on a sync a second.
		if err := o.Lab.StopKubeProxy(o.KubeProxyNode); err != nil {
			return recs, err
		}
		start := time.Now()
		if err := createServices(ctx, o, created, n); err != nil {
			return recs, err
		}
		o.logf("    created in %.1fs", time.Since(start).Seconds())
		created = n
		vcoil := proxyUnderTest{name: "vcoil", mon: vcoilMon, node: o.VcoilNode, timeout: o.VcoilSyncTimeout, restart: restartVcoild}
		kp := proxyUnderTest{name: "kube-proxy", mon: kpMon, node: o.KubeProxyNode, timeout: o.KubeProxySyncTimeout, restart: restartKubeProxy}
		var synced []*proxyUnderTest
		for _, p := range []*proxyUnderTest{&vcoil, &kp} {
			r := fullSync(ctx, o, p, n)
			recs = append(recs, r...)
			if r[0].Status == StatusOK {
				synced = append(synced, p)
			}
		}
		r, err := endpointChanges(ctx, o, n, changes, synced)
		recs = append(recs, r...)
		changes += o.Changes
		if err != nil {
			return recs, err
		}
	}
	return recs, nil
}

func (o Options) logf(format string, args ...any) {
	fmt.Fprintf(o.Log, "==> "+format+"\n", args...)
}

func netnsPath(n topology.Node) string { return "/run/netns/" + n.Netns }

// proxyUnderTest is one of the two proxies.
type proxyUnderTest struct {
	name    string
	mon     *Monitor
	node    topology.Node
	timeout time.Duration
	// restart starts the proxy afresh on an empty table and returns the
	// new process.
	restart func(ctx context.Context, o Options) (int, error)
}

// setup makes the ServiceCIDR and the namespace, and hands the second
// node's services to kube-proxy.
func setup(ctx context.Context, o Options) error {
	o.logf("ServiceCIDR %s %s, namespace %s", ServiceCIDRName, ServiceCIDR, Namespace)
	if err := o.Client.Create(ctx, NewServiceCIDR()); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create ServiceCIDR %s: %w", ServiceCIDRName, err)
	}
	if err := poll.Until(ctx, time.Minute, 200*time.Millisecond, func(ctx context.Context) error {
		sc := &networkingv1.ServiceCIDR{}
		if err := o.Client.Get(ctx, client.ObjectKey{Name: ServiceCIDRName}, sc); err != nil {
			return err
		}
		if !metaConditionTrue(sc.Status.Conditions, networkingv1.ServiceCIDRConditionReady) {
			return fmt.Errorf("ServiceCIDR %s not ready: %v", ServiceCIDRName, sc.Status.Conditions)
		}
		return nil
	}); err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if err := o.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", Namespace, err)
	}
	o.logf("%s: vcoil's renderer off (label %s=%s, vcoild restarted), kube-proxy (nftables mode) started", o.KubeProxyNode.Name, ServiceProxyLabel, ServiceProxyDisabled)
	if err := setNodeLabel(ctx, o.Client, o.KubeProxyNode.Name, ServiceProxyDisabled); err != nil {
		return err
	}
	if err := restartVcoildPod(ctx, o.Client, o.KubeProxyNode.Name); err != nil {
		return err
	}
	if _, ok := o.Lab.KubeProxyPID(o.KubeProxyNode); ok {
		return nil
	}
	return o.Lab.StartKubeProxy(o.KubeProxyNode)
}

func metaConditionTrue(conds []metav1.Condition, typ string) bool {
	for _, c := range conds {
		if c.Type == typ {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// cleanup undoes setup and removes every object of the benchmark, bounded
// by CleanupTimeout; it runs also after a failure or an interrupt.
func cleanup(o Options) error {
	ctx, cancel := context.WithTimeout(context.Background(), o.CleanupTimeout)
	defer cancel()
	o.logf("cleaning up: kube-proxy on %s stopped (its tables removed), label removed, vcoild restarted, namespace %s and ServiceCIDR %s deleted",
		o.KubeProxyNode.Name, Namespace, ServiceCIDRName)
	var errs []error
	errs = append(errs, o.Lab.StopKubeProxy(o.KubeProxyNode))
	if err := setNodeLabel(ctx, o.Client, o.KubeProxyNode.Name, ""); err != nil {
		errs = append(errs, err)
	} else {
		errs = append(errs, restartVcoildPod(ctx, o.Client, o.KubeProxyNode.Name))
	}
	// The namespace controller deletes Services one by one, slowly: the
	// benchmark deletes its own, as many at a time as it created them.
	if err := deleteServices(ctx, o); err != nil {
		errs = append(errs, err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	sc := NewServiceCIDR()
	for _, obj := range []client.Object{ns, sc} {
		if err := o.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s: %w", obj.GetName(), err))
			continue
		}
		errs = append(errs, poll.Until(ctx, o.CleanupTimeout, time.Second, func(ctx context.Context) error {
			err := o.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("%s still there (%v)", obj.GetName(), err)
		}))
	}
	return errors.Join(errs...)
}

// setNodeLabel sets the service-proxy label on the node, or removes it
// when value is empty.
func setNodeLabel(ctx context.Context, cl client.Client, node, value string) error {
	v := "null"
	if value != "" {
		v = fmt.Sprintf("%q", value)
	}
	patch := client.RawPatch("application/merge-patch+json", fmt.Appendf(nil, `{"metadata":{"labels":{%q:%s}}}`, ServiceProxyLabel, v))
	if err := cl.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, patch); err != nil {
		return fmt.Errorf("label node %s %s=%s: %w", node, ServiceProxyLabel, value, err)
	}
	return nil
}

// restartVcoildPod deletes the node's vcoild pod, whose DaemonSet makes a
// new one that reads the node's labels when it starts, and waits until the
// new one is ready.
func restartVcoildPod(ctx context.Context, cl client.Client, node string) error {
	old, err := vcoildPod(ctx, cl, node)
	if err != nil {
		return err
	}
	if err := cl.Delete(ctx, old); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("restart vcoild on %s: %w", node, err)
	}
	return poll.Until(ctx, 2*time.Minute, 500*time.Millisecond, func(ctx context.Context) error {
		p, err := vcoildPod(ctx, cl, node)
		if err != nil {
			return err
		}
		if p.UID == old.UID {
			return fmt.Errorf("vcoild pod %s on %s not replaced yet", p.Name, node)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("vcoild pod %s on %s not ready", p.Name, node)
	})
}

func vcoildPod(ctx context.Context, cl client.Client, node string) (*corev1.Pod, error) {
	var pods corev1.PodList
	if err := cl.List(ctx, &pods, client.InNamespace("kube-system"), client.MatchingLabels{"app.kubernetes.io/name": "vcoild"}); err != nil {
		return nil, err
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.Spec.NodeName == node && p.DeletionTimestamp == nil {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no vcoild pod on %s", node)
}

// deleteServices deletes the benchmark's Services and their
// EndpointSlices one by one, Concurrency at a time: one delete of the whole
// collection of 10,000 slices outlasts a request's timeout.
func deleteServices(ctx context.Context, o Options) error {
	var svcs corev1.ServiceList
	if err := o.Client.List(ctx, &svcs, client.InNamespace(Namespace)); err != nil {
		return fmt.Errorf("list the Services in %s: %w", Namespace, err)
	}
	next := make(chan string)
	errs := make(chan error, o.Concurrency)
	var wg sync.WaitGroup
	for range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var first error
			for name := range next {
				meta := metav1.ObjectMeta{Namespace: Namespace, Name: name}
				for _, obj := range []client.Object{&discoveryv1.EndpointSlice{ObjectMeta: meta}, &corev1.Service{ObjectMeta: meta}} {
					if err := o.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) && first == nil {
						first = fmt.Errorf("delete %T %s: %w", obj, name, err)
					}
				}
			}
			errs <- first
		}()
	}
	for _, s := range svcs.Items {
		next <- s.Name
	}
	close(next)
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// createServices creates Services from..to-1 and their EndpointSlices,
// Concurrency at a time.
func createServices(ctx context.Context, o Options, from, to int) error {
	ctx, cancel := context.WithTimeout(ctx, o.CreateTimeout)
	defer cancel()
	next := make(chan int)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				for _, obj := range []client.Object{NewService(i), NewEndpointSlice(i)} {
					// A loaded 2-core apiserver times out now and then: retry
					// those (a create that did land answers AlreadyExists).
					err := retry.OnError(retry.DefaultBackoff, transient, func() error {
						err := o.Client.Create(ctx, obj.DeepCopyObject().(client.Object))
						if apierrors.IsAlreadyExists(err) {
							return nil
						}
						return err
					})
					if err != nil {
						mu.Lock()
						if first == nil {
							first = fmt.Errorf("create %T %s: %w", obj, obj.GetName(), err)
						}
						mu.Unlock()
						cancel()
					}
				}
			}
		}()
	}
	for i := from; i < to && ctx.Err() == nil; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

// fullSync restarts the proxy on an empty table with all n Services in the
// apiserver and measures, identically for both proxies, from the process's
// start until the kernel holds every endpoint address; then the process's
// memory and CPU.
func fullSync(ctx context.Context, o Options, p *proxyUnderTest, n int) []Record {
	rec := func(metric string, v float64, unit string) Record {
		return Record{Proxy: p.name, Services: n, Metric: metric, Value: v, Unit: unit, Status: StatusOK}
	}
	fail := func(status string, err error) []Record {
		o.logf("    %s full sync: %s: %v", p.name, status, err)
		return []Record{{Proxy: p.name, Services: n, Metric: MetricFullSync, Status: status, Detail: err.Error(),
			Reached: p.mon.Count(), Wanted: n * EndpointsPerService}}
	}
	p.mon.Reset()
	pid, err := p.restart(ctx, o)
	if err != nil {
		return fail(StatusError, err)
	}
	started, err := StartTime(pid)
	if err != nil {
		return fail(StatusError, err)
	}
	wctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	done, err := p.mon.WaitCount(wctx, n*EndpointsPerService)
	if err != nil {
		return fail(StatusTimeout, err)
	}
	u, err := ReadUsage(pid)
	if err != nil {
		return fail(StatusError, fmt.Errorf("%s process %d: %w", p.name, pid, err))
	}
	d := done.Sub(started)
	o.logf("    %s full sync: %.2fs (process %d), RSS %.0f MB (peak %.0f MB), CPU %.1fs (its nft runs %.1fs)", p.name, d.Seconds(), pid, mb(u.RSS), mb(u.HWM), u.CPU.Seconds(), u.ChildCPU.Seconds())
	if lost := p.mon.Lost(); lost > 0 {
		// A lost NEWGEN dates its transaction by the next one's.
		o.logf("    %s: the monitor's socket overflowed %d times so far: the sync may be dated late", p.name, lost)
	}
	// The memory a proxy keeps is read a moment after its sync: vcoild
	// hands the first sync's memory back to the OS when its processor
	// reports the sync, a little after the kernel holds everything (with
	// nft monitor, which printed the sync for seconds, the reading came
	// after that by itself).
	kept, err := usageAfter(ctx, pid, done.Add(rssSettle))
	if err != nil {
		return fail(StatusError, fmt.Errorf("%s process %d: %w", p.name, pid, err))
	}
	o.logf("    %s: RSS %.0f MB %s after its sync", p.name, mb(kept.RSS), rssSettle)
	return []Record{
		rec(MetricFullSync, d.Seconds(), "s"),
		rec(MetricRSS, mb(kept.RSS), "MB"),
		rec(MetricHWM, mb(kept.HWM), "MB"),
		rec(MetricCPU, u.CPU.Seconds(), "s"),
		rec(MetricChildCPU, u.ChildCPU.Seconds(), "s"),
	}
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

// rssSettle is how long after its sync a proxy's memory is read.
const rssSettle = 3 * time.Second

// usageAfter reads the process's usage at the time at (now if past).
func usageAfter(ctx context.Context, pid int, at time.Time) (Usage, error) {
	select {
	case <-ctx.Done():
		return Usage{}, ctx.Err()
	case <-time.After(time.Until(at)):
	}
	return ReadUsage(pid)
}

// restartVcoild empties vcoil's table on the vcoil node and kills vcoild,
// which its pod restarts: the new process finds no table and writes it
// whole. The table goes first, while the old process still runs, so that
// the new one can never adopt it.
func restartVcoild(ctx context.Context, o Options) (int, error) {
	ns := netnsPath(o.VcoilNode)
	old, err := FindProcess("vcoild", ns)
	if err != nil {
		return 0, err
	}
	if out, err := runIn(ctx, ns, "nft", "delete", "table", "inet", vcoilTable); err != nil && !strings.Contains(out, "No such file or directory") {
		return 0, fmt.Errorf("delete table inet %s on %s: %w: %s", vcoilTable, o.VcoilNode.Name, err, out)
	}
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		return 0, fmt.Errorf("kill vcoild %d: %w", old, err)
	}
	var pid int
	err = poll.Until(ctx, 2*time.Minute, 20*time.Millisecond, func(context.Context) error {
		p, err := FindProcess("vcoild", ns)
		if err != nil || p == old {
			return fmt.Errorf("vcoild not restarted yet on %s", o.VcoilNode.Name)
		}
		pid = p
		return nil
	})
	return pid, err
}

// restartKubeProxy stops the node's kube-proxy, removes its tables and
// starts it again.
func restartKubeProxy(_ context.Context, o Options) (int, error) {
	if err := o.Lab.StopKubeProxy(o.KubeProxyNode); err != nil {
		return 0, err
	}
	if err := o.Lab.StartKubeProxy(o.KubeProxyNode); err != nil {
		return 0, err
	}
	pid, ok := o.Lab.KubeProxyPID(o.KubeProxyNode)
	if !ok {
		return 0, fmt.Errorf("kube-proxy on %s exited at once", o.KubeProxyNode.Name)
	}
	return pid, nil
}

// endpointChanges replaces one endpoint address of a Service at a time and
// measures, on every synced proxy, from just before the apiserver call to
// the commit of the transaction that brought the new address into the
// kernel (Monitor.Expect).
func endpointChanges(ctx context.Context, o Options, n, first int, proxies []*proxyUnderTest) ([]Record, error) {
	if len(proxies) == 0 || o.Changes == 0 {
		return nil, nil
	}
	lat := map[string][]time.Duration{}
	// inOrder keeps each proxy's latencies in the order of the changes.
	inOrder := map[string][]float64{}
	failures := map[string]string{}
	for k := range o.Changes {
		paced := time.After(o.ChangeSpacing)
		i := (k*7919 + 13) % n
		addr := ChangeAddr(first + k)
		slice := &discoveryv1.EndpointSlice{}
		if err := o.Client.Get(ctx, client.ObjectKey{Namespace: Namespace, Name: ServiceName(i)}, slice); err != nil {
			return nil, fmt.Errorf("get EndpointSlice %s: %w", ServiceName(i), err)
		}
		slice.Endpoints[k%EndpointsPerService].Addresses = []string{addr.String()}
		waits := make([]func(context.Context) (time.Time, error), len(proxies))
		for j, p := range proxies {
			waits[j] = p.mon.Expect(addr)
		}
		before := time.Now()
		if err := o.Client.Update(ctx, slice); err != nil {
			return nil, fmt.Errorf("update EndpointSlice %s: %w", ServiceName(i), err)
		}
		var wg sync.WaitGroup
		var mu sync.Mutex
		for j, p := range proxies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				wctx, cancel := context.WithTimeout(ctx, o.ChangeTimeout)
				defer cancel()
				at, err := waits[j](wctx)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failures[p.name] = err.Error()
					return
				}
				lat[p.name] = append(lat[p.name], at.Sub(before))
				inOrder[p.name] = append(inOrder[p.name], ms(at.Sub(before)))
			}()
		}
		wg.Wait()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		<-paced
	}
	var recs []Record
	for _, p := range proxies {
		d := lat[p.name]
		if len(d) == 0 {
			for _, m := range []string{MetricChangeP50, MetricChangeP99} {
				recs = append(recs, Record{Proxy: p.name, Services: n, Metric: m, Status: StatusTimeout, Detail: failures[p.name]})
			}
			continue
		}
		slices.Sort(d)
		p50, p99 := percentile(d, 50), percentile(d, 99)
		o.logf("    %s endpoint change: p50 %.1f ms, p99 %.1f ms, max %.1f ms over %d changes (%d lost)", p.name, ms(p50), ms(p99), ms(d[len(d)-1]), len(d), o.Changes-len(d))
		status, detail := StatusOK, ""
		if len(d) < o.Changes {
			status, detail = StatusPartial, fmt.Sprintf("%d of %d changes seen; last failure: %s", len(d), o.Changes, failures[p.name])
		}
		for _, r := range []Record{
			{Metric: MetricChangeP50, Value: ms(p50), Unit: "ms"},
			{Metric: MetricChangeP99, Value: ms(p99), Unit: "ms"},
			{Metric: MetricChangeSamples, Value: float64(len(d)), Unit: "changes", Samples: inOrder[p.name]},
		} {
			r.Proxy, r.Services, r.Status, r.Detail = p.name, n, status, detail
			recs = append(recs, r)
		}
	}
	return recs, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// percentile of sorted durations, nearest rank.
func percentile(sorted []time.Duration, p int) time.Duration {
	r := (p*len(sorted) + 99) / 100
	return sorted[max(r, 1)-1]
}

// runIn runs a command in a network namespace and returns its output.
func runIn(ctx context.Context, netns string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + netns, "--"}, args...)...).CombinedOutput()
	return string(out), err
}

// transient says whether a failed apiserver call may succeed when repeated.
func transient(err error) bool {
	// A client-side request timeout surfaces as a plain "context deadline
	// exceeded" from the HTTP body read, not as an API status.
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsInternalError(err) || strings.Contains(err.Error(), "context deadline exceeded") ||
		strings.Contains(err.Error(), "connection reset")
}
