package cache_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	cnp "sigs.k8s.io/network-policy-api/apis/v1beta1"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/policy/cache"
)

// recorder is a watcher that writes down what it is told.
type recorder struct {
	events []string
	err    error
}

func name(o metav1.Object) string {
	if o == nil {
		return "-"
	}
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}

func (r *recorder) Resync(context.Context) error {
	r.events = append(r.events, "resync")
	return r.err
}

func (r *recorder) PodChanged(_ context.Context, before, after cache.PodView) error {
	r.events = append(r.events, fmt.Sprintf("pod %s -> %s", podName(before), podName(after)))
	return r.err
}

// podName names a pod (or "-"), with its labels.
func podName(v cache.PodView) string {
	if l := v.Labels(); len(l) > 0 {
		return v.String() + "{" + labels.Set(l).String() + "}"
	}
	return v.String()
}

func (r *recorder) NamespaceChanged(_ context.Context, before, after *corev1.Namespace) error {
	r.events = append(r.events, fmt.Sprintf("namespace %s -> %s", objName(before), objName(after)))
	return r.err
}

func (r *recorder) PolicyChanged(_ context.Context, before, after *networkingv1.NetworkPolicy) error {
	r.events = append(r.events, fmt.Sprintf("policy %s -> %s", objName(before), objName(after)))
	return r.err
}

func (r *recorder) ClusterPolicyChanged(_ context.Context, before, after *cnp.ClusterNetworkPolicy) error {
	r.events = append(r.events, fmt.Sprintf("cluster policy %s -> %s", objName(before), objName(after)))
	return r.err
}

// objName names a possibly nil typed pointer, with its labels.
func objName[T any, P interface {
	*T
	metav1.Object
}](o P) string {
	if o == nil {
		return "-"
	}
	if l := o.GetLabels(); len(l) > 0 {
		return name(o) + "{" + labels.Set(l).String() + "}"
	}
	return name(o)
}

func newPod(ns, n string, l map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n, Labels: l}}
}

func newNamespace(n string, l map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: l}}
}

func newPolicy(ns, n string) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}}
}

func TestTheCacheNotifiesWatchersOnlyOnceSynced(t *testing.T) {
	ctx := context.Background()
	c := cache.New()
	r := &recorder{}
	c.Watch(r)
	must(t, c.SetNamespace(ctx, newNamespace("a", nil)))
	must(t, c.SetPod(ctx, newPod("a", "p", map[string]string{"app": "x"})))
	if len(r.events) != 0 {
		t.Fatalf("the watcher heard of changes before the cache synced: %v", r.events)
	}
	must(t, c.Synced(ctx))
	must(t, c.SetPod(ctx, newPod("a", "p", map[string]string{"app": "y"})))
	must(t, c.DeletePod(ctx, "a", "p"))
	must(t, c.DeletePod(ctx, "a", "never-there"))
	must(t, c.SetPolicy(ctx, newPolicy("a", "deny")))
	must(t, c.DeletePolicy(ctx, "a", "deny"))
	must(t, c.SetClusterPolicy(ctx, &cnp.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "admin"}}))
	must(t, c.DeleteClusterPolicy(ctx, "admin"))
	must(t, c.DeleteClusterPolicy(ctx, "never-there"))
	must(t, c.DeleteNamespace(ctx, "a"))
	want := []string{
		"resync",
		"pod a/p{app=x} -> a/p{app=y}",
		"pod a/p{app=y} -> -",
		"policy - -> a/deny",
		"policy a/deny -> -",
		"cluster policy - -> admin",
		"cluster policy admin -> -",
		"namespace a -> -",
	}
	if !slices.Equal(r.events, want) {
		t.Fatalf("events:\n%q\nwant\n%q", r.events, want)
	}
}

func TestTheCacheJoinsTheErrorsOfAllWatchers(t *testing.T) {
	ctx := context.Background()
	c := cache.New()
	first, second := &recorder{err: errors.New("first failed")}, &recorder{err: errors.New("second failed")}
	c.Watch(first)
	c.Watch(second)
	err := c.Replace(ctx, nil, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "first failed") || !strings.Contains(err.Error(), "second failed") {
		t.Fatalf("Replace = %v, want both watchers' errors", err)
	}
	if len(second.events) != 1 {
		t.Fatalf("the second watcher was not told after the first failed")
	}
}

