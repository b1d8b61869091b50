package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/informerlist"
	"github.com/vcoil/vcoil/v2/pkg/kubescheme"
	"github.com/vcoil/vcoil/v2/pkg/memlimit"
	"github.com/vcoil/vcoil/v2/pkg/service/proxy"
)

// The memory benchmark's objects: Services without selector with explicit
// ClusterIPs of a ServiceCIDR of their own (envtest's default range is a
// /24), each with one EndpointSlice of ten ready endpoints, the shape of the
// issue's measurement (make bench-services).
const (
	memNamespace   = "mem"
	memNodeName    = "mem-node"
	memEndpoints   = 10
	memServiceCIDR = "10.96.0.0/16"
	// The child process's settings (see TestMemoryChild).
	envChildKubeconfig  = "VCOIL_MEMORY_CHILD_KUBECONFIG"
	envChildNetns       = "VCOIL_MEMORY_CHILD_NETNS"
	envChildServices    = "VCOIL_MEMORY_CHILD_SERVICES"
	envChildHeapProfile = "VCOIL_MEMORY_CHILD_HEAP_PROFILE"
	envChildCPUProfile  = "VCOIL_MEMORY_CHILD_CPU_PROFILE"
	// VCOIL_MEMORY_HEAP_PROFILE, set by whoever runs the benchmark, names
	// the file the child writes its heap profile to, after the sync.
	envHeapProfile = "VCOIL_MEMORY_HEAP_PROFILE"
	// VCOIL_MEMORY_CPU_PROFILE names the file the child writes its CPU
	// profile to, from its start until its first sync completed.
	envCPUProfile = "VCOIL_MEMORY_CPU_PROFILE"
	// VCOIL_MEMORY_SERVICES overrides the number of Services (10,000).
	envServices = "VCOIL_MEMORY_SERVICES"
	// VCOIL_MEMORY_KUBECONFIG names the kubeconfig of an apiserver that
	// already holds the objects (as startMemoryAPIServer makes them), to
	// measure again without creating them anew.
	envKubeconfig = "VCOIL_MEMORY_KUBECONFIG"
)

func memAddr(base netip.Addr, n int) netip.Addr {
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) + uint32(n)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func memService(i int) *corev1.Service {
	ip := memAddr(netip.MustParsePrefix(memServiceCIDR).Addr(), 16+i).String()
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: memNamespace, Name: fmt.Sprintf("s-%05d", i)},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
}

func memEndpointSlice(i int) *discoveryv1.EndpointSlice {
	name := fmt.Sprintf("s-%05d", i)
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: memNamespace, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "mem.vcoil.io"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To[int32](8080)}},
	}
	for j := range memEndpoints {
		// Endpoints as the EndpointSlice controller writes them for pods,
		// with what the cache transforms should drop.
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{memAddr(netip.MustParseAddr("10.200.0.0"), i*memEndpoints+j+1).String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			NodeName:   ptr.To(fmt.Sprintf("node-%d", j%3)),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: memNamespace, Name: fmt.Sprintf("%s-pod-%d", name, j), UID: types.UID(fmt.Sprintf("0b9a5e50-8b0a-4f0e-9e4e-%012d", i*memEndpoints+j))},
		})
	}
	return s
}

