package controllers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/ipam"
)

// BlockRequestReconciler answers BlockRequests: it carves the next free block
// of the pool for the node and records it in the request's status.
//
// A block is never given twice, also when several instances run at once
// (leader election off, or a stale leader): block names are "<pool>-<index>",
// so creating the same block twice conflicts, and the request's status is
// only ever written with optimistic concurrency. The protocol is:
//
//  1. claim: write the chosen block name into the request's status;
//  2. create the block, labelled with the request's UID; if a block of that
//     name exists for another request, forget the claim and choose again;
//  3. advance the pool's cursor (status.lastBlockIndex);
//  4. mark the request Complete.
//
// A reconcile that finds a claim resumes at step 2, so a retry, a restart or a
// second instance ends with one request, one block.
type BlockRequestReconciler struct {
	// Client reads from the cache and writes to the apiserver.
	Client client.Client
	// APIReader reads from the apiserver directly, where a stale cache could
	// lead to a wrong decision.
	APIReader client.Reader
	Recorder  events.EventRecorder

	// nodeLocks serialises the default-pool requests of one node inside this
	// instance, so that concurrent reconciles do not both mark a block as the
	// node's node subnet.
	nodeLocks sync.Map // node name -> *sync.Mutex

	// chosen holds the indexes this instance's reconciles chose lately,
	// per pool, until its cache must show their blocks. Concurrent
	// reconciles read the same cache and the same cursor: without it they
	// all choose the same next index, and all but one lose the create and
	// choose again, a round trip each (a thousand nodes asking at once made
	// the answers queue). It only spreads the choices; the protocol above
	// still decides who gets a block.
	chosenMu sync.Mutex
	chosen   map[string]map[int64]time.Time // pool -> index -> chosen at
	cursors  map[string]*poolCursor         // pool -> this instance's cursor (also under chosenMu)
}

// chosenFor is how long a chosen index is skipped: longer than the cache
// takes to show a created block.
const chosenFor = 30 * time.Second

// choose records index as chosen in pool; false if this instance chose it
// lately (another reconcile is creating its block).
func (r *BlockRequestReconciler) choose(pool string, index int64, now time.Time) bool {
	r.chosenMu.Lock()
	defer r.chosenMu.Unlock()
	if r.chosen == nil {
		r.chosen = map[string]map[int64]time.Time{}
	}
	m := r.chosen[pool]
	if m == nil {
		m = map[int64]time.Time{}
		r.chosen[pool] = m
	}
	for i, at := range m {
		if now.Sub(at) > chosenFor {
			delete(m, i)
		}
	}
	if _, taken := m[index]; taken {
		return false
	}
	m[index] = now
	return true
}

// +kubebuilder:rbac:groups=vcoil.io,resources=blockrequests,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=vcoil.io,resources=blockrequests/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=vcoil.io,resources=addressblocks,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=vcoil.io,resources=addresspools,verbs=get;list;watch
// +kubebuilder:rbac:groups=vcoil.io,resources=addresspools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// maxClaims bounds how many block names one reconcile tries before it gives
// the request back to the queue; only instances racing for the same indexes
// make a claim fail.
const maxClaims = 16

// errClaimLost means another writer changed the request first; requeue.
var errClaimLost = errors.New("the request was changed by another writer")