func TestTheCacheLooksUpBySelector(t *testing.T) {
	ctx := context.Background()
	c := cache.New()
	must(t, c.Replace(ctx,
		[]*corev1.Pod{
			newPod("a", "web-2", map[string]string{"app": "web"}),
			newPod("a", "web-1", map[string]string{"app": "web"}),
			newPod("a", "db", map[string]string{"app": "db"}),
			newPod("b", "web", map[string]string{"app": "web"}),
		},
		[]*corev1.Namespace{newNamespace("b", map[string]string{"team": "x"}), newNamespace("a", map[string]string{"team": "x"}), newNamespace("c", nil)},
		[]*networkingv1.NetworkPolicy{newPolicy("b", "p"), newPolicy("a", "q"), newPolicy("a", "p")},
	))
	web := labels.SelectorFromSet(labels.Set{"app": "web"})
	names := func(objs []metav1.Object) []string {
		var out []string
		for _, o := range objs {
			out = append(out, name(o))
		}
		return out
	}
	cases := []struct {
		name string
		got  []metav1.Object
		want []string
	}{
		{"pods of a namespace matching a selector, by name", podObjects(c.PodsInNamespace("a", web)), []string{"a/web-1", "a/web-2"}},
		{"no pods of an unknown namespace", podObjects(c.PodsInNamespace("zzz", labels.Everything())), nil},
		{"every pod, by namespace and name", podObjects(c.Pods()), []string{"a/db", "a/web-1", "a/web-2", "b/web"}},
		{"namespaces matching a selector", asObjects(c.Namespaces(labels.SelectorFromSet(labels.Set{"team": "x"}))), []string{"a", "b"}},
		{"every policy, by namespace and name", asObjects(c.Policies()), []string{"a/p", "a/q", "b/p"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := names(tc.got); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	if c.Pod("a", "db").Object() == nil || c.Namespace("c") == nil || c.Policy("a", "q") == nil || !c.Pod("a", "nope").IsZero() {
		t.Fatalf("lookups by name are wrong")
	}
}

// podObjects are the Pods of views (all of Pods here).
func podObjects(in []cache.PodView) []metav1.Object {
	var out []metav1.Object
	for _, v := range in {
		out = append(out, v.Object())
	}
	return out
}

func asObjects[T metav1.Object](in []T) []metav1.Object {
	var out []metav1.Object
	for _, o := range in {
		out = append(out, o)
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// fakeInformers hands out fake informers that keep the handlers added to
// them, as a controller-runtime cache would.
type fakeInformers struct {
	informers map[string]*fakeInformer
	fail      bool
}

func (f *fakeInformers) GetInformer(_ context.Context, obj client.Object, _ ...ctrlcache.InformerGetOption) (ctrlcache.Informer, error) {
	if f.fail {
		return nil, errors.New("no such kind")
	}
	k := fmt.Sprintf("%T", obj)
	if f.informers[k] == nil {
		f.informers[k] = &fakeInformer{}
	}
	return f.informers[k], nil
}

type fakeInformer struct {
	ctrlcache.Informer // the methods the feed does not use
	handlers           []toolscache.ResourceEventHandler
}

func (f *fakeInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	f.handlers = append(f.handlers, h)
	return nil, nil
}

func TestTheFeedTurnsInformerEventsIntoCacheChanges(t *testing.T) {
	ctx := context.Background()
	c := cache.New()
	r := &recorder{}
	c.Watch(r)
	feed := cache.NewFeed(ctx, c, logr.Discard())
	informers := &fakeInformers{informers: make(map[string]*fakeInformer)}
	must(t, feed.Register(ctx, informers, true))
	handler := func(kind string) toolscache.ResourceEventHandler {
		inf := informers.informers[kind]
		if inf == nil || len(inf.handlers) != 1 {
			t.Fatalf("no handler was registered for %s", kind)
		}
		return inf.handlers[0]
	}
	pods, namespaces, policies := handler("*v1.Pod"), handler("*v1.Namespace"), handler("*v1.NetworkPolicy")
	clusters := handler("*v1beta1.ClusterNetworkPolicy")

	// The initial list is stored without notifications, then one resync.
	namespaces.OnAdd(newNamespace("a", nil), true)
	pods.OnAdd(newPod("a", "p", nil), true)
	policies.OnAdd(newPolicy("a", "deny"), true)
	clusters.OnAdd(&cnp.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "admin"}}, true)
	must(t, feed.Synced())
	if got := c.ClusterPolicies(); len(got) != 1 || got[0].Name != "admin" {
		t.Fatalf("cluster policies after the initial list: %v", got)
	}

	pods.OnUpdate(newPod("a", "p", nil), newPod("a", "p", map[string]string{"app": "x"}))
	pods.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "a/p", Obj: newPod("a", "p", nil)})
	policies.OnDelete(newPolicy("a", "deny"))
	clusters.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "admin"})
	namespaces.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "a"})
	pods.OnAdd(newNamespace("wrong", nil), false)                    // a wrong type is ignored
	pods.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "a/b/c"}) // a bad key is ignored

	want := []string{
		"resync",
		"pod a/p -> a/p{app=x}",
		"pod a/p{app=x} -> -",
		"policy a/deny -> -",
		"cluster policy admin -> -",
		"namespace a -> -",
	}
	if !slices.Equal(r.events, want) {
		t.Fatalf("events:\n%q\nwant\n%q", r.events, want)
	}
}