// createMemObjects creates the ServiceCIDR, the namespace, n Services and
// their EndpointSlices, 16 writes at a time.
func createMemObjects(ctx context.Context, tb testing.TB, c client.Client, n int) {
	tb.Helper()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: memNamespace}}); err != nil {
		tb.Fatal(err)
	}
	sc := &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: "mem"}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: []string{memServiceCIDR}}}
	if err := c.Create(ctx, sc); err != nil {
		tb.Fatalf("create ServiceCIDR %s: %v", memServiceCIDR, err)
	}
	// envtest runs no kube-controller-manager, whose ServiceCIDR controller
	// would mark it ready; the allocator takes ClusterIPs only from ready
	// ones.
	apimeta.SetStatusCondition(&sc.Status.Conditions, metav1.Condition{
		Type: networkingv1.ServiceCIDRConditionReady, Status: metav1.ConditionTrue, Reason: "Test", Message: "set by the test",
	})
	if err := c.Status().Update(ctx, sc); err != nil {
		tb.Fatalf("make ServiceCIDR %s ready: %v", memServiceCIDR, err)
	}
	// The allocator learns of the range through its informer: poll with
	// a Service until it is taken.
	probe := memService(-15)
	probe.Name = "probe"
	poll.Eventually(tb, 30*time.Second, func() error { return c.Create(ctx, probe) })
	if err := c.Delete(ctx, probe); err != nil {
		tb.Fatal(err)
	}
	work := make(chan int)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range work {
				if err := c.Create(ctx, memService(i)); err != nil {
					errs <- fmt.Errorf("create Service %d: %w", i, err)
					return
				}
				if err := c.Create(ctx, memEndpointSlice(i)); err != nil {
					errs <- fmt.Errorf("create EndpointSlice %d: %w", i, err)
					return
				}
			}
		})
	}
	func() {
		defer close(work)
		for i := range n {
			select {
			case work <- i:
			case err := <-errs:
				tb.Fatal(err)
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		tb.Fatal(err)
	}
}

// memoryReport is what the child measured, in bytes.
type memoryReport struct {
	SyncSeconds float64
	// RSS and HWM right after the first sync, as the lab reads them, and
	// RSS's anonymous and file-backed parts (the binary's code is most of
	// the latter).
	RSS, HWM, RSSAnon, RSSFile int64
	// After a garbage collection: the Go heap in use, the heap's spans, and
	// what the runtime got from the OS; then RSS.
	HeapInuse, HeapSys, HeapReleased, Sys uint64
	RSSAfterGC                            int64
	// RSS once debug.FreeOSMemory returned what the heap does not use.
	RSSAfterFree int64
}

// BenchmarkMemory10kServices measures vcoild's service proxy with 10,000
// Services of 10 endpoints each (VCOIL_MEMORY_SERVICES for another number)
// after its first full sync: RSS and its peak (the target is RSS
// <= 150 MB), and the Go heap after a collection. The proxy runs in a child
// process of its own (this test binary, TestMemoryChild), with the cache
// options and Setup vcoild uses and a test namespace as the node's, so that
// neither envtest's client nor the objects it created count. Run as root:
//
//	go test -run '^$' -bench Memory -benchtime 1x ./v2/pkg/service/proxy
//
// With VCOIL_MEMORY_HEAP_PROFILE=file, the child writes its heap profile
// there after the sync (go tool pprof -top file).
func BenchmarkMemory10kServices(b *testing.B) {
	netnstest.RequireRoot(b)
	n := 10000
	if s := os.Getenv(envServices); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatalf("%s=%q: %v", envServices, s, err)
		}
	}
	kubeconfig := os.Getenv(envKubeconfig)
	if kubeconfig == "" {
		kubeconfig = startMemoryAPIServer(b, n)
	}

	var r memoryReport
	for b.Loop() {
		node := netnstest.New(b, "node")
		r = runMemoryChild(b, kubeconfig, node.Path(), n)
		node.Remove()
	}
	mb := func(v int64) float64 { return float64(v) / (1 << 20) }
	b.ReportMetric(r.SyncSeconds, "sync-s")
	b.ReportMetric(mb(r.RSS), "rss-MB")
	b.ReportMetric(mb(r.HWM), "hwm-MB")
	b.ReportMetric(mb(r.RSSAnon), "rss-anon-MB")
	b.ReportMetric(mb(int64(r.HeapInuse)), "heapinuse-MB")
	b.ReportMetric(mb(int64(r.HeapSys)), "heapsys-MB")
	b.ReportMetric(mb(int64(r.Sys)), "sys-MB")
	b.ReportMetric(mb(r.RSSAfterGC), "rss-gc-MB")
	b.ReportMetric(mb(r.RSSAfterFree), "rss-free-MB")
	b.Logf("%d services: sync %.2fs; RSS %.0f MB (anonymous %.0f MB, files %.0f MB), HWM %.0f MB; after GC heap in use %.0f MB, heap sys %.0f MB (released %.0f MB), sys %.0f MB, RSS %.0f MB; after FreeOSMemory RSS %.0f MB",
		n, r.SyncSeconds, mb(r.RSS), mb(r.RSSAnon), mb(r.RSSFile), mb(r.HWM), mb(int64(r.HeapInuse)), mb(int64(r.HeapSys)), mb(int64(r.HeapReleased)), mb(int64(r.Sys)), mb(r.RSSAfterGC), mb(r.RSSAfterFree))
}

// startMemoryAPIServer starts envtest with n Services and their
// EndpointSlices and this node's Node, and returns its kubeconfig file.
func startMemoryAPIServer(tb testing.TB, n int) string {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = env.Stop() })
	start := time.Now()
	createMemObjects(tb.Context(), tb, env.Client, n)
	tb.Logf("created %d Services and EndpointSlices in %v", n, time.Since(start).Round(time.Second))
	env.CreateNode(tb, memNodeName, "198.18.0.1")
	kubeconfig := filepath.Join(tb.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		tb.Fatal(err)
	}
	return kubeconfig
}

