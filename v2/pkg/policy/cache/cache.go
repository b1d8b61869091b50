// Package cache holds the Kubernetes state that NetworkPolicies depend on:
// the current Pods, Namespaces, NetworkPolicies (networking.k8s.io/v1) and
// ClusterNetworkPolicies (policy.networking.k8s.io/v1beta1) of the cluster. It is the top layer of the policy stack
// (docs/background.md#policy-layers): it stores what it is given, answers
// lookups by label selector, and tells its watchers (the processor) about
// every change, one object at a time, with the object before and after.
//
// Pods come in two kinds: this node's own as Pods, the other nodes' as the
// PodEndpoints their vcoilds publish (package podendpoint). The cache
// stores either object as it was given, shared with the informer, and
// shows both as a PodView: what policies read of a pod.
//
// It does not interpret policies and does no I/O. It is fed either by the
// informer adapter (Feed) or, in tests, by plain values. A Cache is not safe
// for concurrent use; Feed serializes the informers' callbacks.
package cache

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	cnp "sigs.k8s.io/network-policy-api/apis/v1beta1"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
)

// Watcher is notified of changes. before is nil for an object that appeared,
// after is nil for one that disappeared. When a method is called the cache
// already holds the new state, so the watcher can look the rest up.
type Watcher interface {
	// Resync is called when the cache starts (Synced) or its whole content
	// was replaced (Replace): everything may have changed.
	Resync(ctx context.Context) error
	// PodChanged: before or after is the zero PodView for a pod that
	// appeared or disappeared.
	PodChanged(ctx context.Context, before, after PodView) error
	NamespaceChanged(ctx context.Context, before, after *corev1.Namespace) error
	PolicyChanged(ctx context.Context, before, after *networkingv1.NetworkPolicy) error
	ClusterPolicyChanged(ctx context.Context, before, after *cnp.ClusterNetworkPolicy) error
}

// Cache is the store. Objects given to it are never modified and must not be
// modified by the caller afterwards.
type Cache struct {
	pods       map[string]map[string]PodView // namespace -> name -> pod
	namespaces map[string]*corev1.Namespace
	policies   map[string]map[string]*networkingv1.NetworkPolicy
	clusters   map[string]*cnp.ClusterNetworkPolicy
	watchers   []Watcher
	synced     bool
}

// New returns an empty cache that does not notify until Synced or Replace.
func New() *Cache {
	return &Cache{
		pods:       make(map[string]map[string]PodView),
		namespaces: make(map[string]*corev1.Namespace),
		policies:   make(map[string]map[string]*networkingv1.NetworkPolicy),
		clusters:   make(map[string]*cnp.ClusterNetworkPolicy),
	}
}

// Watch adds a watcher. Watchers are notified in the order they were added.
func (c *Cache) Watch(w Watcher) { c.watchers = append(c.watchers, w) }

// Synced marks the initial content complete (the informers have listed
// everything) and resyncs the watchers. Changes before it are only stored,
// so that start-up is one transaction instead of one per object.
func (c *Cache) Synced(ctx context.Context) error {
	c.synced = true
	return c.notify(func(w Watcher) error { return w.Resync(ctx) })
}

// Replace swaps the whole content for the given objects, marks the cache
// synced and resyncs the watchers.
func (c *Cache) Replace(ctx context.Context, pods []*corev1.Pod, namespaces []*corev1.Namespace, policies []*networkingv1.NetworkPolicy) error {
	return c.ReplaceAll(ctx, Contents{Pods: pods, Namespaces: namespaces, Policies: policies})
}

// Contents is everything the cache holds.
type Contents struct {
	Pods []*corev1.Pod
	// Endpoints are the pods of other nodes, as their PodEndpoints; a Pod
	// of the same name wins over one.
	Endpoints       []*vcoilv2.PodEndpoint
	Namespaces      []*corev1.Namespace
	Policies        []*networkingv1.NetworkPolicy
	ClusterPolicies []*cnp.ClusterNetworkPolicy
}