// Reconcile implements reconcile.Reconciler.
func (r *BlockRequestReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	br := &vcoilv2.BlockRequest{}
	if err := r.Client.Get(ctx, req.NamespacedName, br); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !br.DeletionTimestamp.IsZero() || br.Done() {
		return ctrl.Result{}, nil
	}
	// The cache may lag behind a request that an earlier reconcile
	// answered and vcoild has consumed (deleted, its block released, when
	// it no longer needed it): answered again from the cache, it would get
	// a block nobody reads. A cached copy without a claim needs no read to
	// find out: every write before the block is made (the owner, the
	// claim, a failure) carries the copy's resourceVersion, and a stale
	// copy's conflicts or is not found, which requeues. A copy with a
	// claim goes on to create its block, so the apiserver's copy decides.
	if br.Status.AddressBlockName != "" {
		fresh := &vcoilv2.BlockRequest{}
		if err := r.APIReader.Get(ctx, req.NamespacedName, fresh); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		if !fresh.DeletionTimestamp.IsZero() || fresh.Done() {
			return ctrl.Result{}, nil
		}
		br = fresh
	}

	if err := r.checkNode(ctx, br); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return ctrl.Result{}, r.fail(ctx, br, vcoilv2.ReasonNodeNotFound, fmt.Sprintf("node %q does not exist", br.Spec.NodeName))
		case errors.Is(err, errClaimLost):
			return ctrl.Result{Requeue: true}, nil
		}
		return ctrl.Result{}, err
	}

	// The pool from the cache: its spec only grows (the webhook refuses
	// other changes; a pool found exhausted is read again from the
	// apiserver below), a deletion seen late makes a block that the
	// pool's finalizer waits for like any other, and the cursor this
	// instance moved is kept in memory (see advanceCursor).
	pool := &vcoilv2.AddressPool{}
	if err := r.getPool(ctx, br.Spec.PoolName, pool); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, r.fail(ctx, br, vcoilv2.ReasonPoolNotFound, fmt.Sprintf("address pool %q does not exist", br.Spec.PoolName))
		}
		return ctrl.Result{}, fmt.Errorf("get address pool %q for block request %q: %w", br.Spec.PoolName, br.Name, err)
	}
	if pool.Spec.IsLoadBalancer() {
		// A claim can only be left from a Pods pool of the same name that
		// was deleted and created again; its block is not this pool's.
		if err := r.undoClaim(ctx, br); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.fail(ctx, br, vcoilv2.ReasonPoolNotForPods,
			fmt.Sprintf("address pool %q serves LoadBalancer addresses, not pods", pool.Name))
	}
	if !pool.DeletionTimestamp.IsZero() {
		if err := r.undoClaim(ctx, br); err != nil {
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, r.fail(ctx, br, vcoilv2.ReasonPoolDeleting, fmt.Sprintf("address pool %q is being deleted", pool.Name))
	}
	parsed, err := parsePool(pool)
	if err != nil {
		return ctrl.Result{}, r.fail(ctx, br, "PoolInvalid", err.Error())
	}

	if br.Spec.PoolName == vcoilv2.DefaultPool {
		mu, _ := r.nodeLocks.LoadOrStore(br.Spec.NodeName, &sync.Mutex{})
		mu.(*sync.Mutex).Lock()
		defer mu.(*sync.Mutex).Unlock()
	}
	block, created, err := r.allocate(ctx, br, pool, parsed)
	if errors.Is(err, ipam.ErrNoSuchBlock) {
		// A subnet added to the pool may not be in the cache yet.
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(pool), pool); err != nil {
			return ctrl.Result{}, fmt.Errorf("get address pool %q for block request %q: %w", br.Spec.PoolName, br.Name, err)
		}
		if parsed, err = parsePool(pool); err != nil {
			return ctrl.Result{}, r.fail(ctx, br, "PoolInvalid", err.Error())
		}
		block, created, err = r.allocate(ctx, br, pool, parsed)
	}
	switch {
	case errors.Is(err, ipam.ErrNoSuchBlock):
		msg := fmt.Sprintf("all %d blocks of address pool %q are allocated", parsed.NumBlocks(), pool.Name)
		if r.Recorder != nil {
			// On the pool too: it is what the operator must grow, and
			// the requests go away once vcoild has read them.
			r.Recorder.Eventf(pool, nil, corev1.EventTypeWarning, vcoilv2.ReasonPoolExhausted, "AllocateBlock",
				"%s: node %s got no block (request %s)", msg, br.Spec.NodeName, br.Name)
		}
		return ctrl.Result{}, r.fail(ctx, br, vcoilv2.ReasonPoolExhausted, msg)
	case errors.Is(err, errClaimLost):
		return ctrl.Result{Requeue: true}, nil
	case err != nil:
		return ctrl.Result{}, err
	}

	r.advanceCursor(ctx, pool, block.Index)

	patch := client.MergeFromWithOptions(br.DeepCopy(), client.MergeFromWithOptimisticLock{})
	meta.SetStatusCondition(&br.Status.Conditions, metav1.Condition{
		Type:    vcoilv2.BlockRequestComplete,
		Status:  metav1.ConditionTrue,
		Reason:  vcoilv2.ReasonAllocated,
		Message: fmt.Sprintf("address block %s (%s) is carved for node %s", block.Name, blockCIDRs(block), br.Spec.NodeName),
	})
	if err := r.Client.Status().Patch(ctx, br, patch); err != nil {
		switch {
		case apierrors.IsConflict(err):
			return ctrl.Result{Requeue: true}, nil
		case apierrors.IsNotFound(err):
			// Deleted meanwhile (vcoild gave up on it, or an earlier
			// reconcile answered it): a block made now is nobody's.
			if created {
				return ctrl.Result{}, r.dropBlock(ctx, block)
			}
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("complete block request %q: %w", br.Name, err)
	}
	logger.Info("allocated address block", "request", br.Name, "node", br.Spec.NodeName, "pool", pool.Name,
		"block", block.Name, "cidrs", blockCIDRs(block), "nodeSubnet", block.NodeSubnet)
	return ctrl.Result{}, nil
}

