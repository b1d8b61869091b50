package nodeipam

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

// Reconcile follows the node's AddressBlocks in the apiserver: a block whose
// pool is being deleted drains (no new addresses) and is released once its
// last address is freed; a block deleted behind vcoild's back gives no more
// addresses. A block whose release failed is released again here: an error
// puts it back into the queue with backoff.
func (m *NodeIPAM) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	m.mu.Lock()
	retry := m.releasing[req.Name]
	m.mu.Unlock()
	if retry {
		if err := m.release(ctx, req.Name); err != nil {
			m.log.Error(err, "cannot release address block; trying again", "block", req.Name)
			return ctrl.Result{}, err
		}
		return ctrl.Result{}, nil
	}
	b := &vcoilv2.AddressBlock{}
	err := m.client.Get(ctx, req.NamespacedName, b)
	if client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, err
	}
	m.mu.Lock()
	if !m.alloc.HasBlock(req.Name) {
		m.mu.Unlock()
		return ctrl.Result{}, nil
	}
	if err != nil { // gone from the apiserver
		inUse := m.alloc.InUse(req.Name)
		m.alloc.Drain(req.Name)
		m.mu.Unlock()
		if inUse > 0 {
			m.log.Info("address block was deleted while pods use it; it gives no more addresses", "block", req.Name, "inUse", inUse)
		}
		return ctrl.Result{}, nil
	}
	if b.DeletionTimestamp.IsZero() {
		m.mu.Unlock()
		return ctrl.Result{}, nil
	}
	m.alloc.Drain(b.Name)
	empty := m.alloc.InUse(b.Name) == 0
	if empty {
		m.retireBlockLocked(b.Name)
	}
	m.mu.Unlock()
	if !empty {
		m.log.Info("address block is being deleted; draining it", "block", b.Name)
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, m.release(ctx, b.Name)
}

// reconcileRequest handles an abandoned BlockRequest of the node (its
// caller timed out, or an earlier vcoild left it) once it is answered: a block the node needs (its pool has no free address, or a
// caller waits for one, or it is the missing node subnet) is adopted for
// later allocations; any other is released, not hoarded until a restart.
// The request is deleted then.
func (m *NodeIPAM) reconcileRequest(ctx context.Context, name string) error {
	br := &vcoilv2.BlockRequest{}
	if err := m.client.Get(ctx, client.ObjectKey{Name: name}, br); err != nil {
		if apierrors.IsNotFound(err) {
			m.mu.Lock()
			delete(m.abandoned, name)
			m.mu.Unlock()
		}
		return client.IgnoreNotFound(err)
	}
	m.mu.Lock()
	mine := m.abandoned[name] && !m.waiting[name]
	m.mu.Unlock()
	if !mine || br.Spec.NodeName != m.cfg.NodeName || !br.Done() || !br.DeletionTimestamp.IsZero() {
		return nil
	}
	release := ""
	if br.FailedCondition() == nil && br.Status.AddressBlockName != "" {
		var err error
		if release, err = m.takeLateBlock(ctx, br); err != nil {
			return err
		}
	}
	// The request goes before an unneeded block is released: vcoil-controller
	// answers a request whose block is gone again, and would hand the same
	// block name out anew.
	if err := m.client.Delete(ctx, br); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete block request %q: %w", name, err)
	}
	m.mu.Lock()
	delete(m.abandoned, name)
	m.mu.Unlock()
	if release != "" {
		m.releaseOrRetry(ctx, release)
	}
	return nil
}

// takeLateBlock adopts the block of a request answered late, or retires it
// and returns its name for the caller to release once the request is gone.
func (m *NodeIPAM) takeLateBlock(ctx context.Context, br *vcoilv2.BlockRequest) (release string, err error) {
	b := &vcoilv2.AddressBlock{}
	if err := m.reader.Get(ctx, client.ObjectKey{Name: br.Status.AddressBlockName}, b); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		return "", fmt.Errorf("get address block %q of request %q: %w", br.Status.AddressBlockName, br.Name, err)
	}
	if b.Labels[vcoilv2.LabelNode] != m.cfg.NodeName || !b.DeletionTimestamp.IsZero() {
		return "", nil
	}
	pool := b.Labels[vcoilv2.LabelPool]
	m.mu.Lock()
	if m.alloc.HasBlock(b.Name) {
		// Retired by an earlier try whose request delete failed: released
		// now that the request goes.
		if m.releasing[b.Name] {
			release = b.Name
		}
		m.mu.Unlock()
		return release, nil
	}
	needed := m.needsBlockLocked(pool, b)
	if err := m.addBlockLocked(b); err != nil {
		m.mu.Unlock()
		return "", err
	}
	if !needed {
		m.retireBlockLocked(b.Name)
	}
	m.mu.Unlock()
	if needed {
		m.log.Info("adopted the address block of a request answered after its wait", "request", br.Name, "pool", pool, "block", b.Name,
			"ipv4", ptr.Deref(b.IPv4, ""), "ipv6", ptr.Deref(b.IPv6, ""))
		return "", nil
	}
	m.log.Info("releasing the address block of a request answered after its wait: the pool has free addresses", "request", br.Name, "pool", pool, "block", b.Name)
	return b.Name, nil
}

// needsBlockLocked tells whether the node needs block b of pool: it is the
// node subnet the node lacks, a caller waits for a block of the pool, or
// none of the pool's blocks has a free address.
func (m *NodeIPAM) needsBlockLocked(pool string, b *vcoilv2.AddressBlock) bool {
	if b.NodeSubnet && pool == vcoilv2.DefaultPool && m.nodeSubnet == "" {
		return true
	}
	if _, ok := m.acquiring[pool]; ok {
		return true
	}
	for _, u := range m.alloc.Blocks() {
		if u.Pool == pool && !u.Draining && u.Free > 0 {
			return false
		}
	}
	return true
}

// SetupWithManager watches the node's blocks and its BlockRequests.
// Failed releases are retried through the block controller's queue, with
// exponential backoff from Config.ReleaseBackoff to ReleaseBackoffCap.
func (m *NodeIPAM) SetupWithManager(mgr ctrl.Manager) error {
	mine := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetLabels()[vcoilv2.LabelNode] == m.cfg.NodeName
	})
	// The queue is taken when the controller starts; the blocks retired
	// before then are queued at once.
	releases := source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.releases = q
		for name := range m.releasing {
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
		}
		return nil
	})
	err := ctrl.NewControllerManagedBy(mgr).
		For(&vcoilv2.AddressBlock{}, builder.WithPredicates(mine)).
		WatchesRawSource(releases).
		WithOptions(controller.Options{
			RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](m.cfg.ReleaseBackoff, m.cfg.ReleaseBackoffCap),
		}).
		Named("node-blocks").
		Complete(m)
	if err != nil {
		return err
	}
	// The requests of the initial list were left by an earlier vcoild (or
	// are waited for by this one, which then deletes them): abandoned.
	leftBefore := predicate.Funcs{CreateFunc: func(e event.CreateEvent) bool {
		if e.IsInInitialList {
			m.mu.Lock()
			m.abandoned[e.Object.GetName()] = true
			m.mu.Unlock()
		}
		return true
	}}
	return ctrl.NewControllerManagedBy(mgr).
		For(&vcoilv2.BlockRequest{}, builder.WithPredicates(mine, leftBefore)).
		Named("node-block-requests").
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			return reconcile.Result{}, m.reconcileRequest(ctx, req.Name)
		}))
}
