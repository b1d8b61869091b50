package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/ipam"
)

func TestBlockRequestIsAnsweredWithTheNextFreeBlock(t *testing.T) {
	cleanAPIServer(t)
	startController(t, time.Hour)
	pool := createPool(t, "default", 5, dual("10.64.0.0/24", "fd00:10:64::/120"))
	n1 := env.CreateNode(t, "node-1", "")
	env.CreateNode(t, "node-2", "")

	b := allocate(t, "node-1", "default")
	if b.Name != "default-0" || *b.IPv4 != "10.64.0.0/27" || *b.IPv6 != "fd00:10:64::/123" || b.Index != 0 {
		t.Fatalf("first block = %s %d %v %v, want default-0 10.64.0.0/27 fd00:10:64::/123", b.Name, b.Index, *b.IPv4, *b.IPv6)
	}
	if !b.NodeSubnet {
		t.Errorf("the node's first block of the default pool is not marked as its node subnet")
	}
	if b.Labels[vcoilv2.LabelPool] != "default" || b.Labels[vcoilv2.LabelNode] != "node-1" {
		t.Errorf("labels = %v", b.Labels)
	}
	if len(b.Finalizers) != 1 || b.Finalizers[0] != vcoilv2.Finalizer {
		t.Errorf("finalizers = %v, want [%s]", b.Finalizers, vcoilv2.Finalizer)
	}
	owner := metav1.GetControllerOf(b)
	if owner == nil || owner.Kind != "AddressPool" || owner.Name != pool.Name || owner.UID != pool.UID || owner.BlockOwnerDeletion == nil || !*owner.BlockOwnerDeletion {
		t.Errorf("controller owner = %+v, want the pool", owner)
	}

	b2 := allocate(t, "node-1", "default")
	if b2.Name != "default-1" || b2.NodeSubnet {
		t.Errorf("second block of node-1 = %s nodeSubnet=%v, want default-1 without the mark", b2.Name, b2.NodeSubnet)
	}
	b3 := allocate(t, "node-2", "default")
	if b3.Name != "default-2" || !b3.NodeSubnet {
		t.Errorf("first block of node-2 = %s nodeSubnet=%v, want default-2 marked as node subnet", b3.Name, b3.NodeSubnet)
	}

	// The request is owned (not controlled) by its Node, for collection.
	var reqs vcoilv2.BlockRequestList
	if err := env.Client.List(context.Background(), &reqs); err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs.Items {
		if !r.Completed() || r.Status.AddressBlockName == "" {
			t.Errorf("request %s: %+v", r.Name, r.Status)
		}
		if r.Spec.NodeName != "node-1" {
			continue
		}
		found := false
		for _, ref := range r.OwnerReferences {
			if ref.Kind == "Node" && ref.UID == n1.UID && (ref.Controller == nil || !*ref.Controller) {
				found = true
			}
		}
		if !found {
			t.Errorf("request %s has owners %+v, want node-1 as a non-controller owner", r.Name, r.OwnerReferences)
		}
	}

	// Blocks of other pools never hold node subnets.
	createPool(t, "extra", 2, v4("203.0.113.0/28"))
	if b := allocate(t, "node-2", "extra"); b.NodeSubnet || *b.IPv4 != "203.0.113.0/30" {
		t.Errorf("block of pool extra = %s %s nodeSubnet=%v", b.Name, *b.IPv4, b.NodeSubnet)
	}
}

func TestFreedBlockIsNotReusedAtOnceAlsoAfterARestart(t *testing.T) {
	cleanAPIServer(t)
	c := startController(t, time.Hour)
	createPool(t, "p", 5, v4("10.70.0.0/25")) // 4 blocks
	env.CreateNode(t, "node-1", "")

	b0 := allocate(t, "node-1", "p")
	b1 := allocate(t, "node-1", "p")
	releaseBlockNow(t, b0)
	if b := allocate(t, "node-1", "p"); b.Name != "p-2" {
		t.Fatalf("after freeing p-0 the next block is %s, want p-2", b.Name)
	}

	// The cursor is in the pool's status: a new controller continues after it.
	c.stop()
	releaseBlockNow(t, b1)
	startController(t, time.Hour)
	if b := allocate(t, "node-1", "p"); b.Name != "p-3" {
		t.Fatalf("after a restart the next block is %s, want p-3", b.Name)
	}
	// At the end the search wraps around to the freed blocks, in order.
	if b := allocate(t, "node-1", "p"); b.Name != "p-0" {
		t.Fatalf("after the last block the next is %s, want p-0 (wrapped)", b.Name)
	}
	if b := allocate(t, "node-1", "p"); b.Name != "p-1" {
		t.Fatalf("then %s, want p-1", b.Name)
	}
	failed := waitDone(t, createRequest(t, "node-1", "p"))
	if c := failed.FailedCondition(); c == nil || c.Reason != vcoilv2.ReasonPoolExhausted {
		t.Fatalf("request to a full pool: %+v, want Failed with reason PoolExhausted", failed.Status)
	}
}