// allocate runs steps 1 and 2 of the protocol and returns the request's
// block, and whether this call created it.
func (r *BlockRequestReconciler) allocate(ctx context.Context, br *vcoilv2.BlockRequest, pool *vcoilv2.AddressPool, parsed ipam.Pool) (*vcoilv2.AddressBlock, bool, error) {
	tried := map[int64]bool{}
	for range maxClaims {
		name := br.Status.AddressBlockName
		index, ok := blockIndex(pool.Name, name)
		if !ok || index >= parsed.NumBlocks() {
			// No claim yet, or one that no longer fits the pool.
			next, err := r.nextIndex(ctx, pool, parsed, tried)
			if err != nil {
				return nil, false, err
			}
			index, name = next, vcoilv2.BlockName(pool.Name, next)
			if err := r.claim(ctx, br, name); err != nil {
				return nil, false, err
			}
		}
		tried[index] = true

		block, created, err := r.createBlock(ctx, br, pool, parsed, index)
		if err == nil {
			return block, created, nil
		}
		if !errors.Is(err, errBlockTaken) {
			return nil, false, err
		}
		// Another request holds that block: choose again.
		if err := r.claim(ctx, br, ""); err != nil {
			return nil, false, err
		}
	}
	return nil, false, errClaimLost
}

// claim writes name (or clears it) into the request's status. A conflict
// means another instance got there first.
func (r *BlockRequestReconciler) claim(ctx context.Context, br *vcoilv2.BlockRequest, name string) error {
	patch := client.MergeFromWithOptions(br.DeepCopy(), client.MergeFromWithOptimisticLock{})
	br.Status.AddressBlockName = name
	if err := r.Client.Status().Patch(ctx, br, patch); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return errClaimLost
		}
		return fmt.Errorf("claim block %q for block request %q: %w", name, br.Name, err)
	}
	return nil
}

var errBlockTaken = errors.New("the block belongs to another request")

// createBlock creates the block at index for the request (created), or
// finds the one a previous attempt created. errBlockTaken means another
// request has it.
func (r *BlockRequestReconciler) createBlock(ctx context.Context, br *vcoilv2.BlockRequest, pool *vcoilv2.AddressPool, parsed ipam.Pool, index int64) (*vcoilv2.AddressBlock, bool, error) {
	cidrs, err := parsed.Block(index)
	if err != nil {
		return nil, false, fmt.Errorf("carve block %d of address pool %q: %w", index, pool.Name, err)
	}
	nodeSubnet, err := r.needsNodeSubnet(ctx, br)
	if err != nil {
		return nil, false, err
	}
	block := &vcoilv2.AddressBlock{
		ObjectMeta: metav1.ObjectMeta{
			Name: vcoilv2.BlockName(pool.Name, index),
			Labels: map[string]string{
				vcoilv2.LabelPool:    pool.Name,
				vcoilv2.LabelNode:    br.Spec.NodeName,
				vcoilv2.LabelRequest: string(br.UID),
			},
			Finalizers: []string{vcoilv2.Finalizer},
		},
		Index:      index,
		NodeSubnet: nodeSubnet,
	}
	if cidrs.IPv4.IsValid() {
		block.IPv4 = ptr.To(cidrs.IPv4.String())
	}
	if cidrs.IPv6.IsValid() {
		block.IPv6 = ptr.To(cidrs.IPv6.String())
	}
	if err := controllerutil.SetControllerReference(pool, block, r.Client.Scheme()); err != nil {
		return nil, false, fmt.Errorf("set owner of address block %q: %w", block.Name, err)
	}
	err = r.Client.Create(ctx, block)
	if err == nil {
		return block, true, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, false, fmt.Errorf("create address block %q for block request %q: %w", block.Name, br.Name, err)
	}
	existing := &vcoilv2.AddressBlock{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(block), existing); err != nil {
		if apierrors.IsNotFound(err) {
			// Deleted in between: the next attempt chooses again.
			return nil, false, errBlockTaken
		}
		return nil, false, fmt.Errorf("get address block %q: %w", block.Name, err)
	}
	if existing.Labels[vcoilv2.LabelRequest] != string(br.UID) {
		return nil, false, errBlockTaken
	}
	return existing, false, nil
}

