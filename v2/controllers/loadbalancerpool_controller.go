package controllers

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

// LoadBalancerPoolReconciler keeps LoadBalancer AddressPools: their status
// (addressesMax, addressesAllocated, Available) and metrics, and a
// finalizer that holds a pool while a Service holds one of its addresses.
// It counts from the Services' status in the cache, not from the
// allocator's memory, so that it needs no coordination with it; the
// AddressPoolReconciler leaves these pools alone.
type LoadBalancerPoolReconciler struct {
	Client  client.Client
	Metrics *PoolMetrics
}

// +kubebuilder:rbac:groups=vcoil.io,resources=addresspools,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=vcoil.io,resources=addresspools/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=vcoil.io,resources=addresspools/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch

// Reconcile implements reconcile.Reconciler.
func (r *LoadBalancerPoolReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	pool := &vcoilv2.AddressPool{}
	if err := r.Client.Get(ctx, req.NamespacedName, pool); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.Metrics.forgetAddresses(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !pool.Spec.IsLoadBalancer() {
		return ctrl.Result{}, nil
	}
	addrs, parseErr := parseLBPool(pool)

	var services corev1.ServiceList
	if err := r.Client.List(ctx, &services); err != nil {
		return ctrl.Result{}, fmt.Errorf("list services to count the addresses of pool %q: %w", pool.Name, err)
	}
	held := map[netip.Addr]bool{}
	if parseErr == nil {
		for i := range services.Items {
			for _, a := range ingressAddrs(&services.Items[i]) {
				if addrs.Contains(a) {
					held[a] = true
				}
			}
		}
	}

	status := pool.Status.DeepCopy()
	status.ObservedGeneration = pool.Generation
	status.AddressesAllocated = int64(len(held))
	cond := metav1.Condition{Type: vcoilv2.PoolAvailable, ObservedGeneration: pool.Generation}
	switch {
	case parseErr != nil:
		status.AddressesMax = 0
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "InvalidSpec", parseErr.Error()
	default:
		status.AddressesMax = addrs.Size()
		// Requested addresses may be network or broadcast addresses, which
		// Size does not count: never report a negative number free.
		if free := status.AddressesMax - status.AddressesAllocated; free > 0 {
			cond.Status, cond.Reason = metav1.ConditionTrue, vcoilv2.ReasonAddressesFree
			cond.Message = fmt.Sprintf("%d of %d addresses are free", free, status.AddressesMax)
		} else {
			cond.Status, cond.Reason = metav1.ConditionFalse, vcoilv2.ReasonExhausted
			cond.Message = fmt.Sprintf("all %d addresses are held by services", status.AddressesMax)
		}
	}
	meta.SetStatusCondition(&status.Conditions, cond)
	r.Metrics.setAddresses(pool.Name, status.AddressesMax, status.AddressesAllocated)
	if !equality.Semantic.DeepEqual(*status, pool.Status) {
		patch := client.MergeFrom(pool.DeepCopy())
		pool.Status.ObservedGeneration = status.ObservedGeneration
		pool.Status.AddressesMax = status.AddressesMax
		pool.Status.AddressesAllocated = status.AddressesAllocated
		pool.Status.Conditions = status.Conditions
		if err := r.Client.Status().Patch(ctx, pool, patch); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("update status of LoadBalancer pool %q: %w", pool.Name, err)
		}
	}

	if !pool.DeletionTimestamp.IsZero() {
		// Services keep their addresses of a pool being deleted; the pool
		// goes when the last of them is released.
		if len(held) > 0 || !controllerutil.ContainsFinalizer(pool, vcoilv2.Finalizer) {
			return ctrl.Result{}, nil
		}
		patch := client.MergeFromWithOptions(pool.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.RemoveFinalizer(pool, vcoilv2.Finalizer)
		if err := r.Client.Patch(ctx, pool, patch); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("remove finalizer of LoadBalancer pool %q: %w", pool.Name, err)
		}
		log.FromContext(ctx).Info("released LoadBalancer pool", "pool", pool.Name)
		r.Metrics.forgetAddresses(pool.Name)
		return ctrl.Result{}, nil
	}
	if !controllerutil.ContainsFinalizer(pool, vcoilv2.Finalizer) {
		patch := client.MergeFromWithOptions(pool.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(pool, vcoilv2.Finalizer)
		if err := r.Client.Patch(ctx, pool, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer to LoadBalancer pool %q: %w", pool.Name, err)
		}
	}
	return ctrl.Result{}, nil
}

// SetupWithManager registers the reconciler for LoadBalancer pools; a
// Service's change requeues the pools of the addresses it shows, before and
// after the change.
func (r *LoadBalancerPoolReconciler) SetupWithManager(mgr ctrl.Manager) error {
	isLB := predicate.NewPredicateFuncs(func(o client.Object) bool {
		p, ok := o.(*vcoilv2.AddressPool)
		return ok && p.Spec.IsLoadBalancer()
	})
	return ctrl.NewControllerManagedBy(mgr).
		For(&vcoilv2.AddressPool{}, builder.WithPredicates(isLB)).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(r.poolsOfService)).
		Named("loadbalancerpool").
		Complete(r)
}

func (r *LoadBalancerPoolReconciler) poolsOfService(ctx context.Context, o client.Object) []reconcile.Request {
	svc, ok := o.(*corev1.Service)
	if !ok || len(svc.Status.LoadBalancer.Ingress) == 0 {
		return nil
	}
	pools, err := listLBPools(ctx, r.Client)
	if err != nil {
		log.FromContext(ctx).Error(err, "list pools for a service change")
		return nil
	}
	seen := map[string]bool{}
	var out []reconcile.Request
	for _, a := range ingressAddrs(svc) {
		if p := pools.find(a); p != nil && !seen[p.obj.Name] {
			seen[p.obj.Name] = true
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Name: p.obj.Name}})
		}
	}
	return out
}
