package cache

import (
	"context"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	cnp "sigs.k8s.io/network-policy-api/apis/v1beta1"
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
}

// SetPodFilter makes every pod of the pod informer pass through filter
// before the cache stores it; filter returns the pod to store (a copy when
// it changes it: informer objects are shared). vcoild uses it to give a
// new pod the address its CNI ADD allocated before the kubelet reports it
// in the pod's status. Call it before Register.
func (f *Feed) SetPodFilter(filter func(*corev1.Pod) *corev1.Pod) { f.podFilter = filter }

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

// PodHandler handles Pod events.
func (f *Feed) PodHandler() toolscache.ResourceEventHandler {
	return handler[corev1.Pod]{
		f:    f,
		kind: "pod",
		set: func(ctx context.Context, pod *corev1.Pod) error {
			if f.podFilter != nil {
				pod = f.podFilter(pod)
			}
			return f.cache.SetPod(ctx, pod)
		},
		del: f.cache.DeletePod,
	}
}

// NamespaceHandler handles Namespace events.
func (f *Feed) NamespaceHandler() toolscache.ResourceEventHandler {
	return handler[corev1.Namespace]{
		f:    f,
		kind: "namespace",
		set:  f.cache.SetNamespace,
		del: func(ctx context.Context, _, name string) error {
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
		del:  f.cache.DeletePolicy,
	}
}

// ClusterPolicyHandler handles ClusterNetworkPolicy events.
func (f *Feed) ClusterPolicyHandler() toolscache.ResourceEventHandler {
	return handler[cnp.ClusterNetworkPolicy]{
		f:    f,
		kind: "clusternetworkpolicy",
		set:  f.cache.SetClusterPolicy,
		del: func(ctx context.Context, _, name string) error {
			return f.cache.DeleteClusterPolicy(ctx, name)
		},
	}
}

// handler adapts the callbacks of one kind T.
type handler[T any] struct {
	f    *Feed
	kind string
	set  func(context.Context, *T) error
	del  func(ctx context.Context, namespace, name string) error
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
	switch v := obj.(type) {
	case *T:
		o := any(v).(client.Object)
		namespace, name = o.GetNamespace(), o.GetName()
	case toolscache.DeletedFinalStateUnknown:
		ns, n, err := toolscache.SplitMetaNamespaceKey(v.Key)
		if err != nil {
			h.f.log.Error(err, "ignoring a tombstone with a bad key", "kind", h.kind, "key", v.Key)
			return
		}
		namespace, name = ns, n
	default:
		h.f.log.Info("ignoring a deleted object of an unexpected type", "kind", h.kind, "type", fmt.Sprintf("%T", obj))
		return
	}
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	if err := h.del(h.f.ctx, namespace, name); err != nil {
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