func TestBlockRequestFailuresNameTheReason(t *testing.T) {
	cleanAPIServer(t)
	startController(t, time.Hour)
	env.CreateNode(t, "node-1", "")
	createPool(t, "tiny", 5, v4("10.71.0.0/27")) // one block
	allocate(t, "node-1", "tiny")

	deleting := createPool(t, "deleting", 5, v4("10.72.0.0/24"))
	allocate(t, "node-1", "deleting")
	// The pool's finalizer keeps it while its block exists.
	if err := env.Client.Delete(context.Background(), deleting); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		p := &vcoilv2.AddressPool{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(deleting), p); err != nil {
			return err
		}
		if p.DeletionTimestamp.IsZero() {
			return fmt.Errorf("pool not marked for deletion")
		}
		return nil
	})

	if err := env.Client.Create(context.Background(), lbPoolObject("lb", v4("198.51.100.0/28"))); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, node, pool, reason, message string
	}{
		{"a LoadBalancer pool", "node-1", "lb", vcoilv2.ReasonPoolNotForPods, `address pool "lb" serves LoadBalancer addresses, not pods`},
		{"an exhausted pool", "node-1", "tiny", vcoilv2.ReasonPoolExhausted, `all 1 blocks of address pool "tiny" are allocated`},
		{"a pool that does not exist", "node-1", "nope", vcoilv2.ReasonPoolNotFound, `address pool "nope" does not exist`},
		{"a pool being deleted", "node-1", "deleting", vcoilv2.ReasonPoolDeleting, `address pool "deleting" is being deleted`},
		{"a node that does not exist", "ghost", "tiny", vcoilv2.ReasonNodeNotFound, `node "ghost" does not exist`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := waitDone(t, createRequest(t, tc.node, tc.pool))
			c := r.FailedCondition()
			if c == nil || c.Reason != tc.reason || c.Message != tc.message {
				t.Fatalf("status = %+v, want Failed %s %q", r.Status, tc.reason, tc.message)
			}
			if r.Completed() || r.Status.AddressBlockName != "" {
				t.Fatalf("failed request also completed: %+v", r.Status)
			}
			// The operator sees it in the request's Events, with its UID.
			env.WaitForEvent(t, 10*time.Second, testenv.EventOf{Kind: "BlockRequest", Name: r.Name, UID: r.UID,
				Type: corev1.EventTypeWarning, Reason: tc.reason, Note: tc.message})
		})
	}
	// An exhausted pool says so on itself too, naming the node that got
	// no block: the pool is what the operator grows.
	tiny := &vcoilv2.AddressPool{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "tiny"}, tiny); err != nil {
		t.Fatal(err)
	}
	env.WaitForEvent(t, 10*time.Second, testenv.EventOf{Kind: "AddressPool", Name: "tiny", UID: tiny.UID,
		Type: corev1.EventTypeWarning, Reason: vcoilv2.ReasonPoolExhausted, Note: `all 1 blocks of address pool "tiny" are allocated: node node-1 got no block`})
	if evs, err := env.Events(context.Background(), testenv.EventOf{Kind: "AddressPool", Name: "lb"}); err != nil || len(evs) != 0 {
		t.Fatalf("Events on the LoadBalancer pool a pod asked for: %d (%v), want none (the request has them)", len(evs), err)
	}
	var blocks vcoilv2.AddressBlockList
	if err := env.Client.List(context.Background(), &blocks, client.MatchingLabels{vcoilv2.LabelPool: "lb"}); err != nil || len(blocks.Items) != 0 {
		t.Fatalf("blocks of the LoadBalancer pool: %d (%v), want none", len(blocks.Items), err)
	}
}

