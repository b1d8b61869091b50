package nodeipam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/controllertest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/ipam"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}, &env) }

func startController(t *testing.T) (stop func()) { return controllertest.Run(t, env) }

func runManager(t *testing.T, mgr ctrl.Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	mgr.GetCache().WaitForCacheSync(ctx)
}

// startNode runs a NodeIPAM for node in its own manager (the cache vcoild
// would have) and loads its blocks.
func startNode(t *testing.T, node string) *NodeIPAM {
	t.Helper()
	return startNodeWith(t, node, nil, 5*time.Second)
}

func cleanAPIServer(t *testing.T) { env.CleanAtEnd(t) }

func createPool(t *testing.T, name string, bits int32, v4, v6 string) {
	t.Helper()
	p := &vcoilv2.AddressPool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: vcoilv2.AddressPoolSpec{BlockSizeBits: bits}}
	s := vcoilv2.SubnetSet{}
	if v4 != "" {
		s.IPv4 = ptr.To(v4)
	}
	if v6 != "" {
		s.IPv6 = ptr.To(v6)
	}
	p.Spec.Subnets = []vcoilv2.SubnetSet{s}
	if err := env.Client.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

func TestNodeSubnetIsAcquiredAndItsLoopbackPublished(t *testing.T) {
	cleanAPIServer(t)
	startController(t)
	env.CreateNode(t, "node-1", "")
	m := startNode(t, "node-1")
	if err := m.EnsureNodeSubnet(context.Background()); !errors.Is(err, ErrPoolNotFound) {
		t.Fatalf("without a default pool: %v, want ErrPoolNotFound", err)
	}
	if err := m.Ready(); !errors.Is(err, ErrNotReady) {
		t.Fatalf("Ready without a node subnet: %v", err)
	}
	createPool(t, "default", 3, "10.50.0.0/24", "fd00:50::/120")
	if err := m.EnsureNodeSubnet(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Ready(); err != nil {
		t.Fatal(err)
	}
	want := "10.50.0.6,fd00:50::7"
	if got := m.NATLoopback().String(); got != want {
		t.Fatalf("NAT loopback = %s, want %s", got, want)
	}
	node := &corev1.Node{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "node-1"}, node); err != nil {
		t.Fatal(err)
	}
	if got := node.Annotations[vcoilv2.AnnotationNATLoopback]; got != want {
		t.Fatalf("node annotation = %q, want %q", got, want)
	}
	// The request is deleted once answered.
	var reqs vcoilv2.BlockRequestList
	if err := env.Client.List(context.Background(), &reqs); err != nil || len(reqs.Items) != 0 {
		t.Fatalf("requests left: %d (%v)", len(reqs.Items), err)
	}
	// A restarted vcoild finds its node subnet again without asking.
	m2 := startNode(t, "node-1")
	if err := m2.EnsureNodeSubnet(context.Background()); err != nil || m2.NATLoopback().String() != want {
		t.Fatalf("after restart: %v %s", err, m2.NATLoopback())
	}
	var blocks vcoilv2.AddressBlockList
	if err := env.Client.List(context.Background(), &blocks); err != nil || len(blocks.Items) != 1 {
		t.Fatalf("blocks = %d, want 1 (%v)", len(blocks.Items), err)
	}
}

