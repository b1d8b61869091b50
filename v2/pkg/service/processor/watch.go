package processor

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

// RBAC of vcoild for the processor.
// +kubebuilder:rbac:groups="",resources=services;nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// CacheOptions are the cache settings the processor needs in vcoild's
// manager (merged into its cache.Options.ByObject): this node's Node only,
// and transforms that keep only what Build and NodeModel read, since every
// vcoild caches every Service and EndpointSlice of the cluster. The Node
// field selector is only for a vcoild that caches no other Node: direct
// routing lists every Node through the same cache, and then the selector
// must go (the processor ignores other Nodes; TrimNode keeps the addresses
// direct routing reads).
func CacheOptions(nodeName string) map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&corev1.Service{}:            {Transform: TrimService},
		&discoveryv1.EndpointSlice{}: {Transform: TrimEndpointSlice},
		&corev1.Node{}: {
			Field:     fields.OneTermEqualSelector("metadata.name", nodeName),
			Transform: TrimNode,
		},
	}
}

// trimMeta keeps what identifies an object (and what an Event on it needs)
// and the given annotations; managedFields and the last-applied
// configuration are often most of an object's size.
func trimMeta(m *metav1.ObjectMeta, keepAnnotations ...string) {
	m.ManagedFields = nil
	m.OwnerReferences = nil
	m.Finalizers = nil
	m.GenerateName = ""
	var kept map[string]string
	for _, a := range keepAnnotations {
		if v, ok := m.Annotations[a]; ok {
			if kept == nil {
				kept = map[string]string{}
			}
			kept[a] = v
		}
	}
	m.Annotations = kept
}

// TrimService is the cache transform of Services: Build reads the spec and
// the load balancer status, and one annotation.
func TrimService(obj any) (any, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return obj, nil // a tombstone
	}
	trimMeta(&svc.ObjectMeta, AnnotationLoadBalancerSourceRanges)
	svc.Spec.Selector = nil
	svc.Status.Conditions = nil
	return svc, nil
}

// TrimEndpointSlice is the cache transform of EndpointSlices: of an
// endpoint, Build reads its first address, conditions, node, zone and hints.
func TrimEndpointSlice(obj any) (any, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	trimMeta(&s.ObjectMeta)
	// The decoder appends endpoints one by one, leaving the slice's
	// capacity up to twice its length (ten endpoints in room for sixteen):
	// an exact copy lets the rest go, 5 MB at ten thousand slices.
	if cap(s.Endpoints) > len(s.Endpoints) {
		s.Endpoints = append(make([]discoveryv1.Endpoint, 0, len(s.Endpoints)), s.Endpoints...)
	}
	for i := range s.Endpoints {
		e := &s.Endpoints[i]
		e.TargetRef = nil
		e.Hostname = nil
		e.DeprecatedTopology = nil
		if len(e.Addresses) > 1 {
			e.Addresses = e.Addresses[:1]
		}
	}
	return s, nil
}

// TrimNode is the cache transform of this node's Node: its name, labels
// (zone), the NAT loopback annotation and its addresses.
func TrimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	trimMeta(&n.ObjectMeta, vcoilv2.AnnotationNATLoopback)
	// Taints stay: the proxy health server reads the autoscaler's.
	n.Spec = corev1.NodeSpec{Taints: n.Spec.Taints}
	n.Status = corev1.NodeStatus{Addresses: n.Status.Addresses}
	return n, nil
}

// Setup creates a Processor fed by the manager's cache and adds its loop to
// the manager. The loop starts once the informers of Services,
// EndpointSlices and Nodes have synced, so that the first Resync holds every
// Service. The manager's cache should be built with CacheOptions.
func Setup(mgr manager.Manager, opts Options) (*Processor, error) {
	if opts.Recorder == nil {
		opts.Recorder = mgr.GetEventRecorder("vcoild")
	}
	if opts.Log.GetSink() == nil {
		opts.Log = mgr.GetLogger().WithName("service-processor")
	}
	p, err := New(opts)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	var synced []toolscache.InformerSynced
	add := func(obj client.Object, h toolscache.ResourceEventHandler) error {
		inf, err := mgr.GetCache().GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("informer of %T: %w", obj, err)
		}
		reg, err := inf.AddEventHandler(h)
		if err != nil {
			return fmt.Errorf("event handler of %T: %w", obj, err)
		}
		synced = append(synced, reg.HasSynced)
		return nil
	}
	err = add(&corev1.Service{}, handler(func(s *corev1.Service) { p.SetService(s) }, func(s *corev1.Service) { p.DeleteService(s.Namespace, s.Name) }))
	if err == nil {
		err = add(&discoveryv1.EndpointSlice{}, handler(p.SetEndpointSlice, func(s *discoveryv1.EndpointSlice) { p.DeleteEndpointSlice(s.Namespace, s.Name) }))
	}
	if err == nil {
		err = add(&corev1.Node{}, handler(p.SetNode, func(n *corev1.Node) { p.DeleteNode(n.Name) }))
	}
	if err != nil {
		return nil, fmt.Errorf("service processor: %w", err)
	}
	run := func(ctx context.Context) error {
		// Polled every 10 ms, not client-go's 100 ms (WaitForCacheSync):
		// the first sync of a restarted vcoild is timed from its start.
		err := wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
			for _, ok := range synced {
				if !ok() {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			return nil // the manager is stopping
		}
		p.log.Info("Service caches synced; syncing the renderers")
		return p.Run(ctx)
	}
	if err := mgr.Add(manager.RunnableFunc(run)); err != nil {
		return nil, fmt.Errorf("service processor: %w", err)
	}
	return p, nil
}

// handler feeds one kind of object to the processor. Deletions may come as
// tombstones, whose last known object is enough to name what went.
func handler[T client.Object](set, del func(T)) toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := obj.(T); ok {
				set(o)
			}
		},
		UpdateFunc: func(_, obj any) {
			if o, ok := obj.(T); ok {
				set(o)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if o, ok := obj.(T); ok {
				del(o)
			}
		},
	}
}
