package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/controllertest"
	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/checkpoint"
	"github.com/vcoil/vcoil/v2/pkg/cnicontract"
	"github.com/vcoil/vcoil/v2/pkg/cnirpc"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/nodeevents"
	"github.com/vcoil/vcoil/v2/pkg/nodeipam"
)

// These tests drive the server with a real apiserver, vcoil-controller's
// reconcilers and a real checkpoint directory. The dataplane is an in-memory
// stand-in that records what it was asked: the Linux and VPP dataplanes are
// tested for real in their own packages and in the end-to-end CNI tests.

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{}, &env, controllertest.Start, createPoolsAndNamespaces)
}

// createPoolsAndNamespaces makes the pools and namespaces every test uses.
func createPoolsAndNamespaces(_ context.Context, e *testenv.Env) (func(), error) {
	c := context.Background()
	if err := e.Client.Create(c, &vcoilv2.AddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec:       vcoilv2.AddressPoolSpec{BlockSizeBits: 3, Subnets: []vcoilv2.SubnetSet{{IPv4: ptr.To("10.60.0.0/24"), IPv6: ptr.To("fd00:60::/120")}}},
	}); err != nil {
		return nil, err
	}
	if err := e.Client.Create(c, &vcoilv2.AddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: "public"},
		Spec:       vcoilv2.AddressPoolSpec{BlockSizeBits: 2, Subnets: []vcoilv2.SubnetSet{{IPv4: ptr.To("203.0.113.0/28"), IPv6: ptr.To("fd00:203::/124")}}},
	}); err != nil {
		return nil, err
	}
	if err := e.Client.Create(c, &vcoilv2.AddressPool{
		ObjectMeta: metav1.ObjectMeta{Name: "lb"},
		Spec:       vcoilv2.AddressPoolSpec{Usage: vcoilv2.UsageLoadBalancer, BlockSizeBits: 5, Subnets: []vcoilv2.SubnetSet{{IPv4: ptr.To("198.51.100.0/28")}}},
	}); err != nil {
		return nil, err
	}
	for name, pool := range map[string]string{"plain": "", "dmz": "public", "broken": "nope", "services": "lb"} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if pool != "" {
			ns.Annotations = map[string]string{vcoilv2.AnnotationPool: pool}
		}
		if err := e.Client.Create(c, ns); err != nil {
			return nil, err
		}
	}
	return func() {}, nil
}

// fakeDataplane records pods in memory.
type fakeDataplane struct {
	mu        sync.Mutex
	pods      map[dataplane.PodKey]dataplane.Pod
	failSetup error
	teardowns int
}

func newFakeDataplane() *fakeDataplane {
	return &fakeDataplane{pods: map[dataplane.PodKey]dataplane.Pod{}}
}

