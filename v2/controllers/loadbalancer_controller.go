package controllers

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/ipam"
	"github.com/vcoil/vcoil/v2/pkg/lbipam"
)

// Reasons of the Events on a Service that did not get (all) its LoadBalancer
// addresses.
const (
	ReasonLBPoolNotFound      = "PoolNotFound"
	ReasonNotALBPool          = "NotALoadBalancerPool"
	ReasonLBPoolDeleting      = "PoolDeleting"
	ReasonLBFamilyNotInPool   = "FamilyNotInPool"
	ReasonLBPoolExhausted     = "PoolExhausted"
	ReasonLBAddressInUse      = "AddressInUse"
	ReasonLBAddressNotInPool  = "AddressNotInPool"
	ReasonLBBadRequest        = "BadRequest"
	ReasonLBAddressConflict   = "AddressConflict"
	ReasonLBAddressesAssigned = "AddressesAssigned"
)

// lbRetry is the backstop requeue of a Service waiting for a free address;
// a release or a pool change wakes it at once.
const lbRetry = 5 * time.Minute

// LoadBalancerReconciler gives Services of type LoadBalancer their addresses
// from LoadBalancer AddressPools and writes them to
// status.loadBalancer.ingress.
//
// The Service's status is the only record of its addresses (no finalizer, no
// other object), so that deleting a Service releases them. The reconciler
// keeps which Service holds which address in memory (lbipam.Table) and runs
// one reconcile at a time: an address given a moment ago whose status write
// the cache has not seen yet is still known as taken. Before its first
// allocation it rebuilds the table from every Service's status; when two
// Services claim one address, the older one keeps it.
type LoadBalancerReconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	// ClassOnly: serve only Services whose loadBalancerClass is
	// vcoilv2.LoadBalancerClass, not those without a class.
	ClassOnly bool
	// DefaultPool is the pool of Services that name none.
	DefaultPool string

	mu      sync.Mutex
	table   *lbipam.Table // nil until rebuilt
	waiting map[types.NamespacedName]bool
	wake    chan event.GenericEvent
}

// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=vcoil.io,resources=addresspools,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// lbPool is a LoadBalancer AddressPool and its addresses.
type lbPool struct {
	obj   *vcoilv2.AddressPool
	addrs lbipam.Pool
}

// lbPools are the valid LoadBalancer pools by name; others names every
// AddressPool that exists but is not one (for the Event).
type lbPools struct {
	byName map[string]lbPool
	others map[string]bool
}

func (p lbPools) contain(a netip.Addr) bool { return p.find(a) != nil }

// find is the pool a is an address of.
func (p lbPools) find(a netip.Addr) *lbPool {
	for _, pool := range p.byName {
		if pool.addrs.Contains(a) {
			return &pool
		}
	}
	return nil
}

// parseLBPool reads a LoadBalancer pool's subnets.
func parseLBPool(pool *vcoilv2.AddressPool) (lbipam.Pool, error) {
	specs := make([]ipam.SubnetSpec, len(pool.Spec.Subnets))
	for i, s := range pool.Spec.Subnets {
		specs[i] = ipam.SubnetSpec{IPv4: s.IPv4, IPv6: s.IPv6}
	}
	p, err := lbipam.ParsePool(specs)
	if err != nil {
		return lbipam.Pool{}, fmt.Errorf("address pool %q is invalid: spec.%w", pool.Name, err)
	}
	return p, nil
}

// listLBPools reads every AddressPool from the cache. An invalid
// LoadBalancer pool (the webhook keeps them out) gives no addresses.
func listLBPools(ctx context.Context, c client.Reader) (lbPools, error) {
	var list vcoilv2.AddressPoolList
	if err := c.List(ctx, &list); err != nil {
		return lbPools{}, fmt.Errorf("list address pools: %w", err)
	}
	out := lbPools{byName: map[string]lbPool{}, others: map[string]bool{}}
	for i := range list.Items {
		p := &list.Items[i]
		if !p.Spec.IsLoadBalancer() {
			out.others[p.Name] = true
			continue
		}
		addrs, err := parseLBPool(p)
		if err != nil {
			log.FromContext(ctx).Error(err, "ignoring an invalid LoadBalancer pool", "pool", p.Name)
			continue
		}
		out.byName[p.Name] = lbPool{obj: p, addrs: addrs}
	}
	return out, nil
}