// TestReconcilingAgainKeepsOneBlockPerRequest replays the protocol's crash
// points: a claim without a block, a block without completion, and repeated
// reconciles of a completed request.
func TestReconcilingAgainKeepsOneBlockPerRequest(t *testing.T) {
	cleanAPIServer(t)
	createPool(t, "p", 5, v4("10.73.0.0/24"))
	env.CreateNode(t, "node-1", "")
	ctx := context.Background()
	r := &BlockRequestReconciler{Client: env.Client, APIReader: env.Client}
	reconcileN := func(t *testing.T, br *vcoilv2.BlockRequest, n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			if _, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(br)}); err != nil {
				t.Fatalf("reconcile %d: %v", i, err)
			}
		}
	}
	blocksOf := func(t *testing.T, br *vcoilv2.BlockRequest) []string {
		t.Helper()
		var l vcoilv2.AddressBlockList
		if err := env.Client.List(ctx, &l, client.MatchingLabels{vcoilv2.LabelRequest: string(br.UID)}); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, b := range l.Items {
			names = append(names, b.Name)
		}
		return names
	}
	get := func(t *testing.T, br *vcoilv2.BlockRequest) *vcoilv2.BlockRequest {
		t.Helper()
		got := &vcoilv2.BlockRequest{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(br), got); err != nil {
			t.Fatal(err)
		}
		return got
	}

	// consume does what vcoild does with an answer it no longer needs:
	// the request goes, then the block.
	consume := func(t *testing.T, got *vcoilv2.BlockRequest) {
		t.Helper()
		if err := env.Client.Delete(ctx, got); err != nil {
			t.Fatal(err)
		}
		block := &vcoilv2.AddressBlock{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: got.Status.AddressBlockName}, block); err != nil {
			t.Fatal(err)
		}
		block.Finalizers = nil
		if err := env.Client.Update(ctx, block); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Delete(ctx, block); err != nil {
			t.Fatal(err)
		}
	}
	// answeredAfter answers br and returns its copy from before the
	// answer (a stale cache's) and the answered one.
	answeredAfter := func(t *testing.T, br *vcoilv2.BlockRequest) (stale, got *vcoilv2.BlockRequest) {
		t.Helper()
		stale = get(t, br).DeepCopy()
		reconcileN(t, br, 1)
		got = get(t, br)
		if !got.Completed() {
			t.Fatalf("status %+v, want the request answered", got.Status)
		}
		return stale, got
	}
	// reconcileStale reconciles the request with a cache that still
	// holds stale.
	reconcileStale := func(t *testing.T, stale *vcoilv2.BlockRequest) {
		t.Helper()
		cached := &BlockRequestReconciler{Client: staleReader{Client: env.Client, obj: stale}, APIReader: env.Client}
		if _, err := cached.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(stale)}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("a completed request is left alone", func(t *testing.T) {
		br := createRequest(t, "node-1", "p")
		reconcileN(t, br, 5)
		got := get(t, br)
		if names := blocksOf(t, br); len(names) != 1 || names[0] != got.Status.AddressBlockName || !got.Completed() {
			t.Fatalf("blocks %v, status %+v", names, got.Status)
		}
	})

	t.Run("a claim without a block resumes with the claimed block", func(t *testing.T) {
		br := createRequest(t, "node-1", "p")
		br.Status.AddressBlockName = "p-7"
		if err := env.Client.Status().Update(ctx, br); err != nil {
			t.Fatal(err)
		}
		reconcileN(t, br, 3)
		got := get(t, br)
		if names := blocksOf(t, br); len(names) != 1 || names[0] != "p-7" || got.Status.AddressBlockName != "p-7" || !got.Completed() {
			t.Fatalf("blocks %v, status %+v; want p-7 only", names, got.Status)
		}
	})

	t.Run("a block created before the crash is the request's block", func(t *testing.T) {
		br := createRequest(t, "node-1", "p")
		br.Status.AddressBlockName = "p-5"
		if err := env.Client.Status().Update(ctx, br); err != nil {
			t.Fatal(err)
		}
		pool := &vcoilv2.AddressPool{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "p"}, pool); err != nil {
			t.Fatal(err)
		}
		parsed, err := parsePool(pool)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := r.createBlock(ctx, br, pool, parsed, 5); err != nil {
			t.Fatal(err)
		}
		reconcileN(t, br, 3)
		got := get(t, br)
		if names := blocksOf(t, br); len(names) != 1 || names[0] != "p-5" || !got.Completed() {
			t.Fatalf("blocks %v, status %+v; want p-5 only", names, got.Status)
		}
	})

	t.Run("a claim outside the pool chooses again", func(t *testing.T) {
		br := createRequest(t, "node-1", "p")
		br.Status.AddressBlockName = "p-99"
		if err := env.Client.Status().Update(ctx, br); err != nil {
			t.Fatal(err)
		}
		reconcileN(t, br, 2)
		got := get(t, br)
		names := blocksOf(t, br)
		if len(names) != 1 || names[0] != got.Status.AddressBlockName || !got.Completed() {
			t.Fatalf("blocks %v, status %+v; want one block of the pool", names, got.Status)
		}
	})

	t.Run("a claim on another request's block chooses again", func(t *testing.T) {
		br := createRequest(t, "node-1", "p")
		br.Status.AddressBlockName = "p-5" // taken by the previous request
		if err := env.Client.Status().Update(ctx, br); err != nil {
			t.Fatal(err)
		}
		reconcileN(t, br, 2)
		got := get(t, br)
		names := blocksOf(t, br)
		if len(names) != 1 || names[0] == "p-5" || names[0] != got.Status.AddressBlockName || !got.Completed() {
			t.Fatalf("blocks %v, status %+v; want one block other than p-5", names, got.Status)
		}
	})

	// A reconcile from a cache that has not seen the answer nor the
	// deletion of a request vcoild consumed (it deleted the request and
	// released the block, no longer needing it) must not make the block
	// again: nobody would ever release it.
	t.Run("a consumed request seen from a stale cache gets no block", func(t *testing.T) {
		br := createRequest(t, "node-1", "p")
		reconcileN(t, br, 1)
		got := get(t, br)
		if !got.Completed() {
			t.Fatalf("status %+v, want the request answered", got.Status)
		}
		// The cache saw the claim, not the answer.
		stale := got.DeepCopy()
		stale.Status.Conditions = nil
		consume(t, got)
		reconcileStale(t, stale)
		if names := blocksOf(t, br); len(names) != 0 {
			t.Fatalf("blocks %v made for a request that is gone", names)
		}
	})
	// An answered request that the cache still shows as created: the
	// claim's write must conflict rather than claim a second block.
	t.Run("an answered request seen before its claim from a stale cache keeps its block", func(t *testing.T) {
		// Owned by its node already, as vcoild makes it: the claim is
		// the first write.
		node := &corev1.Node{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: "node-1"}, node); err != nil {
			t.Fatal(err)
		}
		br := &vcoilv2.BlockRequest{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "node-1-p-", OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID,
			}}},
			Spec: vcoilv2.BlockRequestSpec{NodeName: "node-1", PoolName: "p"},
		}
		if err := env.Client.Create(ctx, br); err != nil {
			t.Fatal(err)
		}
		stale, got := answeredAfter(t, br)
		reconcileStale(t, stale)
		if names := blocksOf(t, br); len(names) != 1 || names[0] != got.Status.AddressBlockName {
			t.Fatalf("blocks %v, want only %s", names, got.Status.AddressBlockName)
		}
		if now := get(t, br); now.Status.AddressBlockName != got.Status.AddressBlockName || !now.Completed() {
			t.Fatalf("status %+v, was %+v", now.Status, got.Status)
		}
	})

	// The same without a claim: the cache still shows the request as it
	// was created. No read of the apiserver is made for such a copy; the
	// claim's write, carrying the copy's resourceVersion, must fail.
	t.Run("a consumed request seen before its claim from a stale cache gets no block", func(t *testing.T) {
		br := createRequest(t, "node-1", "p")
		stale, got := answeredAfter(t, br)
		consume(t, got)
		reconcileStale(t, stale)
		if names := blocksOf(t, br); len(names) != 0 {
			t.Fatalf("blocks %v made for a request that is gone", names)
		}
	})
}