// dropBlock deletes a block this instance just created for a request that
// is gone, with vcoil's finalizer (no node uses it).
func (r *BlockRequestReconciler) dropBlock(ctx context.Context, block *vcoilv2.AddressBlock) error {
	log.FromContext(ctx).Info("deleting the address block made for a request that is gone", "block", block.Name)
	patch := client.MergeFrom(block.DeepCopy())
	controllerutil.RemoveFinalizer(block, vcoilv2.Finalizer)
	if err := r.Client.Patch(ctx, block, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("release address block %q of a request that is gone: %w", block.Name, err)
	}
	if err := r.Client.Delete(ctx, block); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete address block %q of a request that is gone: %w", block.Name, err)
	}
	return nil
}

// needsNodeSubnet decides whether the block for br is the node's node subnet:
// its first block of the default pool, as long as it has none. Inside one
// instance nodeLocks serialises this; across instances vcoild's habit of
// asking for one default block at a time does.
func (r *BlockRequestReconciler) needsNodeSubnet(ctx context.Context, br *vcoilv2.BlockRequest) (bool, error) {
	if br.Spec.PoolName != vcoilv2.DefaultPool {
		return false, nil
	}
	blocks := &vcoilv2.AddressBlockList{}
	if err := r.APIReader.List(ctx, blocks, client.MatchingLabels{
		vcoilv2.LabelPool: vcoilv2.DefaultPool,
		vcoilv2.LabelNode: br.Spec.NodeName,
	}); err != nil {
		return false, fmt.Errorf("list default blocks of node %q: %w", br.Spec.NodeName, err)
	}
	for _, b := range blocks.Items {
		if b.NodeSubnet && b.Labels[vcoilv2.LabelRequest] != string(br.UID) && b.DeletionTimestamp.IsZero() {
			return false, nil
		}
	}
	return true, nil
}