// ingressAddrs are the IP addresses of a Service's status.loadBalancer.ingress.
func ingressAddrs(svc *corev1.Service) []netip.Addr {
	var out []netip.Addr
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(in.IP); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

func holderOf(svc *corev1.Service) string { return svc.Namespace + "/" + svc.Name }

// serves says whether vcoil gives svc its LoadBalancer addresses.
func (r *LoadBalancerReconciler) serves(svc *corev1.Service) bool {
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		return false
	}
	if svc.Spec.LoadBalancerClass == nil {
		return !r.ClassOnly
	}
	return *svc.Spec.LoadBalancerClass == vcoilv2.LoadBalancerClass
}

// Reconcile implements reconcile.Reconciler.
func (r *LoadBalancerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pools, err := listLBPools(ctx, r.Client)
	if err != nil {
		return ctrl.Result{}, err
	}
	if r.table == nil {
		if err := r.rebuild(ctx, pools); err != nil {
			return ctrl.Result{}, err
		}
	}
	holder := req.Namespace + "/" + req.Name

	svc := &corev1.Service{}
	if err := r.Client.Get(ctx, req.NamespacedName, svc); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("get service %s: %w", holder, err)
		}
		delete(r.waiting, req.NamespacedName)
		if released := r.table.Release(holder); len(released) > 0 {
			log.FromContext(ctx).Info("released LoadBalancer addresses of a deleted service", "service", holder, "addresses", released)
			r.wakeWaiting()
		}
		return ctrl.Result{}, nil
	}

	if !r.serves(svc) {
		delete(r.waiting, req.NamespacedName)
		return ctrl.Result{}, r.reconcileUnserved(ctx, svc, pools)
	}

	desired, short := r.allocate(ctx, svc, pools)
	if err := r.writeIngress(ctx, svc, desired, nil); err != nil {
		// The table keeps both the old and the new addresses for the
		// Service until a write succeeds, so none is given twice meanwhile.
		if apierrors.IsConflict(err) {
			return ctrl.Result{Requeue: true}, nil // changed meanwhile: its event requeues it too
		}
		return ctrl.Result{}, err
	}
	if released := r.table.Keep(holder, desired); len(released) > 0 {
		r.wakeWaiting()
	}
	if short {
		r.waiting[req.NamespacedName] = true
		return ctrl.Result{RequeueAfter: lbRetry}, nil
	}
	delete(r.waiting, req.NamespacedName)
	return ctrl.Result{}, nil
}

// rebuild fills the table from every Service's status, before the first
// allocation. Only addresses of LoadBalancer pools count (another
// implementation's addresses are not vcoil's to give). Services are taken
// oldest first, so that of two claiming one address the older keeps it;
// the younger loses it at its own reconcile.
func (r *LoadBalancerReconciler) rebuild(ctx context.Context, pools lbPools) error {
	var list corev1.ServiceList
	if err := r.Client.List(ctx, &list); err != nil {
		return fmt.Errorf("list services to rebuild the LoadBalancer allocations: %w", err)
	}
	slices.SortFunc(list.Items, func(a, b corev1.Service) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(holderOf(&a), holderOf(&b))
	})
	table := lbipam.NewTable()
	for i := range list.Items {
		svc := &list.Items[i]
		for _, a := range ingressAddrs(svc) {
			if pools.contain(a) {
				table.Assign(a, holderOf(svc))
			}
		}
	}
	r.table = table
	log.FromContext(ctx).Info("rebuilt the LoadBalancer allocations from the services' status", "services", len(list.Items), "addresses", table.Len())
	return nil
}

// reconcileUnserved handles a Service vcoil does not serve. One that is no
// longer of type LoadBalancer loses the vcoil addresses it held: the
// apiserver clears status.loadBalancer on such a type change (the test
// shows it), and whatever status such a Service still shows (written by
// hand, restored from a backup) loses vcoil's addresses here. One of type
// LoadBalancer served by someone else is not touched, but addresses of vcoil
// pools it shows stay taken, so that vcoil never gives them to another.
func (r *LoadBalancerReconciler) reconcileUnserved(ctx context.Context, svc *corev1.Service, pools lbPools) error {
	holder := holderOf(svc)
	var ours []netip.Addr
	for _, a := range ingressAddrs(svc) {
		if pools.contain(a) {
			ours = append(ours, a)
		}
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		var kept []netip.Addr
		for _, a := range ours {
			if r.table.Assign(a, holder) {
				kept = append(kept, a)
			}
		}
		if released := r.table.Keep(holder, kept); len(released) > 0 {
			r.wakeWaiting()
		}
		return nil
	}
	if len(ours) > 0 {
		if err := r.writeIngress(ctx, svc, nil, ours); err != nil {
			return err
		}
		log.FromContext(ctx).Info("released LoadBalancer addresses of a service that is no longer of type LoadBalancer", "service", holder, "addresses", ours, "type", svc.Spec.Type)
	}
	if released := r.table.Release(holder); len(released) > 0 {
		r.wakeWaiting()
	}
	return nil
}

