package routerwatch

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/egress"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}, &env) }

// recorder is a Router that records its calls and the state they leave.
type recorder struct {
	mu           sync.Mutex
	calls        []string
	peers        map[string][]netip.Addr
	destinations []netip.Prefix
	// failAdds makes that many AddPeer calls fail.
	failAdds int
	// rejects are addresses AddPeer refuses as an invalid configuration.
	rejects []netip.Addr
}

func (r *recorder) SetDestinations(_ context.Context, d []netip.Prefix) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf("set %v", d))
	r.destinations = slices.Clone(d)
	return nil
}

func (r *recorder) AddPeer(_ context.Context, id string, ips []netip.Addr) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failAdds > 0 {
		r.failAdds--
		r.calls = append(r.calls, fmt.Sprintf("add %s %v failed", id, ips))
		return errors.New("injected failure")
	}
	if slices.ContainsFunc(ips, func(a netip.Addr) bool { return slices.Contains(r.rejects, a) }) {
		r.calls = append(r.calls, fmt.Sprintf("add %s %v rejected", id, ips))
		return fmt.Errorf("%w: the router has no address of that family", egress.ErrInvalidConfig)
	}
	r.calls = append(r.calls, fmt.Sprintf("add %s %v", id, ips))
	if _, ok := r.peers[id]; ok {
		return fmt.Errorf("peer %s added twice", id)
	}
	r.peers[id] = slices.Clone(ips)
	return nil
}

func (r *recorder) RemovePeer(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, "remove "+id)
	if _, ok := r.peers[id]; !ok {
		return fmt.Errorf("peer %s removed but unknown", id)
	}
	delete(r.peers, id)
	return nil
}

// state describes the peers (sorted "uid ips") and destinations.
func (r *recorder) state() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ps []string
	for id, ips := range r.peers {
		ps = append(ps, fmt.Sprintf("%s %v", id, ips))
	}
	slices.Sort(ps)
	return fmt.Sprintf("peers [%s] destinations %v", strings.Join(ps, ", "), r.destinations)
}

// expect is the state() of peers ("uid [ips]", any order) and destinations.
func expect(destinations string, peers ...string) string {
	peers = slices.Sorted(slices.Values(peers))
	return fmt.Sprintf("peers [%s] destinations %s", strings.Join(peers, ", "), destinations)
}

func (r *recorder) callLog() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// router is one running watcher with its recorder.
type router struct {
	rec     *recorder
	watcher *Watcher
	reg     *prometheus.Registry
	metrics *Metrics
}

// startRouter runs a manager as vcoil-egress does, for egress.
func startRouter(t *testing.T, egress types.NamespacedName, rec *recorder) *router {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{ByObject: CacheOptions(egress)},
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := Setup(mgr, Options{Egress: egress, Router: rec, Metrics: m, Log: ctrl.Log.WithName("routerwatch")})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Ready(nil); err == nil {
		t.Error("the watcher is ready before it started")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	poll.Eventually(t, 20*time.Second, func() error { return w.Ready(nil) })
	return &router{rec: rec, watcher: w, reg: reg, metrics: m}
}

func newRecorder() *recorder { return &recorder{peers: map[string][]netip.Addr{}} }

// namespace creates a namespace for the test.
func namespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ns) })
	return ns.Name
}

func createEgress(t *testing.T, ns, name string, destinations ...string) *vcoilv2.Egress {
	t.Helper()
	eg := &vcoilv2.Egress{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       vcoilv2.EgressSpec{Destinations: destinations},
	}
	if err := env.Client.Create(context.Background(), eg); err != nil {
		t.Fatalf("create egress %s/%s: %v", ns, name, err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), eg) })
	return eg
}