// staleReader is a cache that still holds obj as it was.
type staleReader struct {
	client.Client
	obj *vcoilv2.BlockRequest
}

func (s staleReader) Get(ctx context.Context, key client.ObjectKey, out client.Object, opts ...client.GetOption) error {
	if br, ok := out.(*vcoilv2.BlockRequest); ok && key == client.ObjectKeyFromObject(s.obj) {
		s.obj.DeepCopyInto(br)
		return nil
	}
	return s.Client.Get(ctx, key, out, opts...)
}

// TestRacingControllersGiveEveryBlockOnce creates 64 requests from 16 nodes at
// once for a pool of exactly 64 blocks, answered by two controller instances
// without leader election; one of them is replaced by a third midway. Every
// request must complete with its own block: a block given twice would leave a
// request without one.
func TestRacingControllersGiveEveryBlockOnce(t *testing.T) {
	cleanAPIServer(t)
	a := startController(t, time.Hour)
	startController(t, time.Hour)
	createPool(t, "race", 5, dual("10.80.0.0/21", "fd00:80::/117")) // 2^(11-5) = 64 blocks
	const nodes, perNode = 16, 4
	for i := 0; i < nodes; i++ {
		env.CreateNode(t, fmt.Sprintf("node-%02d", i), "")
	}

	reqs := make([]*vcoilv2.BlockRequest, nodes*perNode)
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reqs[i] = createRequest(t, fmt.Sprintf("node-%02d", i%nodes), "race")
		}()
	}
	wg.Wait()

	// Replace one instance while requests are being answered.
	poll.Eventually(t, 20*time.Second, func() error {
		var l vcoilv2.AddressBlockList
		if err := env.Client.List(context.Background(), &l); err != nil {
			return err
		}
		if len(l.Items) < 16 {
			return fmt.Errorf("%d blocks so far", len(l.Items))
		}
		return nil
	})
	a.stop()
	startController(t, time.Hour)

	byBlock := map[string]*vcoilv2.BlockRequest{}
	for _, r := range reqs {
		got := waitDone(t, r)
		if !got.Completed() {
			t.Fatalf("request %s of %s did not complete: %+v", got.Name, got.Spec.NodeName, got.Status)
		}
		if other, dup := byBlock[got.Status.AddressBlockName]; dup {
			t.Fatalf("block %s given to both %s and %s", got.Status.AddressBlockName, other.Name, got.Name)
		}
		byBlock[got.Status.AddressBlockName] = got
	}

	var blocks vcoilv2.AddressBlockList
	if err := env.Client.List(context.Background(), &blocks); err != nil {
		t.Fatal(err)
	}
	if len(blocks.Items) != len(reqs) {
		t.Fatalf("%d blocks exist for %d requests", len(blocks.Items), len(reqs))
	}
	cidrs := map[string]bool{}
	for _, b := range blocks.Items {
		r := byBlock[b.Name]
		if r == nil {
			t.Fatalf("block %s belongs to no request", b.Name)
		}
		if b.Labels[vcoilv2.LabelRequest] != string(r.UID) || b.Labels[vcoilv2.LabelNode] != r.Spec.NodeName {
			t.Fatalf("block %s has labels %v, but request %s of node %s holds it", b.Name, b.Labels, r.Name, r.Spec.NodeName)
		}
		if cidrs[*b.IPv4] || cidrs[*b.IPv6] {
			t.Fatalf("block %s repeats a CIDR", b.Name)
		}
		cidrs[*b.IPv4], cidrs[*b.IPv6] = true, true
	}
	t.Logf("64 requests from 16 nodes answered by racing controllers with 64 distinct blocks")
}