// allocate chooses the Service's address of each of its families and
// assigns them in the table; short says that a family waits for a free
// address (the pool's next free one, or the one it asked for). Every family left without an address gets an Event saying why.
func (r *LoadBalancerReconciler) allocate(ctx context.Context, svc *corev1.Service, pools lbPools) (desired []netip.Addr, short bool) {
	holder := holderOf(svc)
	warn := func(reason, format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		log.FromContext(ctx).Info("LoadBalancer address not given", "service", holder, "reason", reason, "message", msg)
		if r.Recorder != nil {
			r.Recorder.Eventf(svc, nil, corev1.EventTypeWarning, reason, "AllocateLoadBalancerAddress", "%s", msg)
		}
	}

	// What the Service holds: the table's record and its status.
	current := r.table.Held(holder)
	for _, a := range ingressAddrs(svc) {
		if !pools.contain(a) || slices.Contains(current, a) {
			continue
		}
		if other, taken := r.table.Holder(a); taken {
			warn(ReasonLBAddressConflict, "address %s is held by service %s, which claimed it first; this service gets another", a, other)
			continue
		}
		current = append(current, a)
	}

	request, reqErr := lbipam.ParseRequest(svc.Spec.LoadBalancerIP, svc.Annotations[vcoilv2.AnnotationLBIPs])
	if reqErr != nil {
		warn(ReasonLBBadRequest, "requested addresses (spec.loadBalancerIP, annotation %s): %s", vcoilv2.AnnotationLBIPs, reqErr.Reason)
		if len(reqErr.Families) == 0 {
			return nil, false
		}
	}

	poolName, named := svc.Annotations[vcoilv2.AnnotationLBPool]
	if !named || poolName == "" {
		poolName, named = r.DefaultPool, false
	}
	target, havePool := pools.byName[poolName]
	if !havePool {
		if pools.others[poolName] {
			warn(ReasonNotALBPool, "address pool %q is not a LoadBalancer pool (spec.usage)", poolName)
		} else {
			warn(ReasonLBPoolNotFound, "LoadBalancer address pool %q does not exist", poolName)
		}
		// The addresses the Service holds stay (below): a mistyped or
		// deleted pool name must not take a serving address away.
	}

	families := svc.Spec.IPFamilies
	if len(families) == 0 {
		families = []corev1.IPFamily{corev1.IPv4Protocol}
	}
	give := func(a netip.Addr) {
		r.table.Assign(a, holder)
		desired = append(desired, a)
	}
	// keep gives the Service again the address of family f it holds, if
	// any, for when its pool is unknown.
	keep := func(f lbipam.Family) {
		if i := slices.IndexFunc(current, func(a netip.Addr) bool { return lbipam.FamilyOf(a) == f }); i >= 0 {
			give(current[i])
		}
	}
	for _, fam := range families {
		f := lbipam.IPv4
		if fam == corev1.IPv6Protocol {
			f = lbipam.IPv6
		}
		if reqErr != nil && slices.Contains(reqErr.Families, f) {
			continue
		}
		if want, ok := request[f]; ok && named && !havePool {
			keep(f)
			continue
		} else if ok {
			var in *lbPool
			if named {
				in = &target
			} else {
				in = pools.find(want)
			}
			switch other, taken := r.table.Holder(want); {
			case in == nil || !in.addrs.Contains(want):
				where := "any LoadBalancer pool"
				if named {
					where = fmt.Sprintf("LoadBalancer pool %q", poolName)
				}
				warn(ReasonLBAddressNotInPool, "requested address %s is not in %s", want, where)
			case taken && other != holder:
				warn(ReasonLBAddressInUse, "requested address %s is held by service %s", want, other)
				short = true // retried when an address is released
			case !in.obj.DeletionTimestamp.IsZero() && !slices.Contains(current, want):
				warn(ReasonLBPoolDeleting, "address pool %q of requested address %s is being deleted", in.obj.Name, want)
			default:
				give(want)
			}
			continue
		}
		if !havePool {
			keep(f)
			continue
		}
		if !target.addrs.Has(f) {
			warn(ReasonLBFamilyNotInPool, "LoadBalancer pool %q has no %s subnet", poolName, f)
			continue
		}
		if i := slices.IndexFunc(current, func(a netip.Addr) bool {
			return lbipam.FamilyOf(a) == f && target.addrs.Contains(a)
		}); i >= 0 {
			give(current[i]) // what it holds still satisfies the request
			continue
		}
		if !target.obj.DeletionTimestamp.IsZero() {
			warn(ReasonLBPoolDeleting, "LoadBalancer pool %q is being deleted", poolName)
			continue
		}
		a, err := target.addrs.FirstFree(f, r.table.Used(f))
		if err != nil {
			warn(ReasonLBPoolExhausted, "LoadBalancer pool %q has no free %s address", poolName, f)
			short = true
			continue
		}
		give(a)
	}
	slices.SortFunc(desired, netip.Addr.Compare)
	return desired, short
}