// nextIndex finds the first free index after the pool's cursor, wrapping at
// the end, so that a freed block is not reused at once. ipam.ErrNoSuchBlock
// means the pool is exhausted.
func (r *BlockRequestReconciler) nextIndex(ctx context.Context, pool *vcoilv2.AddressPool, parsed ipam.Pool, tried map[int64]bool) (int64, error) {
	blocks := &vcoilv2.AddressBlockList{}
	// Only the indexes are read: the cache's objects without copies (a
	// thousand nodes asking at once made every answer copy up to a
	// thousand blocks).
	if err := r.Client.List(ctx, blocks, client.MatchingLabels{vcoilv2.LabelPool: pool.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return 0, fmt.Errorf("list blocks of address pool %q: %w", pool.Name, err)
	}
	used := make(map[int64]bool, len(blocks.Items)+len(tried))
	for _, b := range blocks.Items {
		used[b.Index] = true
	}
	for i := range tried {
		used[i] = true
	}
	n := parsed.NumBlocks()
	if int64(len(used)) >= n {
		return 0, ipam.ErrNoSuchBlock
	}
	start := int64(0)
	if last := r.cursorOf(pool); last != nil && *last >= 0 && *last < n-1 {
		start = *last + 1
	}
	// At most n steps: an index is skipped when used, or chosen lately
	// by another reconcile of this instance; when only such indexes are
	// free, the first of them (the protocol sorts out who gets it), so
	// that a pool is never called exhausted while a block is free.
	now := time.Now()
	fallback := int64(-1)
	for i, idx := int64(0), start; i < n; i, idx = i+1, (idx+1)%n {
		if used[idx] {
			continue
		}
		if r.choose(pool.Name, idx, now) {
			return idx, nil
		}
		if fallback < 0 {
			fallback = idx
		}
	}
	if fallback >= 0 {
		return fallback, nil
	}
	return 0, ipam.ErrNoSuchBlock
}

// poolCursor is this instance's cursor of one pool: the index it carved
// last, and whether a write of it to the pool's status is under way.
type poolCursor struct {
	index   int64
	writing bool
	dirty   bool
}

// cursorOf is the pool's cursor: this instance's, else the pool's status.
func (r *BlockRequestReconciler) cursorOf(pool *vcoilv2.AddressPool) *int64 {
	r.chosenMu.Lock()
	defer r.chosenMu.Unlock()
	if c, ok := r.cursors[pool.Name]; ok {
		return ptr.To(c.index)
	}
	return pool.Status.LastBlockIndex
}

// advanceCursor records index as the pool's last carved block: at once in
// this instance, in the pool's status by one write at a time, carrying the
// latest index: with sixteen requests answered at once, a write each was a
// sixth of the controller's apiserver writes. The request whose reconcile
// writes waits for the write; the others are answered before their index
// is in the status, so a restart in between starts from an older cursor.
// Losing this write only risks an early reuse of a freed block, never a
// double allocation, so failures are logged, not returned.
func (r *BlockRequestReconciler) advanceCursor(ctx context.Context, pool *vcoilv2.AddressPool, index int64) {
	r.chosenMu.Lock()
	if r.cursors == nil {
		r.cursors = map[string]*poolCursor{}
	}
	c := r.cursors[pool.Name]
	if c == nil {
		c = &poolCursor{index: -1}
		r.cursors[pool.Name] = c
	}
	c.index = index
	if c.writing {
		c.dirty = true
		r.chosenMu.Unlock()
		return
	}
	c.writing = true
	r.chosenMu.Unlock()
	for {
		if pool.Status.LastBlockIndex == nil || *pool.Status.LastBlockIndex != index {
			patch := client.MergeFrom(pool.DeepCopy())
			pool.Status.LastBlockIndex = ptr.To(index)
			if err := r.Client.Status().Patch(ctx, pool, patch); err != nil {
				log.FromContext(ctx).Error(err, "cannot record the last block index of the pool", "pool", pool.Name, "index", index)
			}
		}
		r.chosenMu.Lock()
		if !c.dirty {
			c.writing = false
			r.chosenMu.Unlock()
			return
		}
		c.dirty = false
		index = c.index
		r.chosenMu.Unlock()
	}
}

// undoClaim deletes a block this request's claim created before it
// completed, when the request can no longer complete.
func (r *BlockRequestReconciler) undoClaim(ctx context.Context, br *vcoilv2.BlockRequest) error {
	if br.Status.AddressBlockName == "" {
		return nil
	}
	block := &vcoilv2.AddressBlock{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Name: br.Status.AddressBlockName}, block); err != nil {
		return client.IgnoreNotFound(err)
	}
	if block.Labels[vcoilv2.LabelRequest] != string(br.UID) {
		return nil
	}
	return releaseBlock(ctx, r.Client, block)
}