// createPod creates a pod with annotations and, when ips are given, a
// running status with those addresses.
func createPod(t *testing.T, ns, name string, annotations map[string]string, hostNetwork bool, ips ...string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec: corev1.PodSpec{
			HostNetwork: hostNetwork,
			Containers:  []corev1.Container{{Name: "c", Image: "example.invalid/c"}},
		},
	}
	if err := env.Client.Create(context.Background(), pod); err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
	t.Cleanup(func() { _ = client.IgnoreNotFound(env.Client.Delete(context.Background(), pod)) })
	if len(ips) > 0 {
		setStatus(t, pod, corev1.PodRunning, ips...)
	}
	return pod
}

func setStatus(t *testing.T, pod *corev1.Pod, phase corev1.PodPhase, ips ...string) {
	t.Helper()
	pod.Status.Phase = phase
	pod.Status.PodIPs = nil
	for _, ip := range ips {
		pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	if len(ips) > 0 {
		pod.Status.PodIP = ips[0]
	}
	if err := env.Client.Status().Update(context.Background(), pod); err != nil {
		t.Fatalf("set status of pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
}

func annotate(t *testing.T, pod *corev1.Pod, key, value string) {
	t.Helper()
	patch := client.MergeFrom(pod.DeepCopy())
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	if value == "" {
		delete(pod.Annotations, key)
	} else {
		pod.Annotations[key] = value
	}
	if err := env.Client.Patch(context.Background(), pod, patch); err != nil {
		t.Fatalf("annotate pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
}

func deletePod(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	if err := env.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatalf("delete pod %s/%s: %v", pod.Namespace, pod.Name, err)
	}
}

// waitState waits until the recorder's state is want.
func waitState(t *testing.T, rec *recorder, want string) {
	t.Helper()
	poll.Eventually(t, 20*time.Second, func() error {
		if got := rec.state(); got != want {
			return fmt.Errorf("router state:\n got %s\nwant %s\ncalls %q", got, want, rec.callLog())
		}
		return nil
	})
}

func TestAClientPodIsAPeerWhileItsAnnotationNamesTheEgress(t *testing.T) {
	ns := namespace(t, "egress")
	createEgress(t, ns, "web", "203.0.113.0/24")
	key := vcoilv2.AnnotationEgressPrefix + ns
	// A pod named before the router starts is a peer once it is ready.
	early := createPod(t, ns, "early", map[string]string{key: "web"}, false, "10.1.0.1")
	r := startRouter(t, types.NamespacedName{Namespace: ns, Name: "web"}, newRecorder())
	if got, want := r.rec.state(), expect("[203.0.113.0/24]", fmt.Sprintf("%s [10.1.0.1]", early.UID)); got != want {
		t.Fatalf("when ready: got %s, want %s", got, want)
	}

	// A pod without addresses yet is no peer; it becomes one with them.
	pod := createPod(t, ns, "client", map[string]string{key: "other, web"}, false)
	setStatus(t, pod, corev1.PodRunning, "10.1.0.2", "fd00:10::2")
	waitState(t, r.rec, expect("[203.0.113.0/24]", fmt.Sprintf("%s [10.1.0.1]", early.UID), fmt.Sprintf("%s [10.1.0.2 fd00:10::2]", pod.UID)))

	// Annotated for other Egresses only: removed; named again: added.
	annotate(t, pod, key, "other,webx")
	waitState(t, r.rec, expect("[203.0.113.0/24]", fmt.Sprintf("%s [10.1.0.1]", early.UID)))
	annotate(t, pod, key, " web ")
	waitState(t, r.rec, expect("[203.0.113.0/24]", fmt.Sprintf("%s [10.1.0.1]", early.UID), fmt.Sprintf("%s [10.1.0.2 fd00:10::2]", pod.UID)))
	// The annotation removed altogether.
	annotate(t, early, key, "")
	waitState(t, r.rec, expect("[203.0.113.0/24]", fmt.Sprintf("%s [10.1.0.2 fd00:10::2]", pod.UID)))

	// Deleted: removed by its UID.
	deletePod(t, pod)
	waitState(t, r.rec, expect("[203.0.113.0/24]"))
	want := []string{
		"set [203.0.113.0/24]",
		fmt.Sprintf("add %s [10.1.0.1]", early.UID),
		fmt.Sprintf("add %s [10.1.0.2 fd00:10::2]", pod.UID),
		"remove " + string(pod.UID),
		fmt.Sprintf("add %s [10.1.0.2 fd00:10::2]", pod.UID),
		"remove " + string(early.UID),
		"remove " + string(pod.UID),
	}
	if got := r.rec.callLog(); !slices.Equal(got, want) {
		t.Errorf("calls:\n got %q\nwant %q", got, want)
	}
	if got := testutil.ToFloat64(r.metrics.peers); got != 0 {
		t.Errorf("peers metric = %v, want 0", got)
	}
}

func TestClientPodsOfEveryNamespaceArePeersButOnlyByTheEgresssNamespaceAnnotation(t *testing.T) {
	egressNS, ns1, ns2 := namespace(t, "egress"), namespace(t, "team-a"), namespace(t, "team-b")
	createEgress(t, egressNS, "web", "203.0.113.0/24")
	r := startRouter(t, types.NamespacedName{Namespace: egressNS, Name: "web"}, newRecorder())
	key := vcoilv2.AnnotationEgressPrefix + egressNS
	a := createPod(t, ns1, "a", map[string]string{key: "web"}, false, "10.1.0.1")
	b := createPod(t, ns2, "b", map[string]string{key: "web"}, false, "10.1.0.2")
	// An Egress of the same name in another namespace is another Egress.
	createPod(t, ns2, "c", map[string]string{vcoilv2.AnnotationEgressPrefix + ns1: "web"}, false, "10.1.0.3")
	waitState(t, r.rec, expect("[203.0.113.0/24]", fmt.Sprintf("%s [10.1.0.1]", a.UID), fmt.Sprintf("%s [10.1.0.2]", b.UID)))
	if got := testutil.ToFloat64(r.metrics.peers); got != 2 {
		t.Errorf("peers metric = %v, want 2", got)
	}
}

func TestTwoPodsWithOneAddressAreBothPeersAndTheSurvivorStays(t *testing.T) {
	ns := namespace(t, "egress")
	createEgress(t, ns, "web", "203.0.113.0/24")
	r := startRouter(t, types.NamespacedName{Namespace: ns, Name: "web"}, newRecorder())
	key := vcoilv2.AnnotationEgressPrefix + ns
	// A finished pod whose address went to a new pod, as the kubelet
	// leaves it until it is deleted.
	old := createPod(t, ns, "old", map[string]string{key: "web"}, false, "10.1.0.9")
	waitState(t, r.rec, expect("[203.0.113.0/24]", fmt.Sprintf("%s [10.1.0.9]", old.UID)))
	young := createPod(t, ns, "young", map[string]string{key: "web"}, false, "10.1.0.9")
	waitState(t, r.rec, expect("[203.0.113.0/24]", fmt.Sprintf("%s [10.1.0.9]", old.UID), fmt.Sprintf("%s [10.1.0.9]", young.UID)))

	// The old one finishes: only it is removed, by its own id.
	setStatus(t, old, corev1.PodSucceeded, "10.1.0.9")
	waitState(t, r.rec, expect("[203.0.113.0/24]", fmt.Sprintf("%s [10.1.0.9]", young.UID)))
	deletePod(t, old)
	// A pod recreated under the old name is a new peer (a new UID).
	again := createPod(t, ns, "old", map[string]string{key: "web"}, false, "10.1.0.10")
	waitState(t, r.rec, expect("[203.0.113.0/24]", fmt.Sprintf("%s [10.1.0.10]", again.UID), fmt.Sprintf("%s [10.1.0.9]", young.UID)))
	if n := slices.Index(r.rec.callLog(), "remove "+string(young.UID)); n >= 0 {
		t.Errorf("the surviving pod was removed: calls %q", r.rec.callLog())
	}
}

func TestHostNetworkPodsAreNoPeers(t *testing.T) {
	ns := namespace(t, "egress")
	createEgress(t, ns, "web", "203.0.113.0/24")
	r := startRouter(t, types.NamespacedName{Namespace: ns, Name: "web"}, newRecorder())
	key := vcoilv2.AnnotationEgressPrefix + ns
	createPod(t, ns, "host", map[string]string{key: "web"}, true, "198.18.0.5")
	pod := createPod(t, ns, "pod", map[string]string{key: "web"}, false, "10.1.0.5")
	// The pod created after the host network one shows that the host
	// network pod's events went by.
	waitState(t, r.rec, expect("[203.0.113.0/24]", fmt.Sprintf("%s [10.1.0.5]", pod.UID)))
	for _, c := range r.rec.callLog() {
		if strings.Contains(c, "198.18.0.5") {
			t.Errorf("host network pod handed to the router: %q", c)
		}
	}
}

func TestTheEgresssDestinationsFollowItsSpec(t *testing.T) {
	ns := namespace(t, "egress")
	eg := createEgress(t, ns, "web", "203.0.113.0/24")
	// Another Egress's changes are not this router's.
	other := createEgress(t, ns, "other", "198.51.100.0/24")
	r := startRouter(t, types.NamespacedName{Namespace: ns, Name: "web"}, newRecorder())
	if got := testutil.ToFloat64(r.metrics.destinations); got != 1 {
		t.Errorf("destinations metric = %v, want 1", got)
	}

	eg.Spec.Destinations = []string{"203.0.113.0/25", "198.51.100.7/24", "2001:db8::/64"}
	if err := env.Client.Update(context.Background(), eg); err != nil {
		t.Fatal(err)
	}
	// Masked: 198.51.100.7/24 is the network 198.51.100.0/24.
	waitState(t, r.rec, expect("[203.0.113.0/25 198.51.100.0/24 2001:db8::/64]"))
	other.Spec.Destinations = []string{"198.51.100.0/25"}
	if err := env.Client.Update(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	// A label change of the Egress does not call the Router again.
	patch := client.MergeFrom(eg.DeepCopy())
	eg.Labels = map[string]string{"touched": "yes"}
	if err := env.Client.Patch(context.Background(), eg, patch); err != nil {
		t.Fatal(err)
	}
	eg.Spec.Destinations = []string{"203.0.113.0/24"}
	if err := env.Client.Update(context.Background(), eg); err != nil {
		t.Fatal(err)
	}
	waitState(t, r.rec, expect("[203.0.113.0/24]"))
	want := []string{
		"set [203.0.113.0/24]",
		"set [203.0.113.0/25 198.51.100.0/24 2001:db8::/64]",
		"set [203.0.113.0/24]",
	}
	if got := r.rec.callLog(); !slices.Equal(got, want) {
		t.Errorf("calls:\n got %q\nwant %q", got, want)
	}
	if got := testutil.ToFloat64(r.metrics.destinations); got != 1 {
		t.Errorf("destinations metric = %v, want 1", got)
	}
}

func TestAFailedAddIsCountedAndRetried(t *testing.T) {
	ns := namespace(t, "egress")
	createEgress(t, ns, "web", "203.0.113.0/24")
	rec := newRecorder()
	r := startRouter(t, types.NamespacedName{Namespace: ns, Name: "web"}, rec)
	rec.mu.Lock()
	rec.failAdds = 1
	rec.mu.Unlock()
	pod := createPod(t, ns, "client", map[string]string{vcoilv2.AnnotationEgressPrefix + ns: "web"}, false, "10.1.0.1")
	waitState(t, rec, expect("[203.0.113.0/24]", fmt.Sprintf("%s [10.1.0.1]", pod.UID)))
	if got := testutil.ToFloat64(r.metrics.errors.WithLabelValues(opAddPeer)); got != 1 {
		t.Errorf("add_peer errors = %v, want 1", got)
	}
	if got := testutil.ToFloat64(r.metrics.peers); got != 1 {
		t.Errorf("peers metric = %v, want 1", got)
	}
}

func TestAPodTheRouterRejectsIsTriedOnceAndKeepsNoOneFromBeingServed(t *testing.T) {
	ns := namespace(t, "egress")
	createEgress(t, ns, "web", "203.0.113.0/24")
	key := vcoilv2.AnnotationEgressPrefix + ns
	// Present at start: the router becomes ready all the same.
	v6 := createPod(t, ns, "v6-only", map[string]string{key: "web"}, false, "fd00:10::7")
	rec := newRecorder()
	rec.rejects = []netip.Addr{netip.MustParseAddr("fd00:10::7")}
	r := startRouter(t, types.NamespacedName{Namespace: ns, Name: "web"}, rec)
	pod := createPod(t, ns, "v4", map[string]string{key: "web"}, false, "10.1.0.7")
	waitState(t, rec, expect("[203.0.113.0/24]", fmt.Sprintf("%s [10.1.0.7]", pod.UID)))
	// Rejected by the initial pass and by the controller's first reconcile,
	// but not retried: retries would have come 5, 10, 20, ... ms apart
	// while the other pod was created and added.
	rejected := func() int {
		n := 0
		for _, c := range rec.callLog() {
			if strings.HasPrefix(c, "add "+string(v6.UID)) {
				n++
			}
		}
		return n
	}
	n := rejected()
	if n == 0 || n > 2 {
		t.Errorf("the rejected pod was tried %d times: %q", n, rec.callLog())
	}
	if got := testutil.ToFloat64(r.metrics.errors.WithLabelValues(opAddPeer)); got != float64(n) {
		t.Errorf("add_peer errors = %v, want %d", got, n)
	}
}

func TestTrimPodKeepsWhatTheWatcherReads(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "app", Name: "p", UID: "u1", ResourceVersion: "7",
			Labels: map[string]string{"app": "x"},
			Annotations: map[string]string{
				vcoilv2.AnnotationEgressPrefix + "egress": "web",
				vcoilv2.AnnotationEgressPrefix + "other":  "web",
				"big":                                     strings.Repeat("x", 1000),
			},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		},
		Spec: corev1.PodSpec{HostNetwork: true, NodeName: "n1", Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.1.0.1",
			PodIPs:     []corev1.PodIP{{IP: "10.1.0.1"}, {IP: "fd00::1"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady}},
		},
	}
	got, err := TrimPod("egress")(pod)
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "app", Name: "p", UID: "u1", ResourceVersion: "7",
			Annotations: map[string]string{vcoilv2.AnnotationEgressPrefix + "egress": "web"},
		},
		Spec: corev1.PodSpec{HostNetwork: true},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.1.0.1",
			PodIPs: []corev1.PodIP{{IP: "10.1.0.1"}, {IP: "fd00::1"}},
		},
	}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("trimmed:\n got %+v\nwant %+v", got, want)
	}
}

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		annotation string
		want       bool
	}{
		{"web", true},
		{"a,web", true},
		{" a , web ", true},
		{"webx", false},
		{"a web", false},
		{"", false},
	} {
		if got := Names(tc.annotation, "web"); got != tc.want {
			t.Errorf("Names(%q, web) = %v, want %v", tc.annotation, got, tc.want)
		}
	}
}

func TestParseDestinationsNamesTheBadEntry(t *testing.T) {
	_, err := ParseDestinations([]string{"203.0.113.0/24", "203.0.113.1"})
	if err == nil || !strings.Contains(err.Error(), `spec.destinations[1] "203.0.113.1"`) {
		t.Errorf("error = %v, want one naming spec.destinations[1]", err)
	}
}