// TestConcurrentAllocationsFillBlocksAndReleaseThem fills a pool of small
// blocks from 100 goroutines, then frees everything.
func TestConcurrentAllocationsFillBlocksAndReleaseThem(t *testing.T) {
	cleanAPIServer(t)
	startController(t)
	env.CreateNode(t, "node-1", "")
	createPool(t, "default", 3, "10.51.0.0/24", "")
	createPool(t, "small", 3, "10.52.0.0/24", "")
	m := startNode(t, "node-1")
	if err := m.EnsureNodeSubnet(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const n = 100
	allocs := make([]ipam.Allocation, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			allocs[i], errs[i] = m.Allocate(ctx, "small")
		}()
	}
	wg.Wait()
	seen := map[netip.Addr]bool{}
	for i := 0; i < n; i++ {
		if errs[i] != nil {
			t.Fatalf("allocation %d: %v", i, errs[i])
		}
		if seen[allocs[i].IPv4] {
			t.Fatalf("%s given twice", allocs[i].IPv4)
		}
		seen[allocs[i].IPv4] = true
	}
	// /29 blocks give 6 addresses: 100 need 17 blocks.
	var blocks vcoilv2.AddressBlockList
	_ = env.Client.List(ctx, &blocks, client.MatchingLabels{vcoilv2.LabelPool: "small"})
	if len(blocks.Items) != 17 {
		t.Fatalf("%d blocks of pool small, want 17", len(blocks.Items))
	}
	for _, a := range allocs {
		if err := m.Free(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	poll.Eventually(t, 10*time.Second, func() error {
		var left vcoilv2.AddressBlockList
		if err := env.Client.List(ctx, &left, client.MatchingLabels{vcoilv2.LabelPool: "small"}); err != nil {
			return err
		}
		if len(left.Items) != 0 {
			return fmt.Errorf("%d blocks of pool small left", len(left.Items))
		}
		return nil
	})
	if err := m.Ready(); err != nil {
		t.Fatalf("the node subnet went with the other blocks: %v", err)
	}
}

// TestAWaitingPoolStallsNothingElse: while one pool waits for its block (no
// controller answers), allocations from a block with free addresses, and
// frees, go on.
func TestAWaitingPoolStallsNothingElse(t *testing.T) {
	cleanAPIServer(t)
	stopController := startController(t)
	env.CreateNode(t, "node-1", "")
	createPool(t, "default", 3, "10.53.0.0/24", "")
	createPool(t, "other", 3, "10.54.0.0/24", "")
	m := startNode(t, "node-1")
	if err := m.EnsureNodeSubnet(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first, err := m.Allocate(ctx, vcoilv2.DefaultPool)
	if err != nil {
		t.Fatal(err)
	}
	stopController()

	waiting := make(chan error, 1)
	go func() {
		_, err := m.Allocate(ctx, "other")
		waiting <- err
	}()
	// The request for pool other is pending ...
	poll.Eventually(t, 5*time.Second, func() error {
		var reqs vcoilv2.BlockRequestList
		if err := env.Client.List(ctx, &reqs); err != nil || len(reqs.Items) != 1 {
			return fmt.Errorf("pending requests: %d %v", len(reqs.Items), err)
		}
		return nil
	})
	// ... and the default pool still gives and takes addresses at once.
	quick, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	second, err := m.Allocate(quick, vcoilv2.DefaultPool)
	if err != nil {
		t.Fatalf("allocation from the default pool while another pool waits: %v", err)
	}
	if err := m.Free(quick, first); err != nil {
		t.Fatal(err)
	}
	if err := m.Free(quick, second); err != nil {
		t.Fatal(err)
	}
	startController(t)
	if err := <-waiting; err != nil {
		t.Fatalf("the waiting allocation failed once the controller ran: %v", err)
	}
}

func TestFailedRequestsAreReportedAndDeleted(t *testing.T) {
	cleanAPIServer(t)
	startController(t)
	env.CreateNode(t, "node-1", "")
	createPool(t, "default", 3, "10.55.0.0/24", "")
	createPool(t, "one", 3, "10.56.0.0/29", "")
	m := startNode(t, "node-1")
	if err := m.EnsureNodeSubnet(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, err := m.Allocate(ctx, "missing")
	var rf *RequestFailedError
	if !errors.As(err, &rf) || !errors.Is(err, ErrPoolNotFound) || rf.Pool != "missing" {
		t.Fatalf("allocation from a missing pool: %v", err)
	}
	for i := 0; i < 6; i++ {
		if _, err := m.Allocate(ctx, "one"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Allocate(ctx, "one"); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("allocation from an exhausted pool: %v", err)
	}
	var reqs vcoilv2.BlockRequestList
	if err := env.Client.List(ctx, &reqs); err != nil || len(reqs.Items) != 0 {
		t.Fatalf("requests left: %d (%v)", len(reqs.Items), err)
	}
}

func TestBlockOfADeletedPoolDrainsAndIsReleasedWhenEmpty(t *testing.T) {
	cleanAPIServer(t)
	startController(t)
	env.CreateNode(t, "node-1", "")
	createPool(t, "default", 3, "10.57.0.0/24", "")
	createPool(t, "doomed", 3, "10.58.0.0/24", "")
	m := startNode(t, "node-1")
	if err := m.EnsureNodeSubnet(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, err := m.Allocate(ctx, "doomed")
	if err != nil {
		t.Fatal(err)
	}
	// Deleting the pool marks its block for deletion (what Kubernetes'
	// garbage collector does through the owner reference; envtest runs no
	// garbage collector, so the test deletes the block itself).
	if err := env.Client.Delete(ctx, &vcoilv2.AddressPool{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(ctx, &vcoilv2.AddressBlock{ObjectMeta: metav1.ObjectMeta{Name: a.Block}}); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 5*time.Second, func() error {
		for _, b := range m.Blocks() {
			if b.Name == a.Block && b.Draining {
				return nil
			}
		}
		return fmt.Errorf("block %s is not draining: %+v", a.Block, m.Blocks())
	})
	if err := m.Free(ctx, a); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		err := env.Client.Get(ctx, client.ObjectKey{Name: "doomed"}, &vcoilv2.AddressPool{})
		if err == nil {
			return errors.New("pool doomed still exists")
		}
		return client.IgnoreNotFound(err)
	})
}
