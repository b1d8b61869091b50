package controllers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

// AddressPoolReconciler keeps a finalizer on every Pods AddressPool while any
// of its blocks exists (Coil v2 design, "Garbage Collection / AddressPool") and
// keeps the pool's status and block metrics current.
//
// LoadBalancer pools are not block pools: their status and finalizer belong
// to the LoadBalancer reconciler, and this one leaves them entirely alone
// (writing block counts there would fight it; a finalizer here would hold the
// pool forever, as no block ever releases it).
type AddressPoolReconciler struct {
	Client  client.Client
	Metrics *PoolMetrics
}

// +kubebuilder:rbac:groups=vcoil.io,resources=addresspools,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=vcoil.io,resources=addresspools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=vcoil.io,resources=addresspools/finalizers,verbs=update
// +kubebuilder:rbac:groups=vcoil.io,resources=addressblocks,verbs=get;list;watch

// Reconcile implements reconcile.Reconciler.
func (r *AddressPoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	pool := &vcoilv2.AddressPool{}
	if err := r.Client.Get(ctx, req.NamespacedName, pool); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.forget(req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get address pool %q: %w", req.Name, err)
	}
	if pool.Spec.IsLoadBalancer() {
		// Usage is immutable, but a Pods pool of this name may have been
		// deleted and created again as a LoadBalancer pool: drop its gauges,
		// so that the LoadBalancer pool never shows as a pool of 0 blocks.
		r.Metrics.forget(pool.Name)
		return ctrl.Result{}, nil
	}

	blocks := &vcoilv2.AddressBlockList{}
	if err := r.Client.List(ctx, blocks, client.MatchingLabels{vcoilv2.LabelPool: pool.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("list blocks of address pool %q: %w", pool.Name, err)
	}

	if err := r.updateStatus(ctx, pool, int64(len(blocks.Items))); err != nil {
		return ctrl.Result{}, err
	}

	if !pool.DeletionTimestamp.IsZero() {
		// The blocks go with the pool (owner references) once their nodes
		// stop using them; the pool stays until the last one is gone.
		if len(blocks.Items) > 0 || !controllerutil.ContainsFinalizer(pool, vcoilv2.Finalizer) {
			return ctrl.Result{}, nil
		}
		patch := client.MergeFromWithOptions(pool.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.RemoveFinalizer(pool, vcoilv2.Finalizer)
		if err := r.Client.Patch(ctx, pool, patch); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("remove finalizer of address pool %q: %w", pool.Name, err)
		}
		logger.Info("released address pool", "pool", pool.Name)
		r.Metrics.forget(pool.Name)
		return ctrl.Result{}, nil
	}

	if !controllerutil.ContainsFinalizer(pool, vcoilv2.Finalizer) {
		patch := client.MergeFromWithOptions(pool.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(pool, vcoilv2.Finalizer)
		if err := r.Client.Patch(ctx, pool, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer to address pool %q: %w", pool.Name, err)
		}
	}
	return ctrl.Result{}, nil
}

// updateStatus writes the block counts and the Available condition, also
// while the pool is being deleted, so that users see how many blocks hold it.
func (r *AddressPoolReconciler) updateStatus(ctx context.Context, pool *vcoilv2.AddressPool, allocated int64) error {
	status := pool.Status.DeepCopy()
	status.ObservedGeneration = pool.Generation
	status.BlocksAllocated = allocated
	cond := metav1.Condition{Type: vcoilv2.PoolAvailable, ObservedGeneration: pool.Generation}
	if parsed, err := parsePool(pool); err != nil {
		status.BlocksMax = 0
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "InvalidSpec", err.Error()
	} else {
		status.BlocksMax = parsed.NumBlocks()
		if status.BlocksAllocated < status.BlocksMax {
			cond.Status, cond.Reason = metav1.ConditionTrue, vcoilv2.ReasonBlocksFree
			cond.Message = fmt.Sprintf("%d of %d blocks are free", status.BlocksMax-status.BlocksAllocated, status.BlocksMax)
		} else {
			cond.Status, cond.Reason = metav1.ConditionFalse, vcoilv2.ReasonPoolExhausted
			cond.Message = fmt.Sprintf("all %d blocks are allocated", status.BlocksMax)
		}
	}
	meta.SetStatusCondition(&status.Conditions, cond)
	r.Metrics.set(pool.Name, status.BlocksMax, status.BlocksAllocated)

	if equality.Semantic.DeepEqual(*status, pool.Status) {
		return nil
	}
	// A merge patch of the counts only: lastBlockIndex belongs to the
	// BlockRequest reconciler and must not be rewritten from a stale read.
	patch := client.MergeFrom(pool.DeepCopy())
	pool.Status.ObservedGeneration = status.ObservedGeneration
	pool.Status.BlocksMax = status.BlocksMax
	pool.Status.BlocksAllocated = status.BlocksAllocated
	pool.Status.Conditions = status.Conditions
	if err := r.Client.Status().Patch(ctx, pool, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("update status of address pool %q: %w", pool.Name, err)
	}
	return nil
}

// SetupWithManager registers the reconciler; a change to any block requeues
// its pool so the counts follow.
func (r *AddressPoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&vcoilv2.AddressPool{}).
		Watches(&vcoilv2.AddressBlock{}, handler.EnqueueRequestsFromMapFunc(poolOfBlock)).
		Named("addresspool").
		Complete(r)
}

func poolOfBlock(_ context.Context, o client.Object) []reconcile.Request {
	pool := o.GetLabels()[vcoilv2.LabelPool]
	if pool == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: pool}}}
}