// runMemoryChild runs TestMemoryChild in a process of its own and returns
// its report.
func runMemoryChild(b *testing.B, kubeconfig, netns string, n int) memoryReport {
	b.Helper()
	cmd := exec.CommandContext(b.Context(), os.Args[0], "-test.run=^TestMemoryChild$", "-test.v")
	cmd.Env = append(os.Environ(),
		envChildKubeconfig+"="+kubeconfig, envChildNetns+"="+netns, envChildServices+"="+strconv.Itoa(n),
		envChildHeapProfile+"="+os.Getenv(envHeapProfile), envChildCPUProfile+"="+os.Getenv(envCPUProfile))
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("memory child: %v\n%s", err, out)
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		if j, ok := strings.CutPrefix(line, "MEMORY "); ok {
			var r memoryReport
			if err := json.Unmarshal([]byte(j), &r); err != nil {
				b.Fatalf("memory child's report %q: %v", j, err)
			}
			return r
		}
	}
	b.Fatalf("memory child printed no report:\n%s", out)
	return memoryReport{}
}

// TestMemoryChild is BenchmarkMemory10kServices's child process: vcoild's
// service proxy alone, measured after its first sync. It is skipped unless
// the benchmark runs it.
func TestMemoryChild(t *testing.T) {
	kubeconfig := os.Getenv(envChildKubeconfig)
	if kubeconfig == "" {
		t.Skip("run by BenchmarkMemory10kServices only")
	}
	n, err := strconv.Atoi(os.Getenv(envChildServices))
	if err != nil {
		t.Fatal(err)
	}
	// As vcoild: its informers fill their caches with a LIST.
	informerlist.UseLists(os.LookupEnv)
	stopProfile := func() {}
	if path := os.Getenv(envChildCPUProfile); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		stopProfile = func() {
			pprof.StopCPUProfile()
			if err := f.Close(); err != nil {
				t.Error(err)
			}
		}
	}
	data, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	scheme, err := kubescheme.New()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{ByObject: proxy.CacheOptions(memNodeName, false)},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The memory limit as vcoild keeps it (a floor at GOMEMLIMIT, when
	// the benchmark runs with one).
	limit := memlimit.New(logr.Discard())
	if err := mgr.Add(limit); err != nil {
		t.Fatal(err)
	}
	p, err := proxy.Setup(t.Context(), mgr, proxy.Options{
		NodeName: memNodeName, Netns: os.Getenv(envChildNetns), PodIfPrefix: "mem", Log: logr.Discard(),
		MemoryLimit: limit,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	select {
	case <-p.Synced():
	case err := <-done:
		t.Fatalf("manager stopped before the first sync: %v", err)
	case <-time.After(5 * time.Minute):
		t.Fatal("no sync within 5 minutes")
	}
	r := memoryReport{SyncSeconds: time.Since(start).Seconds()}
	stopProfile()
	st := procStatus(t)
	r.RSS, r.HWM, r.RSSAnon, r.RSSFile = st["VmRSS"], st["VmHWM"], st["RssAnon"], st["RssFile"]

	// The services must all be there, or the figures mean nothing.
	var svcs corev1.ServiceList
	if err := mgr.GetCache().List(ctx, &svcs, client.InNamespace(memNamespace), client.UnsafeDisableDeepCopy); err != nil || len(svcs.Items) != n {
		t.Fatalf("the cache holds %d Services, want %d (%v)", len(svcs.Items), n, err)
	}
	svcs = corev1.ServiceList{}

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.HeapInuse, r.HeapSys, r.HeapReleased, r.Sys = ms.HeapInuse, ms.HeapSys, ms.HeapReleased, ms.Sys
	r.RSSAfterGC = procStatus(t)["VmRSS"]
	if path := os.Getenv(envChildHeapProfile); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	debug.FreeOSMemory()
	r.RSSAfterFree = procStatus(t)["VmRSS"]
	j, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("MEMORY %s\n", j)
}

// procStatus reads the memory sizes of /proc/self/status, in bytes, by
// name (VmRSS, VmHWM, RssAnon, ...).
func procStatus(t *testing.T) map[string]int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[2] == "kB" {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			out[strings.TrimSuffix(f[0], ":")] = v << 10
		}
	}
	return out
}