// writeIngress sets the Service's status.loadBalancer.ingress: for a served
// Service exactly desired (VIP mode, IPv4 first); for another, its entries
// without remove.
func (r *LoadBalancerReconciler) writeIngress(ctx context.Context, svc *corev1.Service, desired, remove []netip.Addr) error {
	var ingress []corev1.LoadBalancerIngress
	if remove == nil {
		for _, a := range desired {
			ingress = append(ingress, corev1.LoadBalancerIngress{IP: a.String(), IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)})
		}
	} else {
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if a, err := netip.ParseAddr(in.IP); err == nil && slices.Contains(remove, a.Unmap()) {
				continue
			}
			ingress = append(ingress, in)
		}
	}
	if ingressEqual(ingress, svc.Status.LoadBalancer.Ingress) {
		return nil
	}
	patch := client.MergeFromWithOptions(svc.DeepCopy(), client.MergeFromWithOptimisticLock{})
	svc.Status.LoadBalancer.Ingress = ingress
	if err := r.Client.Status().Patch(ctx, svc, patch); err != nil {
		return fmt.Errorf("write LoadBalancer ingress %v of service %s: %w", desired, holderOf(svc), err)
	}
	if remove == nil {
		log.FromContext(ctx).Info("LoadBalancer addresses assigned", "service", holderOf(svc), "addresses", desired)
		if r.Recorder != nil && len(desired) > 0 {
			r.Recorder.Eventf(svc, nil, corev1.EventTypeNormal, ReasonLBAddressesAssigned, "AllocateLoadBalancerAddress", "addresses %v", desired)
		}
	}
	return nil
}

func ingressEqual(a, b []corev1.LoadBalancerIngress) bool {
	return slices.EqualFunc(a, b, func(x, y corev1.LoadBalancerIngress) bool {
		return x.IP == y.IP && x.Hostname == y.Hostname && ptr.Equal(x.IPMode, y.IPMode) && len(x.Ports) == len(y.Ports)
	})
}

// wakeWaiting requeues every Service waiting for a free address, after
// one was released.
func (r *LoadBalancerReconciler) wakeWaiting() {
	for key := range r.waiting {
		svc := &corev1.Service{}
		svc.Namespace, svc.Name = key.Namespace, key.Name
		// The channel's buffer is drained by the controller's source
		// independently of reconciles, so this send never waits on us.
		r.wake <- event.GenericEvent{Object: svc}
	}
}

// SetupWithManager registers the reconciler: every Service, a pool change
// requeues the LoadBalancer Services, and released addresses wake the
// Services waiting for one.
func (r *LoadBalancerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.DefaultPool == "" {
		return fmt.Errorf("the LoadBalancer reconciler needs a default pool name")
	}
	r.waiting = map[types.NamespacedName]bool{}
	r.wake = make(chan event.GenericEvent, 1024)
	return ctrl.NewControllerManagedBy(mgr).
		For(&corev1.Service{}).
		// Only spec changes: a status write (every allocation changes the
		// counts) must not requeue every LoadBalancer Service.
		Watches(&vcoilv2.AddressPool{}, handler.EnqueueRequestsFromMapFunc(r.loadBalancerServices),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Channel(r.wake, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Named("loadbalancer").
		Complete(r)
}

// loadBalancerServices maps a pool change to every Service of type
// LoadBalancer: a new or grown pool may serve those waiting.
func (r *LoadBalancerReconciler) loadBalancerServices(ctx context.Context, o client.Object) []reconcile.Request {
	if p, ok := o.(*vcoilv2.AddressPool); !ok || !p.Spec.IsLoadBalancer() {
		return nil
	}
	var list corev1.ServiceList
	if err := r.Client.List(ctx, &list); err != nil {
		log.FromContext(ctx).Error(err, "list services for a LoadBalancer pool change")
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if list.Items[i].Spec.Type == corev1.ServiceTypeLoadBalancer {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}