// ReplaceAll is Replace with ClusterNetworkPolicies.
func (c *Cache) ReplaceAll(ctx context.Context, all Contents) error {
	pods, namespaces, policies := all.Pods, all.Namespaces, all.Policies
	c.clusters = make(map[string]*cnp.ClusterNetworkPolicy)
	for _, p := range all.ClusterPolicies {
		c.clusters[p.Name] = p
	}
	c.pods = make(map[string]map[string]PodView)
	c.namespaces = make(map[string]*corev1.Namespace)
	c.policies = make(map[string]map[string]*networkingv1.NetworkPolicy)
	for _, ep := range all.Endpoints {
		c.putPod(ViewEndpoint(ep))
	}
	for _, p := range pods {
		c.putPod(ViewPod(p))
	}
	for _, n := range namespaces {
		c.namespaces[n.Name] = n
	}
	for _, p := range policies {
		put(c.policies, p.Namespace, p.Name, p)
	}
	return c.Synced(ctx)
}

// SetPod stores a pod that was added or updated, in place of whatever pod
// or endpoint of its name the cache held.
func (c *Cache) SetPod(ctx context.Context, pod *corev1.Pod) error {
	return c.setPod(ctx, ViewPod(pod))
}

// SetEndpoint stores the pod that another node's endpoint stands for, in
// place of whatever pod or endpoint of its name the cache held. The cache
// keeps ep itself: it must not be modified (an informer's object is not).
// Which of a pod and an endpoint of the same name wins is the feed's
// choice (PeerHandler).
func (c *Cache) SetEndpoint(ctx context.Context, ep *vcoilv2.PodEndpoint) error {
	return c.setPod(ctx, ViewEndpoint(ep))
}

func (c *Cache) setPod(ctx context.Context, v PodView) error {
	before := c.putPod(v)
	return c.notify(func(w Watcher) error { return w.PodChanged(ctx, before, v) })
}

// DeletePod forgets a pod, or endpoint. Deleting an unknown pod does
// nothing.
func (c *Cache) DeletePod(ctx context.Context, namespace, name string) error {
	before, ok := remove(c.pods, namespace, name)
	if !ok {
		return nil
	}
	return c.notify(func(w Watcher) error { return w.PodChanged(ctx, before, PodView{}) })
}

// putPod stores v and returns what it replaced (zero: nothing).
func (c *Cache) putPod(v PodView) PodView { return put(c.pods, v.Namespace(), v.Name(), v) }

// SetNamespace stores a namespace that was added or updated.
func (c *Cache) SetNamespace(ctx context.Context, ns *corev1.Namespace) error {
	before := c.namespaces[ns.Name]
	c.namespaces[ns.Name] = ns
	return c.notify(func(w Watcher) error { return w.NamespaceChanged(ctx, before, ns) })
}

// DeleteNamespace forgets a namespace. Deleting an unknown one does nothing.
func (c *Cache) DeleteNamespace(ctx context.Context, name string) error {
	before := c.namespaces[name]
	if before == nil {
		return nil
	}
	delete(c.namespaces, name)
	return c.notify(func(w Watcher) error { return w.NamespaceChanged(ctx, before, nil) })
}

// SetPolicy stores a NetworkPolicy that was added or updated.
func (c *Cache) SetPolicy(ctx context.Context, policy *networkingv1.NetworkPolicy) error {
	before := put(c.policies, policy.Namespace, policy.Name, policy)
	return c.notify(func(w Watcher) error { return w.PolicyChanged(ctx, before, policy) })
}

// DeletePolicy forgets a NetworkPolicy. Deleting an unknown one does nothing.
func (c *Cache) DeletePolicy(ctx context.Context, namespace, name string) error {
	before, ok := remove(c.policies, namespace, name)
	if !ok {
		return nil
	}
	return c.notify(func(w Watcher) error { return w.PolicyChanged(ctx, before, nil) })
}

// SetClusterPolicy stores a ClusterNetworkPolicy that was added or
// updated.
func (c *Cache) SetClusterPolicy(ctx context.Context, policy *cnp.ClusterNetworkPolicy) error {
	before := c.clusters[policy.Name]
	c.clusters[policy.Name] = policy
	return c.notify(func(w Watcher) error { return w.ClusterPolicyChanged(ctx, before, policy) })
}

// DeleteClusterPolicy forgets a ClusterNetworkPolicy. Deleting an unknown
// one does nothing.
func (c *Cache) DeleteClusterPolicy(ctx context.Context, name string) error {
	before := c.clusters[name]
	if before == nil {
		return nil
	}
	delete(c.clusters, name)
	return c.notify(func(w Watcher) error { return w.ClusterPolicyChanged(ctx, before, nil) })
}