func TestNodeOwnerIsAddedWhenTheRequestLacksIt(t *testing.T) {
	cleanAPIServer(t)
	startController(t, time.Hour)
	createPool(t, "p", 5, v4("10.74.0.0/24"))
	n := env.CreateNode(t, "node-1", "")
	r := waitDone(t, createRequest(t, "node-1", "p"))
	want := metav1.OwnerReference{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}
	if len(r.OwnerReferences) != 1 || r.OwnerReferences[0] != want {
		t.Fatalf("owners = %+v, want [%+v]", r.OwnerReferences, want)
	}
	_ = corev1.Node{}
}

// Concurrent reconciles of one instance read the same cache and cursor:
// each must choose another index, and a pool whose free blocks were all
// chosen lately still answers with one of them rather than "exhausted".
func TestConcurrentReconcilesChooseDifferentBlocks(t *testing.T) {
	cleanAPIServer(t)
	pool := createPool(t, "spread", 5, v4("10.74.0.0/25")) // 4 blocks
	parsed, err := parsePool(pool)
	if err != nil {
		t.Fatal(err)
	}
	r := &BlockRequestReconciler{Client: env.Client, APIReader: env.Client}
	ctx := context.Background()
	seen := map[int64]bool{}
	for range 4 {
		idx, err := r.nextIndex(ctx, pool, parsed, nil)
		if err != nil {
			t.Fatal(err)
		}
		if seen[idx] {
			t.Fatalf("index %d chosen twice by one instance (chosen so far %v)", idx, seen)
		}
		seen[idx] = true
	}
	if idx, err := r.nextIndex(ctx, pool, parsed, nil); err != nil || !seen[idx] {
		t.Fatalf("with every free block chosen lately: %d, %v; want one of them", idx, err)
	}
	if _, err := r.nextIndex(ctx, pool, parsed, map[int64]bool{0: true, 1: true, 2: true, 3: true}); !errors.Is(err, ipam.ErrNoSuchBlock) {
		t.Fatalf("a pool whose blocks are all tried: %v, want ipam.ErrNoSuchBlock", err)
	}
}