func (f *fakeDataplane) Name() string                  { return "fake" }
func (f *fakeDataplane) Init(context.Context) error    { return nil }
func (f *fakeDataplane) Healthy(context.Context) error { return nil }
func (f *fakeDataplane) SetupPod(_ context.Context, p dataplane.Pod) (dataplane.Interfaces, error) {
	// Like the real dataplanes, which build names and tags from the key.
	if err := p.PodKey.Validate(); err != nil {
		return dataplane.Interfaces{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failSetup != nil {
		return dataplane.Interfaces{}, f.failSetup
	}
	f.pods[p.PodKey] = p
	return dataplane.Interfaces{HostIfName: "fake" + p.ContainerID[:4], MTU: 1500}, nil
}
func (f *fakeDataplane) CheckPod(_ context.Context, p dataplane.Pod) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	got, ok := f.pods[p.PodKey]
	if !ok || got.IPv4 != p.IPv4 || got.IPv6 != p.IPv6 {
		return fmt.Errorf("pod %v is not wired as %s/%s", p.PodKey, p.IPv4, p.IPv6)
	}
	return nil
}
func (f *fakeDataplane) TeardownPod(_ context.Context, p dataplane.Pod) error {
	if err := p.PodKey.Validate(); err != nil {
		return fmt.Errorf("teardown: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.pods, p.PodKey)
	f.teardowns++
	return nil
}
func (f *fakeDataplane) ListPods(context.Context) ([]dataplane.Pod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []dataplane.Pod
	for _, p := range f.pods {
		out = append(out, p)
	}
	return out, nil
}

// node is one vcoild: a manager (cache), NodeIPAM and the server.
type node struct {
	srv      *Server
	ipam     *nodeipam.NodeIPAM
	dp       *fakeDataplane
	registry *prometheus.Registry
	netns    string
	// events are the node Events the server recorded.
	events *events.FakeRecorder
}

func startNode(t *testing.T, name, stateDir string, dp *fakeDataplane) *node {
	t.Helper()
	mgr, err := controllertest.NewManager(env)
	if err != nil {
		t.Fatal(err)
	}
	im := nodeipam.New(mgr.GetClient(), mgr.GetAPIReader(), nodeipam.Config{NodeName: name, PollInterval: 20 * time.Millisecond}, testr.New(t))
	if err := im.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	mgr.GetCache().WaitForCacheSync(ctx)

	store, err := checkpoint.Open(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg, im)
	if err != nil {
		t.Fatal(err)
	}
	rec := events.NewFakeRecorder(1000)
	srv := NewServer(Config{IPAM: im, Dataplane: dp, Store: store, Namespaces: mgr.GetClient(), NodeName: name, Metrics: metrics, Log: testr.New(t),
		Recorder: mgr.GetEventRecorder("vcoild"), Pods: mgr.GetAPIReader(), NodeEvents: nodeevents.New(rec, name)})
	if err := im.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if err := im.ReleaseUnused(ctx); err != nil {
		t.Fatal(err)
	}
	if err := im.EnsureNodeSubnet(ctx); err != nil {
		t.Fatal(err)
	}
	netns := filepath.Join(t.TempDir(), "netns") // a file standing for a namespace path
	if err := os.WriteFile(netns, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return &node{srv: srv, ipam: im, dp: dp, registry: reg, netns: netns, events: rec}
}

func ensureNode(t *testing.T, name string) {
	t.Helper()
	err := env.Client.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func (n *node) args(id, namespace string) *cnirpc.CNIArgs {
	return &cnirpc.CNIArgs{
		ContainerId: id, Netns: n.netns, Ifname: "eth0", Path: "/opt/cni/bin",
		Args:      map[string]string{argPodNamespace: namespace, argPodName: "pod-" + id},
		StdinData: []byte(`{"cniVersion":"1.1.0","name":"vcoil","type":"vcoil"}`),
	}
}

func (n *node) add(t *testing.T, id, namespace string) *current.Result {
	t.Helper()
	resp, err := n.srv.Add(context.Background(), n.args(id, namespace))
	if err != nil {
		t.Fatalf("ADD %s: %v", id, err)
	}
	var r current.Result
	if err := json.Unmarshal(resp.Result, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

func cniCode(err error) cnirpc.ErrorCode {
	return cnirpc.ErrorCode(cnicontract.FromRPCError(err, 0).Code)
}

func TestAddIsIdempotentAndDelFreesTheAddress(t *testing.T) {
	ensureNode(t, "node-a")
	n := startNode(t, "node-a", t.TempDir(), newFakeDataplane())
	r1 := n.add(t, "c0000001", "plain")
	// The node subnet is the node's first block of the default pool: which
	// one depends on the nodes the package's other tests made first.
	sub := n.ipam.NodeSubnet()
	want4, want6 := netip.PrefixFrom(sub.IPv4.Addr().Next(), 32), netip.PrefixFrom(sub.IPv6.Addr().Next(), 128)
	if len(r1.IPs) != 2 || r1.IPs[0].Address.String() != want4.String() || r1.IPs[1].Address.String() != want6.String() {
		t.Fatalf("first pod's addresses = %v, want %s and %s (the node subnet's first)", r1.IPs, want4, want6)
	}
	if r1.CNIVersion != "1.1.0" || len(r1.Interfaces) != 2 || r1.Interfaces[1].Sandbox != n.netns || *r1.IPs[0].Interface != 1 {
		t.Fatalf("result = %+v", r1)
	}
	again := n.add(t, "c0000001", "plain")
	if again.IPs[0].Address.String() != r1.IPs[0].Address.String() {
		t.Fatalf("repeated ADD gave %s, want %s", again.IPs[0].Address.String(), r1.IPs[0].Address.String())
	}
	other := n.add(t, "c0000002", "plain")
	if other.IPs[0].Address.String() == r1.IPs[0].Address.String() {
		t.Fatal("two pods got the same address")
	}
	if _, err := n.srv.Check(context.Background(), n.args("c0000001", "plain")); err != nil {
		t.Fatalf("CHECK: %v", err)
	}

	for i := 0; i < 2; i++ { // DEL twice: the second finds nothing and succeeds
		if _, err := n.srv.Del(context.Background(), n.args("c0000001", "plain")); err != nil {
			t.Fatalf("DEL %d: %v", i, err)
		}
	}
	if _, err := n.srv.Del(context.Background(), n.args("never-added", "plain")); err != nil {
		t.Fatalf("DEL of an unknown container: %v", err)
	}
	if _, err := n.srv.Check(context.Background(), n.args("c0000001", "plain")); cniCode(err) != cnirpc.ErrorCode_UNKNOWN_CONTAINER {
		t.Fatalf("CHECK after DEL: %v, want UNKNOWN_CONTAINER", err)
	}
	if got := testutil.CollectAndCount(n.srv.metrics.duration); got != 3 {
		t.Errorf("latency histograms for %d verbs, want 3 (ADD, CHECK, DEL)", got)
	}
	if err := testutil.GatherAndCompare(n.registry, strings.NewReader(`
# HELP vcoil_node_addresses_in_use Addresses of the pool given to pods on this node.
# TYPE vcoil_node_addresses_in_use gauge
vcoil_node_addresses_in_use{pool="default"} 1
`), "vcoil_node_addresses_in_use"); err != nil {
		t.Fatal(err)
	}
}

func TestPoolComesFromTheNamespaceAnnotation(t *testing.T) {
	ensureNode(t, "node-b")
	n := startNode(t, "node-b", t.TempDir(), newFakeDataplane())
	r := n.add(t, "d0000001", "dmz")
	if a := r.IPs[0].Address.IP.String(); a != "203.0.113.1" && a != "203.0.113.5" && a != "203.0.113.9" && a != "203.0.113.13" {
		t.Fatalf("pod of namespace dmz got %s, not an address of pool public", a)
	}
	_, err := n.srv.Add(context.Background(), n.args("d0000002", "broken"))
	if cniCode(err) != cnirpc.ErrorCode_POOL_NOT_FOUND {
		t.Fatalf("pod of a namespace naming a missing pool: %v, want POOL_NOT_FOUND", err)
	}
	ce := cnicontract.FromRPCError(err, 0)
	if want := `address pool "nope" (the pool named by annotation vcoil.io/pool of namespace "broken") does not exist`; ce.Msg != want {
		t.Fatalf("message = %q, want %q", ce.Msg, want)
	}
	if _, found, _ := n.srv.store.Get("d0000002", "eth0"); found {
		t.Fatal("a failed ADD left a checkpoint entry")
	}
	if got := testutil.ToFloat64(n.srv.metrics.errors.WithLabelValues("ADD", "102")); got != 1 {
		t.Fatalf("errors_total{ADD,102} = %v, want 1", got)
	}
}

func TestAPodOfALoadBalancerPoolIsToldWhy(t *testing.T) {
	ensureNode(t, "node-b")
	n := startNode(t, "node-b", t.TempDir(), newFakeDataplane())
	_, err := n.srv.Add(context.Background(), n.args("d1000001", "services"))
	if cniCode(err) != cnirpc.ErrorCode_POOL_NOT_FOUND {
		t.Fatalf("pod of a namespace naming a LoadBalancer pool: %v, want POOL_NOT_FOUND", err)
	}
	ce := cnicontract.FromRPCError(err, 0)
	if want := `address pool "lb" (the pool named by annotation vcoil.io/pool of namespace "services") serves LoadBalancer addresses, not pods`; ce.Msg != want {
		t.Fatalf("message = %q, want %q", ce.Msg, want)
	}
	if !strings.Contains(ce.Details, vcoilv2.ReasonPoolNotForPods) {
		t.Fatalf("details = %q, want the reason %s", ce.Details, vcoilv2.ReasonPoolNotForPods)
	}
	if _, found, _ := n.srv.store.Get("d1000001", "eth0"); found {
		t.Fatal("a failed ADD left a checkpoint entry")
	}
}

func TestFailedWiringLeavesNothing(t *testing.T) {
	ensureNode(t, "node-c")
	dp := newFakeDataplane()
	n := startNode(t, "node-c", t.TempDir(), dp)
	dp.failSetup = errors.New("no such device")
	_, err := n.srv.Add(context.Background(), n.args("e0000001", "plain"))
	if err == nil || cniCode(err) != cnirpc.ErrorCode_INTERNAL {
		t.Fatalf("ADD with a failing dataplane: %v", err)
	}
	if _, found, _ := n.srv.store.Get("e0000001", "eth0"); found {
		t.Fatal("checkpoint entry left")
	}
	for _, b := range n.ipam.Blocks() {
		if b.InUse != 0 {
			t.Fatalf("block %s has %d addresses in use", b.Name, b.InUse)
		}
	}
	// A dataplane that cannot act now (VPP resyncing) means try again later.
	dp.failSetup = fmt.Errorf("VPP is resyncing: %w", dataplane.ErrNotReady)
	if _, err := n.srv.Add(context.Background(), n.args("e0000002", "plain")); cniCode(err) != cnirpc.ErrorCode_TRY_AGAIN_LATER {
		t.Fatalf("ADD with a dataplane that is not ready: %v, want TRY_AGAIN_LATER", err)
	}
}

func TestNotReadyMeansTryAgainLater(t *testing.T) {
	// A node whose IPAM never acquired its node subnet.
	mgrless := nodeipam.New(env.Client, env.Client, nodeipam.Config{NodeName: "node-x"}, testr.New(t))
	store, _ := checkpoint.Open(t.TempDir())
	srv := NewServer(Config{IPAM: mgrless, Dataplane: newFakeDataplane(), Store: store, Namespaces: env.Client, NodeName: "node-x", Log: testr.New(t)})
	n := &node{srv: srv, netns: os.DevNull}
	if _, err := srv.Add(context.Background(), n.args("f0000001", "plain")); cniCode(err) != cnirpc.ErrorCode_TRY_AGAIN_LATER {
		t.Fatalf("ADD before ready: %v", err)
	}
	if _, err := srv.Status(context.Background(), &cnirpc.Empty{}); cniCode(err) != cnirpc.ErrorCode_PLUGIN_NOT_AVAILABLE {
		t.Fatalf("STATUS before ready: %v", err)
	}
	args := n.args("f0000001", "plain")
	args.Netns = "/nonexistent/netns"
	if _, err := srv.Add(context.Background(), args); cniCode(err) != cnirpc.ErrorCode_INVALID_ENVIRONMENT_VARIABLES {
		t.Fatalf("ADD with a missing netns: %v", err)
	}
	args.StdinData = []byte(`{"cniVersion":"1.1.0","name":"vcoil","type":"vcoil","mtu":-1}`)
	args.Netns = os.DevNull
	if _, err := srv.Add(context.Background(), args); cniCode(err) != cnirpc.ErrorCode_INVALID_NETWORK_CONFIG {
		t.Fatalf("ADD with a bad mtu: %v", err)
	}
}

func TestRestartRestoresAllocationsAndAdoptsOrphans(t *testing.T) {
	ensureNode(t, "node-d")
	state := t.TempDir()
	dp := newFakeDataplane()
	n := startNode(t, "node-d", state, dp)
	var before []string
	for i := 0; i < 10; i++ {
		before = append(before, n.add(t, fmt.Sprintf("g%07d", i), "plain").IPs[0].Address.IP.String())
	}
	// The checkpoint of one pod is lost (the dataplane still has it); a
	// dataplane object has an address no block of the node holds.
	if err := n.srv.store.Delete("g0000003", "eth0"); err != nil {
		t.Fatal(err)
	}
	dp.pods[dataplane.PodKey{ContainerID: "stranger", IfName: "eth0"}] = dataplane.Pod{
		PodKey: dataplane.PodKey{ContainerID: "stranger", IfName: "eth0"}, IPv4: netip.MustParseAddr("198.51.100.7"),
	}

	// "Restart": a new IPAM and server over the same state and dataplane.
	n2 := startNode(t, "node-d", state, dp)
	if _, found, _ := n2.srv.store.Get("g0000003", "eth0"); !found {
		t.Fatal("the pod without a checkpoint entry was not adopted")
	}
	if _, ok := dp.pods[dataplane.PodKey{ContainerID: "stranger", IfName: "eth0"}]; ok {
		t.Fatal("a dataplane pod outside the node's blocks was not torn down")
	}
	seen := map[string]bool{}
	for _, a := range before {
		seen[a] = true
	}
	for i := 10; i < 20; i++ {
		a := n2.add(t, fmt.Sprintf("g%07d", i), "plain").IPs[0].Address.IP.String()
		if seen[a] {
			t.Fatalf("after the restart %s was given again", a)
		}
		seen[a] = true
	}
}

func TestGCReleasesWhatTheRuntimeNoLongerKnows(t *testing.T) {
	ensureNode(t, "node-e")
	dp := newFakeDataplane()
	n := startNode(t, "node-e", t.TempDir(), dp)
	for i := 0; i < 4; i++ {
		n.add(t, fmt.Sprintf("h%07d", i), "plain")
	}
	dp.pods[dataplane.PodKey{ContainerID: "leftover", IfName: "eth0"}] = dataplane.Pod{PodKey: dataplane.PodKey{ContainerID: "leftover", IfName: "eth0"}}
	_, err := n.srv.GC(context.Background(), &cnirpc.GCRequest{ValidAttachments: []*cnirpc.Attachment{
		{ContainerId: "h0000000", Ifname: "eth0"}, {ContainerId: "h0000002", Ifname: "eth0"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := n.srv.store.Load()
	if len(entries) != 2 {
		t.Fatalf("%d entries after GC, want 2", len(entries))
	}
	for _, e := range entries {
		if e.ContainerID != "h0000000" && e.ContainerID != "h0000002" {
			t.Fatalf("GC kept %s", e.ContainerID)
		}
	}
	if len(dp.pods) != 2 {
		t.Fatalf("%d dataplane pods after GC, want 2", len(dp.pods))
	}
	resp, err := n.srv.Status(context.Background(), &cnirpc.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{}
	_ = env.Client.Get(context.Background(), client.ObjectKey{Name: "node-e"}, node)
	if len(resp.NatLoopback) != 2 || node.Annotations[vcoilv2.AnnotationNATLoopback] != resp.NatLoopback[0]+","+resp.NatLoopback[1] {
		t.Fatalf("status %+v, node annotation %q", resp, node.Annotations[vcoilv2.AnnotationNATLoopback])
	}
}

func TestHostPortsReachTheDataplaneAndTheCheckpoint(t *testing.T) {
	ensureNode(t, "node-hp")
	dp := newFakeDataplane()
	n := startNode(t, "node-hp", t.TempDir(), dp)
	withMappings := func(id, mappings string) *cnirpc.CNIArgs {
		a := n.args(id, "plain")
		a.StdinData = []byte(`{"cniVersion":"1.1.0","name":"vcoil","type":"vcoil","capabilities":{"portMappings":true},
			"runtimeConfig":{"portMappings":` + mappings + `}}`)
		return a
	}
	web := dataplane.PortMapping{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}
	dns := dataplane.PortMapping{HostIP: netip.MustParseAddr("198.18.0.11"), HostPort: 5353, ContainerPort: 53, Protocol: "udp"}
	key := dataplane.PodKey{ContainerID: "h0000001", IfName: "eth0"}

	if _, err := n.srv.Add(context.Background(), withMappings("h0000001", `[{"hostPort":8080,"containerPort":80,"protocol":"TCP"}]`)); err != nil {
		t.Fatalf("ADD: %v", err)
	}
	if got := dp.pods[key].PortMappings; !reflect.DeepEqual(got, []dataplane.PortMapping{web}) {
		t.Errorf("the dataplane got %+v, want %+v", got, []dataplane.PortMapping{web})
	}
	// A repeated ADD with other mappings replaces them, in the checkpoint too.
	if _, err := n.srv.Add(context.Background(), withMappings("h0000001",
		`[{"hostPort":8080,"containerPort":80,"protocol":"tcp"},{"hostPort":5353,"containerPort":53,"protocol":"udp","hostIP":"198.18.0.11"}]`)); err != nil {
		t.Fatalf("second ADD: %v", err)
	}
	want := []dataplane.PortMapping{web, dns}
	if got := dp.pods[key].PortMappings; !reflect.DeepEqual(got, want) {
		t.Errorf("after the second ADD the dataplane has %+v, want %+v", got, want)
	}
	entry, found, err := n.srv.store.Get("h0000001", "eth0")
	if err != nil || !found || !reflect.DeepEqual(podOf(entry).PortMappings, want) {
		t.Errorf("the checkpoint's entry = %+v (%v), want one with %+v", entry, err, want)
	}

	// Bad mappings refuse the ADD, naming the field, before any address is taken.
	_, err = n.srv.Add(context.Background(), withMappings("h0000002", `[{"hostPort":70000,"containerPort":80,"protocol":"tcp"}]`))
	if cniCode(err) != cnirpc.ErrorCode_INVALID_NETWORK_CONFIG || !strings.Contains(err.Error(), "runtimeConfig.portMappings[0].hostPort 70000") {
		t.Fatalf("ADD with a bad host port: %v, want INVALID_NETWORK_CONFIG naming the field", err)
	}
	if _, found, _ := n.srv.store.Get("h0000002", "eth0"); found {
		t.Error("a refused ADD left a checkpoint entry")
	}
	// DEL succeeds whatever the mappings say.
	if _, err := n.srv.Del(context.Background(), withMappings("h0000001", `[{"hostPort":0}]`)); err != nil {
		t.Fatalf("DEL with bad mappings: %v", err)
	}
	if _, ok := dp.pods[key]; ok {
		t.Error("DEL left the pod in the dataplane")
	}
}

// recordingPolicies is a PodPolicies that records its calls and fails
// PodAdded when fail is set.
type recordingPolicies struct {
	mu    sync.Mutex
	fail  error
	calls []string
}

func (p *recordingPolicies) PodAdded(_ context.Context, namespace, name string, ips []netip.Addr) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, fmt.Sprintf("added %s/%s %v", namespace, name, ips))
	return p.fail
}

func (p *recordingPolicies) PodReleased(_ context.Context, namespace, name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, fmt.Sprintf("released %s/%s", namespace, name))
}

// TestPoliciesAreAppliedBeforeADDReturnsOrTheADDIsUndone: ADD gives the
// policy stack the pod's addresses after wiring it; when they cannot be
// applied the ADD fails (try again later) and leaves nothing; DEL releases
// them.
func TestPoliciesAreAppliedBeforeADDReturnsOrTheADDIsUndone(t *testing.T) {
	ensureNode(t, "node-p")
	dp := newFakeDataplane()
	n := startNode(t, "node-p", t.TempDir(), dp)
	pol := &recordingPolicies{}
	n.srv.policies = pol

	r := n.add(t, "f0000001", "plain")
	want := fmt.Sprintf("added plain/pod-f0000001 [%s %s]", r.IPs[0].Address.IP, r.IPs[1].Address.IP)
	if len(pol.calls) != 1 || pol.calls[0] != want {
		t.Fatalf("policy calls %q, want [%q]", pol.calls, want)
	}
	if _, err := n.srv.Del(context.Background(), n.args("f0000001", "plain")); err != nil {
		t.Fatal(err)
	}
	if len(pol.calls) != 2 || pol.calls[1] != "released plain/pod-f0000001" {
		t.Fatalf("policy calls after DEL %q", pol.calls)
	}

	pol.calls, pol.fail = nil, errors.New("the policy cache has not synced yet")
	_, err := n.srv.Add(context.Background(), n.args("f0000002", "plain"))
	if cniCode(err) != cnirpc.ErrorCode_TRY_AGAIN_LATER || !strings.Contains(err.Error(), "has not synced yet") {
		t.Fatalf("ADD whose policies fail: %v, want TRY_AGAIN_LATER naming the reason", err)
	}
	if _, found, _ := n.srv.store.Get("f0000002", "eth0"); found {
		t.Fatal("checkpoint entry left")
	}
	if len(dp.pods) != 0 {
		t.Fatalf("the dataplane still holds %d pods", len(dp.pods))
	}
	for _, b := range n.ipam.Blocks() {
		if b.InUse != 0 {
			t.Fatalf("block %s has %d addresses in use", b.Name, b.InUse)
		}
	}
	if len(pol.calls) != 2 || pol.calls[1] != "released plain/pod-f0000002" {
		t.Fatalf("policy calls %q: the undone pod must be released", pol.calls)
	}
}

type recordingEgress struct {
	mu    sync.Mutex
	fail  error
	calls []string
}

func (e *recordingEgress) PodAdded(_ context.Context, namespace, name, netns string, ips []netip.Addr) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls = append(e.calls, fmt.Sprintf("added %s/%s %s %v", namespace, name, netns, ips))
	return e.fail
}

func (e *recordingEgress) PodReleased(_ context.Context, namespace, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.calls = append(e.calls, fmt.Sprintf("released %s/%s", namespace, name))
}

// TestEgressIsSetUpBeforeADDReturnsOrTheADDIsUndone: ADD hands the Egress
// client side the pod's netns and addresses after its policies; when the
// tunnels cannot be set up the ADD fails (try again later), the policies
// and the egress side forget the pod, and nothing is left.
func TestEgressIsSetUpBeforeADDReturnsOrTheADDIsUndone(t *testing.T) {
	ensureNode(t, "node-eg")
	dp := newFakeDataplane()
	n := startNode(t, "node-eg", t.TempDir(), dp)
	pol := &recordingPolicies{}
	eg := &recordingEgress{}
	n.srv.policies, n.srv.egress = pol, eg

	args := n.args("e0000001", "plain")
	r := n.add(t, "e0000001", "plain")
	want := fmt.Sprintf("added plain/pod-e0000001 %s [%s %s]", args.Netns, r.IPs[0].Address.IP, r.IPs[1].Address.IP)
	if len(eg.calls) != 1 || eg.calls[0] != want {
		t.Fatalf("egress calls %q, want [%q]", eg.calls, want)
	}
	if _, err := n.srv.Del(context.Background(), n.args("e0000001", "plain")); err != nil {
		t.Fatal(err)
	}
	if len(eg.calls) != 2 || eg.calls[1] != "released plain/pod-e0000001" {
		t.Fatalf("egress calls after DEL %q", eg.calls)
	}

	pol.calls, eg.calls, eg.fail = nil, nil, errors.New("netlink: vxlan device: operation not permitted")
	_, err := n.srv.Add(context.Background(), n.args("e0000002", "plain"))
	if cniCode(err) != cnirpc.ErrorCode_TRY_AGAIN_LATER || !strings.Contains(err.Error(), "vxlan device") || !strings.Contains(err.Error(), "set up egress") {
		t.Fatalf("ADD whose egress fails: %v, want TRY_AGAIN_LATER naming the reason", err)
	}
	if _, found, _ := n.srv.store.Get("e0000002", "eth0"); found {
		t.Fatal("checkpoint entry left")
	}
	if len(dp.pods) != 0 {
		t.Fatalf("the dataplane still holds %d pods", len(dp.pods))
	}
	for _, b := range n.ipam.Blocks() {
		if b.InUse != 0 {
			t.Fatalf("block %s has %d addresses in use", b.Name, b.InUse)
		}
	}
	if len(eg.calls) != 2 || eg.calls[1] != "released plain/pod-e0000002" {
		t.Fatalf("egress calls %q: the undone pod must be released", eg.calls)
	}
	if len(pol.calls) != 2 || pol.calls[1] != "released plain/pod-e0000002" {
		t.Fatalf("policy calls %q: the undone pod's policies must be released", pol.calls)
	}
}