// ClusterPolicies returns every ClusterNetworkPolicy, sorted by name.
func (c *Cache) ClusterPolicies() []*cnp.ClusterNetworkPolicy {
	out := slices.Collect(maps.Values(c.clusters))
	slices.SortFunc(out, func(a, b *cnp.ClusterNetworkPolicy) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

func (c *Cache) notify(f func(Watcher) error) error {
	if !c.synced {
		return nil
	}
	var errs []error
	for _, w := range c.watchers {
		if err := f(w); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// put stores v under namespace and name and returns what it replaced (the
// zero value: nothing).
func put[V comparable](m map[string]map[string]V, namespace, name string, v V) V {
	inner := m[namespace]
	if inner == nil {
		inner = make(map[string]V)
		m[namespace] = inner
	}
	before := inner[name]
	inner[name] = v
	return before
}

// remove deletes what is stored under namespace and name and returns it;
// false when nothing was.
func remove[V comparable](m map[string]map[string]V, namespace, name string) (V, bool) {
	inner := m[namespace]
	before, ok := inner[name]
	if !ok {
		return before, false
	}
	delete(inner, name)
	if len(inner) == 0 {
		delete(m, namespace)
	}
	return before, true
}

// Pod returns a pod, or the zero view.
func (c *Cache) Pod(namespace, name string) PodView { return c.pods[namespace][name] }

// Namespace returns a namespace, or nil.
func (c *Cache) Namespace(name string) *corev1.Namespace { return c.namespaces[name] }

// Policy returns a NetworkPolicy, or nil.
func (c *Cache) Policy(namespace, name string) *networkingv1.NetworkPolicy {
	return c.policies[namespace][name]
}

// PodsInNamespace returns the pods of a namespace whose labels match sel,
// ordered by name.
func (c *Cache) PodsInNamespace(namespace string, sel labels.Selector) []PodView {
	var out []PodView
	for _, p := range c.pods[namespace] {
		if sel.Matches(labels.Set(p.Labels())) {
			out = append(out, p)
		}
	}
	return sortPods(out)
}

// Pods returns every pod, ordered by namespace and name.
func (c *Cache) Pods() []PodView { return sortPods(flatten(c.pods)) }

// sortPods orders pods by namespace and name (see sortByName).
func sortPods(pods []PodView) []PodView {
	slices.SortFunc(pods, func(a, b PodView) int {
		return cmp.Or(cmp.Compare(a.Namespace(), b.Namespace()), cmp.Compare(a.Name(), b.Name()))
	})
	return pods
}

// Namespaces returns the namespaces whose labels match sel, ordered by name.
func (c *Cache) Namespaces(sel labels.Selector) []*corev1.Namespace {
	var out []*corev1.Namespace
	for _, n := range c.namespaces {
		if sel.Matches(labels.Set(n.Labels)) {
			out = append(out, n)
		}
	}
	return sortByName(out)
}

// PoliciesInNamespace returns the NetworkPolicies of a namespace, ordered by
// name.
func (c *Cache) PoliciesInNamespace(namespace string) []*networkingv1.NetworkPolicy {
	return sortByName(slices.Collect(maps.Values(c.policies[namespace])))
}

// Policies returns every NetworkPolicy, ordered by namespace and name.
func (c *Cache) Policies() []*networkingv1.NetworkPolicy { return sortByName(flatten(c.policies)) }

// flatten lists what every namespace holds, in no order.
func flatten[V any](byNamespace map[string]map[string]V) []V {
	n := 0
	for _, inner := range byNamespace {
		n += len(inner)
	}
	out := make([]V, 0, n)
	for _, inner := range byNamespace {
		for _, v := range inner {
			out = append(out, v)
		}
	}
	return out
}

// sortByName orders objects by namespace and name, so that callers see the
// same order whatever the maps' order: renders are deterministic.
func sortByName[T metav1.Object](objs []T) []T {
	slices.SortFunc(objs, func(a, b T) int {
		return cmp.Or(cmp.Compare(a.GetNamespace(), b.GetNamespace()), cmp.Compare(a.GetName(), b.GetName()))
	})
	return objs
}

// String describes the cache's size, for logs.
func (c *Cache) String() string {
	n := 0
	for _, inner := range c.pods {
		n += len(inner)
	}
	m := 0
	for _, inner := range c.policies {
		m += len(inner)
	}
	return fmt.Sprintf("%d pods, %d namespaces, %d policies", n, len(c.namespaces), m)
}