// A request's Node owner is checked against the cache of Node metadata
// only when the UIDs agree: an owner of another UID (a Node deleted and
// created again under the name) is looked up in the apiserver, which adds
// the live Node as an owner, and a request whose named owner does not
// exist fails.
func TestNodeOwnerOfTheRequestIsCheckedByUID(t *testing.T) {
	cleanAPIServer(t)
	startController(t, time.Hour)
	createPool(t, "p", 5, v4("10.75.0.0/24"))
	n := env.CreateNode(t, "node-1", "")
	ctx := context.Background()
	withOwner := func(node string, uid types.UID) *vcoilv2.BlockRequest {
		t.Helper()
		r := &vcoilv2.BlockRequest{
			ObjectMeta: metav1.ObjectMeta{GenerateName: node + "-p-", OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: node, UID: uid,
			}}},
			Spec: vcoilv2.BlockRequestSpec{NodeName: node, PoolName: "p"},
		}
		if err := env.Client.Create(ctx, r); err != nil {
			t.Fatal(err)
		}
		return r
	}

	if r := waitDone(t, withOwner("node-1", n.UID)); !r.Completed() || len(r.OwnerReferences) != 1 {
		t.Errorf("request owned by its node: status %+v, owners %+v; want answered, owners unchanged", r.Status, r.OwnerReferences)
	}
	r := waitDone(t, withOwner("node-1", "00000000-0000-0000-0000-00000000dead"))
	if !r.Completed() {
		t.Fatalf("request owned by an earlier node of the name: %+v, want answered", r.Status)
	}
	live := false
	for _, ref := range r.OwnerReferences {
		live = live || ref.UID == n.UID
	}
	if !live {
		t.Errorf("owners %+v: the live node %s is not among them", r.OwnerReferences, n.UID)
	}
	failed := waitDone(t, withOwner("node-gone", "00000000-0000-0000-0000-00000000beef"))
	if c := failed.FailedCondition(); c == nil || c.Reason != vcoilv2.ReasonNodeNotFound {
		t.Errorf("request of a node that does not exist: %+v, want Failed with reason %s", failed.Status, vcoilv2.ReasonNodeNotFound)
	}
}

// Concurrent reconciles move one pool's cursor: the status ends with the
// index this instance carved last, however the writes were merged.
func TestCursorWritesEndWithTheLastIndex(t *testing.T) {
	cleanAPIServer(t)
	pool := createPool(t, "cursor", 5, v4("10.76.0.0/24"))
	r := &BlockRequestReconciler{Client: env.Client, APIReader: env.Client}
	ctx := context.Background()
	for round := range 3 {
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.advanceCursor(ctx, pool.DeepCopy(), int64(round*16+i))
			}()
		}
		wg.Wait()
		got := &vcoilv2.AddressPool{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(pool), got); err != nil {
			t.Fatal(err)
		}
		want := r.cursorOf(pool)
		if want == nil || got.Status.LastBlockIndex == nil || *got.Status.LastBlockIndex != *want {
			t.Fatalf("round %d: status cursor %v, this instance's %v", round, got.Status.LastBlockIndex, want)
		}
		if *want < int64(round*16) || *want >= int64(round*16+16) {
			t.Fatalf("round %d: cursor %d is not one of the round's indexes", round, *want)
		}
	}
}
