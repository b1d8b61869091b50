package cache

import (
	"context"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	cnp "sigs.k8s.io/network-policy-api/apis/v1beta1"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

// Informers is the part of a controller-runtime cache that Feed needs;
// sigs.k8s.io/controller-runtime/pkg/cache.Cache provides it.
type Informers interface {
	GetInformer(ctx context.Context, obj client.Object, opts ...ctrlcache.InformerGetOption) (ctrlcache.Informer, error)
}

// Feed is the thin adapter from informers to a Cache: it turns informer
// callbacks into cache changes. Informers of different kinds call from
// different goroutines, so Feed serializes them; everything below it runs on
// one goroutine at a time. Errors of the layers below are logged, since an
// informer callback cannot return them; the next resync repairs what failed.
type Feed struct {
	mu    sync.Mutex
	ctx   context.Context
	cache *Cache
	log   logr.Logger
	// podFilter, when set, sees every pod of the informer before the
	// cache stores it (SetPodFilter).
	podFilter func(*corev1.Pod) *corev1.Pod
	// podChanged, when set, is told of every pod the pod informer set or
	// deleted, after the cache (SetPodChanged).
	podChanged func(types.NamespacedName)
}

// SetPodFilter makes every pod of the pod informer pass through filter
// before the cache stores it; filter returns the pod to store (a copy when
// it changes it: informer objects are shared). vcoild uses it to give a
// new pod the address its CNI ADD allocated before the kubelet reports it
// in the pod's status. Call it before Register.
func (f *Feed) SetPodFilter(filter func(*corev1.Pod) *corev1.Pod) { f.podFilter = filter }

// SetPodChanged makes the feed call fn, with its lock held, after each
// change of the pod informer reached the cache: vcoild publishes its
// node's pods from what the cache holds. Call it before Register.
func (f *Feed) SetPodChanged(fn func(types.NamespacedName)) { f.podChanged = fn }

// Locked runs fn with the feed's lock held, serialized with the informers'
// changes: for changes that come from elsewhere (a CNI ADD or DEL).
func (f *Feed) Locked(fn func(c *Cache) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fn(f.cache)
}

// NewFeed returns a feed into c. ctx is passed to the cache's watchers for
// every change (informer callbacks carry none).
func NewFeed(ctx context.Context, c *Cache, log logr.Logger) *Feed {
	return &Feed{ctx: ctx, cache: c, log: log}
}

// Register adds the feed's handlers to the informers of Pods, Namespaces,
// NetworkPolicies and, when clusterPolicies is set, ClusterNetworkPolicies.
// Call Synced once the informers have synced.
func (f *Feed) Register(ctx context.Context, informers Informers, clusterPolicies bool) error {
	type kind struct {
		obj     client.Object
		handler toolscache.ResourceEventHandler
	}
	kinds := []kind{
		{&corev1.Namespace{}, f.NamespaceHandler()},
		{&corev1.Pod{}, f.PodHandler()},
		{&networkingv1.NetworkPolicy{}, f.PolicyHandler()},
	}
	if clusterPolicies {
		kinds = append(kinds, kind{&cnp.ClusterNetworkPolicy{}, f.ClusterPolicyHandler()})
	}
	for _, h := range kinds {
		inf, err := informers.GetInformer(ctx, h.obj)
		if err != nil {
			return fmt.Errorf("get informer for %T: %w", h.obj, err)
		}
		if _, err := inf.AddEventHandler(h.handler); err != nil {
			return fmt.Errorf("add event handler to informer for %T: %w", h.obj, err)
		}
	}
	return nil
}

// Synced tells the cache its initial content is complete.
func (f *Feed) Synced() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cache.Synced(f.ctx)
}

// PodHandler handles Pod events. A deletion removes the cached pod only
// when it is the deleted one (same UID): another source (PeerHandler) may
// have stored a newer pod of the same name.
func (f *Feed) PodHandler() toolscache.ResourceEventHandler {
	changed := func(namespace, name string) {
		if f.podChanged != nil {
			f.podChanged(types.NamespacedName{Namespace: namespace, Name: name})
		}
	}
	return handler[corev1.Pod]{
		f:    f,
		kind: "pod",
		set: func(ctx context.Context, pod *corev1.Pod) error {
			if f.podFilter != nil {
				pod = f.podFilter(pod)
			}
			err := f.cache.SetPod(ctx, pod)
			changed(pod.Namespace, pod.Name)
			return err
		},
		del: func(ctx context.Context, namespace, name string, gone *corev1.Pod) error {
			if cur := f.cache.Pod(namespace, name); !cur.IsZero() && gone != nil && cur.UID() != gone.UID {
				return nil
			}
			err := f.cache.DeletePod(ctx, namespace, name)
			changed(namespace, name)
			return err
		},
	}
}