func TestTheFeedSerializesInformersOfDifferentKinds(t *testing.T) {
	ctx := context.Background()
	c := cache.New()
	r := &recorder{}
	c.Watch(r)
	feed := cache.NewFeed(ctx, c, logr.Discard())
	must(t, feed.Synced())
	pods, namespaces := feed.PodHandler(), feed.NamespaceHandler()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			namespaces.OnAdd(newNamespace(fmt.Sprint("ns", i), nil), false)
		}
	}()
	for i := range 200 {
		pods.OnAdd(newPod("a", fmt.Sprint("p", i), nil), false)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the namespace informer did not finish")
	}
	if len(r.events) != 401 || len(c.Pods()) != 200 {
		t.Fatalf("got %d events and %d pods, want 401 and 200", len(r.events), len(c.Pods()))
	}
}

func TestRegisteringFailsWhenAnInformerCannotBeHad(t *testing.T) {
	feed := cache.NewFeed(context.Background(), cache.New(), logr.Discard())
	err := feed.Register(context.Background(), &fakeInformers{fail: true}, false)
	if err == nil || !strings.Contains(err.Error(), "no such kind") {
		t.Fatalf("Register = %v, want the informer's error", err)
	}
}

// The other nodes' pods come as PodEndpoints. A pod of this node wins
// over another node's endpoint of the same name (a StatefulSet's pod that
// moved here), and a deletion of either source removes only the pod it
// stood for.
func TestTheFeedTakesOtherNodesPodsFromTheirEndpoints(t *testing.T) {
	ctx := context.Background()
	c := cache.New()
	r := &recorder{}
	c.Watch(r)
	feed := cache.NewFeed(ctx, c, logr.Discard())
	var published []string
	feed.SetPodChanged(func(k types.NamespacedName) { published = append(published, k.String()) })
	must(t, feed.Synced())
	const here = "node-a"
	pods, peers := feed.PodHandler(), feed.PeerHandler(here)
	endpoint := func(name, node, uid string, l map[string]string) *vcoilv2.PodEndpoint {
		return &vcoilv2.PodEndpoint{
			ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name},
			Spec: vcoilv2.PodEndpointSpec{
				PodUID: types.UID(uid), NodeName: node, PodLabels: l, Addresses: []string{"10.1.0.9"},
				NamedPorts: []vcoilv2.NamedPort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080}},
			},
		}
	}
	local := func(name, uid string) *corev1.Pod {
		p := newPod("a", name, map[string]string{"here": "yes"})
		p.UID, p.Spec.NodeName = types.UID(uid), here
		return p
	}

	web := endpoint("web", "node-b", "u1", map[string]string{"app": "web"})
	peers.OnAdd(web, false)
	got := c.Pod("a", "web")
	if got.Endpoint() != web || got.Object() != nil {
		t.Fatalf("another node's endpoint is not cached as itself (the informer's object): %+v", got)
	}
	if got.UID() != "u1" || got.NodeName() != "node-b" || got.Labels()["app"] != "web" || !slices.Equal(slices.Collect(got.PodIPs()), []string{"10.1.0.9"}) ||
		!slices.Equal(slices.Collect(got.NamedPorts()), web.Spec.NamedPorts) || got.HostNetworkOrTerminated() {
		t.Fatalf("another node's endpoint is read as pod %s %s on %s, labels %v, addresses %q, ports %v",
			got, got.UID(), got.NodeName(), got.Labels(), slices.Collect(got.PodIPs()), slices.Collect(got.NamedPorts()))
	}
	peers.OnAdd(endpoint("self", here, "u9", nil), false) // this node's own: from the pod informer
	if !c.Pod("a", "self").IsZero() {
		t.Fatal("this node's own endpoint was cached")
	}

	// web moves here: the local pod replaces the stale endpoint, whose
	// update and deletion then leave it.
	pods.OnAdd(local("web", "u2"), false)
	peers.OnUpdate(nil, endpoint("web", "node-b", "u1", map[string]string{"app": "stale"}))
	peers.OnDelete(endpoint("web", "node-b", "u1", nil))
	if got := c.Pod("a", "web"); got.Object() == nil || got.UID() != "u2" {
		t.Fatalf("the local pod was lost to a stale endpoint: %+v", got)
	}

	// db leaves here for node-b: the new endpoint replaces the local pod,
	// whose deletion (an older UID) then leaves it.
	pods.OnAdd(local("db", "u3"), false)
	peers.OnDelete(endpoint("db", "node-b", "u4", nil)) // not its pod: ignored
	if c.Pod("a", "db").Object() == nil {
		t.Fatal("another pod's endpoint deletion removed the local pod")
	}
	pods.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "a/db"}) // no object: removed
	peers.OnAdd(endpoint("db", "node-b", "u4", map[string]string{"app": "db"}), false)
	pods.OnDelete(local("db", "u3"))
	if got := c.Pod("a", "db"); got.Endpoint() == nil || got.UID() != "u4" {
		t.Fatalf("an old local pod's deletion removed its successor's endpoint: %+v", got)
	}
	peers.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "a/db", Obj: endpoint("db", "node-b", "u4", nil)})
	if !c.Pod("a", "db").IsZero() {
		t.Fatal("an endpoint's deletion left its pod")
	}

	// api is recreated on node-c while its old endpoint on node-b is
	// still there: the new endpoint replaces the old, whose deletion then
	// leaves it.
	peers.OnAdd(endpoint("api", "node-b", "u5", map[string]string{"v": "1"}), false)
	peers.OnAdd(endpoint("api", "node-c", "u6", map[string]string{"v": "2"}), false)
	peers.OnDelete(endpoint("api", "node-b", "u5", nil))
	pods.OnDelete(local("api", "u5")) // nor does a pod's deletion of another UID
	if got := c.Pod("a", "api"); got.UID() != "u6" || got.NodeName() != "node-c" {
		t.Fatalf("an old endpoint's deletion removed its successor: %s %s on %s", got, got.UID(), got.NodeName())
	}

	want := []string{
		"resync",
		"pod - -> a/web{app=web}",
		"pod a/web{app=web} -> a/web{here=yes}",
		"pod - -> a/db{here=yes}",
		"pod a/db{here=yes} -> -",
		"pod - -> a/db{app=db}",
		"pod a/db{app=db} -> -",
		"pod - -> a/api{v=1}",
		"pod a/api{v=1} -> a/api{v=2}",
	}
	if !slices.Equal(r.events, want) {
		t.Fatalf("events:\n%q\nwant\n%q", r.events, want)
	}
	// The publisher hears of every local pod change that reached the cache.
	if want := []string{"a/web", "a/db", "a/db"}; !slices.Equal(published, want) {
		t.Fatalf("local pod changes told: %q, want %q", published, want)
	}
}