// checkNode makes sure the request's Node exists and owns the request
// (not as its controller), so that Kubernetes collects the request with
// the Node even when vcoild created it without that owner. A NotFound
// error means the node does not exist.
//
// A request that names its node as owner, as vcoild's do, is checked
// against the cache of Node metadata that the node GC keeps: a thousand
// nodes asking at once made every answer wait for three apiserver reads in
// a row, this one among them. A request without the owner reads the Node
// from the apiserver: a stale cache could hand out the UID of a Node
// deleted and created again, and the collection of that old owner would
// take the request along.
func (r *BlockRequestReconciler) checkNode(ctx context.Context, br *vcoilv2.BlockRequest) error {
	key := client.ObjectKey{Name: br.Spec.NodeName}
	for _, ref := range br.OwnerReferences {
		if ref.Kind == "Node" && ref.APIVersion == "v1" && ref.Name == br.Spec.NodeName {
			cached := &metav1.PartialObjectMetadata{}
			cached.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
			err := r.Client.Get(ctx, key, cached)
			if err == nil && cached.UID == ref.UID {
				return nil
			}
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("get node %q of block request %q: %w", br.Spec.NodeName, br.Name, err)
			}
			// Not (yet) in the cache, or another UID: the apiserver
			// decides.
			break
		}
	}
	node := &corev1.Node{}
	if err := r.APIReader.Get(ctx, key, node); err != nil {
		if apierrors.IsNotFound(err) {
			return err
		}
		return fmt.Errorf("get node %q of block request %q: %w", br.Spec.NodeName, br.Name, err)
	}
	return r.ensureNodeOwner(ctx, br, node)
}

// getPool reads the pool from the cache, and from the apiserver when the
// cache does not have it (yet): a pool created a moment before the request
// is no reason to fail it.
func (r *BlockRequestReconciler) getPool(ctx context.Context, name string, pool *vcoilv2.AddressPool) error {
	err := r.Client.Get(ctx, client.ObjectKey{Name: name}, pool)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, client.ObjectKey{Name: name}, pool)
	}
	return err
}

// ensureNodeOwner adds node to the request's owners unless it is one.
func (r *BlockRequestReconciler) ensureNodeOwner(ctx context.Context, br *vcoilv2.BlockRequest, node *corev1.Node) error {
	for _, ref := range br.OwnerReferences {
		if ref.UID == node.UID {
			return nil
		}
	}
	patch := client.MergeFromWithOptions(br.DeepCopy(), client.MergeFromWithOptimisticLock{})
	br.OwnerReferences = append(br.OwnerReferences, metav1.OwnerReference{
		APIVersion: "v1",
		Kind:       "Node",
		Name:       node.Name,
		UID:        node.UID,
	})
	if err := r.Client.Patch(ctx, br, patch); err != nil {
		if apierrors.IsConflict(err) {
			return fmt.Errorf("set node owner of block request %q: %w", br.Name, errClaimLost)
		}
		return fmt.Errorf("set node owner of block request %q: %w", br.Name, err)
	}
	return nil
}

// fail marks the request Failed; vcoild reads the reason, reports it and
// deletes the request.
func (r *BlockRequestReconciler) fail(ctx context.Context, br *vcoilv2.BlockRequest, reason, msg string) error {
	patch := client.MergeFromWithOptions(br.DeepCopy(), client.MergeFromWithOptimisticLock{})
	meta.SetStatusCondition(&br.Status.Conditions, metav1.Condition{
		Type: vcoilv2.BlockRequestFailed, Status: metav1.ConditionTrue, Reason: reason, Message: msg,
	})
	if err := r.Client.Status().Patch(ctx, br, patch); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil // requeued by the watch event of the other write
		}
		return fmt.Errorf("mark block request %q failed (%s): %w", br.Name, reason, err)
	}
	log.FromContext(ctx).Info("block request failed", "request", br.Name, "node", br.Spec.NodeName, "pool", br.Spec.PoolName, "reason", reason, "message", msg)
	if r.Recorder != nil {
		r.Recorder.Eventf(br, nil, corev1.EventTypeWarning, reason, "AllocateBlock", "%s", msg)
	}
	return nil
}

// blockIndex parses the index out of a block name of pool.
func blockIndex(pool, name string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, pool+"-")
	if !ok {
		return 0, false
	}
	i, err := strconv.ParseInt(rest, 10, 64)
	return i, err == nil && i >= 0 && strconv.FormatInt(i, 10) == rest
}

func blockCIDRs(b *vcoilv2.AddressBlock) string {
	var parts []string
	for _, c := range []*string{b.IPv4, b.IPv6} {
		if c != nil {
			parts = append(parts, *c)
		}
	}
	return strings.Join(parts, ",")
}

// SetupWithManager registers the reconciler.
func (r *BlockRequestReconciler) SetupWithManager(mgr ctrl.Manager, concurrency int) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&vcoilv2.BlockRequest{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrency}).
		Named("blockrequest").
		Complete(r)
}