// PeerHandler handles PodEndpoint events: the pods of the nodes other
// than node, which the cache stores as the informer's endpoints
// themselves (SetEndpoint), not copied. Endpoints of node itself are
// skipped: its own pods come from the pod informer, and a pod of node
// wins over another node's endpoint of the same name, which is stale (a
// StatefulSet's pod that moved here). A deletion removes only the pod it
// stood for (same pod UID).
func (f *Feed) PeerHandler(node string) toolscache.ResourceEventHandler {
	local := func(namespace, name string) bool {
		// Never an endpoint: those of node are not stored.
		cur := f.cache.Pod(namespace, name)
		return !cur.IsZero() && cur.NodeName() == node
	}
	return handler[vcoilv2.PodEndpoint]{
		f:    f,
		kind: "podendpoint",
		set: func(ctx context.Context, ep *vcoilv2.PodEndpoint) error {
			if ep.Spec.NodeName == node || local(ep.Namespace, ep.Name) {
				return nil
			}
			return f.cache.SetEndpoint(ctx, ep)
		},
		del: func(ctx context.Context, namespace, name string, gone *vcoilv2.PodEndpoint) error {
			if local(namespace, name) {
				return nil
			}
			if cur := f.cache.Pod(namespace, name); !cur.IsZero() && gone != nil && cur.UID() != gone.Spec.PodUID {
				return nil
			}
			return f.cache.DeletePod(ctx, namespace, name)
		},
	}
}

// NamespaceHandler handles Namespace events.
func (f *Feed) NamespaceHandler() toolscache.ResourceEventHandler {
	return handler[corev1.Namespace]{
		f:    f,
		kind: "namespace",
		set:  f.cache.SetNamespace,
		del: func(ctx context.Context, _, name string, _ *corev1.Namespace) error {
			return f.cache.DeleteNamespace(ctx, name)
		},
	}
}

// PolicyHandler handles NetworkPolicy events.
func (f *Feed) PolicyHandler() toolscache.ResourceEventHandler {
	return handler[networkingv1.NetworkPolicy]{
		f:    f,
		kind: "networkpolicy",
		set:  f.cache.SetPolicy,
		del: func(ctx context.Context, namespace, name string, _ *networkingv1.NetworkPolicy) error {
			return f.cache.DeletePolicy(ctx, namespace, name)
		},
	}
}

// ClusterPolicyHandler handles ClusterNetworkPolicy events.
func (f *Feed) ClusterPolicyHandler() toolscache.ResourceEventHandler {
	return handler[cnp.ClusterNetworkPolicy]{
		f:    f,
		kind: "clusternetworkpolicy",
		set:  f.cache.SetClusterPolicy,
		del: func(ctx context.Context, _, name string, _ *cnp.ClusterNetworkPolicy) error {
			return f.cache.DeleteClusterPolicy(ctx, name)
		},
	}
}

// handler adapts the callbacks of one kind T.
type handler[T any] struct {
	f    *Feed
	kind string
	set  func(context.Context, *T) error
	// del is given the deleted object, or nil when a tombstone has none.
	del func(ctx context.Context, namespace, name string, gone *T) error
}

func (h handler[T]) OnAdd(obj interface{}, _ bool) { h.onSet(obj) }

func (h handler[T]) OnUpdate(_, obj interface{}) { h.onSet(obj) }

func (h handler[T]) onSet(obj interface{}) {
	v, ok := obj.(*T)
	if !ok {
		h.f.log.Info("ignoring an object of an unexpected type", "kind", h.kind, "type", fmt.Sprintf("%T", obj))
		return
	}
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	if err := h.set(h.f.ctx, v); err != nil {
		h.f.log.Error(err, "applying a change failed", "kind", h.kind, "object", key(any(v)))
	}
}

// OnDelete accepts the object or, when the informer missed the deletion, its
// tombstone.
func (h handler[T]) OnDelete(obj interface{}) {
	var namespace, name string
	var gone *T
	switch v := obj.(type) {
	case *T:
		o := any(v).(client.Object)
		namespace, name, gone = o.GetNamespace(), o.GetName(), v
	case toolscache.DeletedFinalStateUnknown:
		ns, n, err := toolscache.SplitMetaNamespaceKey(v.Key)
		if err != nil {
			h.f.log.Error(err, "ignoring a tombstone with a bad key", "kind", h.kind, "key", v.Key)
			return
		}
		namespace, name = ns, n
		gone, _ = v.Obj.(*T)
	default:
		h.f.log.Info("ignoring a deleted object of an unexpected type", "kind", h.kind, "type", fmt.Sprintf("%T", obj))
		return
	}
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	if err := h.del(h.f.ctx, namespace, name, gone); err != nil {
		h.f.log.Error(err, "applying a deletion failed", "kind", h.kind, "object", namespace+"/"+name)
	}
}

func key(v any) string {
	if o, ok := v.(client.Object); ok {
		if o.GetNamespace() == "" {
			return o.GetName()
		}
		return o.GetNamespace() + "/" + o.GetName()
	}
	return ""
}
