// Package agent runs vcoil's NetworkPolicy stack in vcoild: informers (the
// manager's cache: the node's own Pods, the other nodes' pods as
// PodEndpoints, Namespaces, NetworkPolicies and the node's own Node) feed
// the policy cache, whose processor and configurator hand each change to
// the dataplane's renderer as one transaction (docs/policy.md). It
// publishes the node's own pods as PodEndpoints for the other nodes
// (package podendpoint).
//
// It also closes the window between a pod's creation and its first
// packet: the kubelet reports a pod's addresses in its status only after
// the CNI ADD returned, so vcoild gives the policy cache the addresses it
// allocated (PodAdded) and the pod's rules are in the dataplane before ADD
// returns. At DEL the pod's addresses leave the cache (PodReleased), before
// they can be given to another pod.
package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	cnp "sigs.k8s.io/network-policy-api/apis/v1beta1"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/podendpoint"
	pcache "github.com/vcoil/vcoil/v2/pkg/policy/cache"
	"github.com/vcoil/vcoil/v2/pkg/policy/configurator"
	"github.com/vcoil/vcoil/v2/pkg/policy/processor"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// vcoild reads what NetworkPolicies select (role "daemon"): its node's
// Pods, the others' PodEndpoints.
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=vcoil.io,resources=podendpoints,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=policy.networking.k8s.io,resources=clusternetworkpolicies,verbs=get;list;watch

// publishWorkers write PodEndpoints concurrently: a node's pods come and
// go a few at a time, but a restarted vcoild may find many to write.
const publishWorkers = 4

// Options configure the agent of one node.
type Options struct {
	NodeName string
	// Renderer enforces the rules (the nftables renderer, or VPP's ACLs);
	// RendererName names it in errors.
	Renderer     renderer.Renderer
	RendererName string
	// Reader reads a pod that the informer has not delivered yet, at its
	// CNI ADD (the manager's API reader: not cached).
	Reader client.Reader
	// Endpoints reads and writes the PodEndpoints of this node's pods
	// (the manager's client: reads from its cache); nil: the manager's.
	Endpoints client.Client
	// Known, when set, lists the local pods this node's vcoild gave
	// addresses to (its checkpoint), read once before the first sync: a
	// restarted vcoild must not drop the rules of pods whose status does
	// not list their addresses yet.
	Known func() (map[types.NamespacedName][]netip.Addr, error)
	// Recorder records the Warning Events on the Node (a renderer's
	// failure) and on NetworkPolicies (parts left out); nil: the
	// manager's (events.go).
	Recorder events.EventRecorder
	// RetryMin and RetryMax bound the backoff of the resyncs that repair
	// a failed render (DefaultRetryMin, DefaultRetryMax when zero).
	RetryMin, RetryMax time.Duration
	// AfterResync, when set, runs after each full sync that succeeded
	// (the first, and every Resync): on VPP, the pods the dataplane holds
	// down after a restart may forward once their ACLs are back. Its
	// failure fails the sync, which is then retried.
	AfterResync func(context.Context) error
	Log         logr.Logger
}

// Agent is the policy stack of one node.
type Agent struct {
	nodeName string
	reader   client.Reader
	log      logr.Logger
	feed     *pcache.Feed
	conf     *configurator.Configurator
	rendered *rendered
	proc     *processor.Processor
	synced   chan struct{}
	repair   *repair
	after    func(context.Context) error
	publish  *podendpoint.Publisher

	// The fields below are guarded by the feed's lock (Feed.Locked): the
	// informers' callbacks and PodAdded/PodReleased run under it.
	overlay   map[types.NamespacedName]podOverlay
	node      configurator.Config
	hasSynced bool
}

// podOverlay is what vcoild's own CNI calls say about a local pod, ahead
// of its status: the addresses it was given, or that it gave them back.
type podOverlay struct {
	ips      []netip.Addr
	released bool
}

// Setup adds the agent to mgr: its informers' handlers now, the initial
// sync once the manager's cache has synced.
func Setup(ctx context.Context, mgr manager.Manager, opts Options) (*Agent, error) {
	if opts.Renderer == nil {
		return nil, errors.New("policy agent: no renderer")
	}
	if err := setupEvents(ctx, mgr, &opts); err != nil {
		return nil, err
	}
	conf, err := configurator.New(configurator.Config{})
	if err != nil {
		return nil, err
	}
	// rendered keeps what the renderer applied, for the node's state.
	rd := newRendered(opts.RendererName, opts.Renderer)
	conf.Register(opts.RendererName, rd)
	c := pcache.New()
	if opts.Endpoints == nil {
		opts.Endpoints = mgr.GetClient()
	}
	a := &Agent{
		nodeName: opts.NodeName, reader: opts.Reader, log: opts.Log,
		conf: conf, rendered: rd, synced: make(chan struct{}),
		overlay: map[types.NamespacedName]podOverlay{},
		repair:  newRepair(opts.RetryMin, opts.RetryMax), after: opts.AfterResync,
	}
	rd.onFailure = a.repair.failed
	if opts.Known != nil {
		// Before the informers start: their first pods pass the filter.
		known, err := opts.Known()
		if err != nil {
			return nil, fmt.Errorf("policy agent: the pods of this node: %w", err)
		}
		for key, ips := range known {
			a.overlay[key] = podOverlay{ips: ips}
		}
	}
	a.proc = processor.New(opts.NodeName, c, conf, opts.Log.WithName("processor"))
	c.Watch(a.proc)
	a.feed = pcache.NewFeed(ctx, c, opts.Log)
	a.feed.SetPodFilter(a.filterPod)
	a.publish = podendpoint.NewPublisher(opts.NodeName, a.localPod, opts.Endpoints, opts.Endpoints, opts.Log.WithName("podendpoints"))
	a.feed.SetPodChanged(a.publish.Enqueue)
	informers := mgr.GetCache()
	// ClusterNetworkPolicies are watched when their API is served: vcoil's
	// manifests install its CRD; a cluster without it gets a log line
	// (vcoild watches them after a restart once it is installed).
	clusterPolicies := true
	if _, err := mgr.GetRESTMapper().RESTMapping(cnp.SchemeGroupVersion.WithKind("ClusterNetworkPolicy").GroupKind(), cnp.SchemeGroupVersion.Version); err != nil {
		clusterPolicies = false
		opts.Log.Info("ClusterNetworkPolicies are not enforced: their API is not served (install the CRD of sigs.k8s.io/network-policy-api and restart vcoild)",
			"api", cnp.SchemeGroupVersion.String(), "reason", err.Error())
	}
	if err := a.feed.Register(ctx, informers, clusterPolicies); err != nil {
		return nil, fmt.Errorf("policy agent: %w", err)
	}
	// The other nodes' pods, as their vcoilds publish them.
	epInf, err := informers.GetInformer(ctx, &vcoilv2.PodEndpoint{})
	if err != nil {
		return nil, fmt.Errorf("policy agent: PodEndpoint informer: %w", err)
	}
	if _, err := epInf.AddEventHandler(a.feed.PeerHandler(opts.NodeName)); err != nil {
		return nil, fmt.Errorf("policy agent: PodEndpoint informer: %w", err)
	}
	podInf, err := informers.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return nil, fmt.Errorf("policy agent: pod informer: %w", err)
	}
	if _, err := podInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{DeleteFunc: a.forgetPod}); err != nil {
		return nil, fmt.Errorf("policy agent: pod informer: %w", err)
	}
	nodeInf, err := informers.GetInformer(ctx, &corev1.Node{})
	if err != nil {
		return nil, fmt.Errorf("policy agent: node informer: %w", err)
	}
	if _, err := nodeInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { a.nodeChanged(ctx, obj) },
		UpdateFunc: func(_, obj any) { a.nodeChanged(ctx, obj) },
	}); err != nil {
		return nil, fmt.Errorf("policy agent: node informer: %w", err)
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if !informers.WaitForCacheSync(ctx) {
			return ctx.Err()
		}
		err := a.feed.Locked(func(c *pcache.Cache) error {
			a.hasSynced = true
			return nil
		})
		if err != nil {
			return err
		}
		err = a.feed.Synced()
		if err == nil {
			err = a.afterResync(ctx)
		}
		if err != nil {
			// The repair resyncs; the pods' ADDs fail until the renderer
			// works.
			a.log.Error(err, "the first policy sync failed; retrying")
			a.repair.failed(err)
		}
		close(a.synced)
		// The cache knows every pod of this node now: the publisher may
		// delete the endpoints whose pod is gone.
		if err := a.publish.EnqueueOwn(ctx); err != nil {
			a.log.Error(err, "cannot list this node's PodEndpoints; those of pods gone while vcoild was down stay until their pods' garbage collection")
		}
		go a.publish.Run(ctx, publishWorkers)
		a.repair.run(ctx, a.Resync, func(err error, retryIn time.Duration) {
			if err != nil {
				a.log.Error(err, "the resync repairing a failed policy render failed", "retryIn", retryIn.String())
				return
			}
			a.log.Info("the network policies are in the dataplane again")
		})
		return nil
	})); err != nil {
		return nil, err
	}
	return a, nil
}

// PodAdded gives the policy cache the addresses that CNI ADD allocated to a
// local pod and returns once the pod's rules are in the dataplane. An error
// means they are not: the ADD must fail (the kubelet retries it).
func (a *Agent) PodAdded(ctx context.Context, namespace, name string, ips []netip.Addr) error {
	select {
	case <-a.synced:
	case <-ctx.Done():
		return fmt.Errorf("apply the network policies of pod %s/%s: the policy cache has not synced yet: %w", namespace, name, ctx.Err())
	}
	key := types.NamespacedName{Namespace: namespace, Name: name}
	return a.feed.Locked(func(c *pcache.Cache) error {
		a.overlay[key] = podOverlay{ips: slices.Clone(ips)}
		pod := c.Pod(namespace, name).Object()
		if pod == nil {
			// The informer has not delivered the pod yet (the cache may
			// hold another node's stale endpoint of its name: the pod
			// wins over it).
			p := &corev1.Pod{}
			if err := a.reader.Get(ctx, key, p); err != nil {
				return fmt.Errorf("apply the network policies of pod %s: read the pod: %w", key, err)
			}
			pod = p
		}
		err := c.SetPod(ctx, a.filterPod(pod))
		a.publish.Enqueue(key)
		if err != nil {
			return fmt.Errorf("apply the network policies of pod %s: %w", key, err)
		}
		return nil
	})
}

// PodReleased takes a local pod's addresses out of the policy cache when
// CNI DEL gave them back, before they can be given to another pod.
func (a *Agent) PodReleased(ctx context.Context, namespace, name string) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	err := a.feed.Locked(func(c *pcache.Cache) error {
		a.overlay[key] = podOverlay{released: true}
		cur := c.Pod(namespace, name)
		if cur.IsZero() || !a.hasSynced {
			return nil
		}
		var err error
		if pod := cur.Object(); pod != nil { // not another node's endpoint
			err = c.SetPod(ctx, a.filterPod(pod))
		}
		a.publish.Enqueue(key)
		return err
	})
	if err != nil {
		a.log.Error(err, "cannot remove the network policies of a released pod; the next resync will", "pod", key)
	}
}

// filterPod gives a local pod the addresses of its CNI calls. The caller
// holds the feed's lock.
func (a *Agent) filterPod(pod *corev1.Pod) *corev1.Pod {
	o, ok := a.overlay[types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}]
	if !ok || pod.Spec.NodeName != a.nodeName {
		return pod
	}
	want := make([]corev1.PodIP, 0, len(o.ips))
	for _, ip := range o.ips {
		want = append(want, corev1.PodIP{IP: ip.String()})
	}
	if slices.Equal(pod.Status.PodIPs, want) {
		return pod
	}
	pod = pod.DeepCopy()
	pod.Status.PodIPs, pod.Status.PodIP = want, ""
	if len(want) > 0 {
		pod.Status.PodIP = want[0].IP
	}
	return pod
}

// localPod is a pod of this node as the policy cache holds it (with the
// addresses of its CNI calls), or nil: what the publisher publishes.
func (a *Agent) localPod(key types.NamespacedName) *corev1.Pod {
	var pod *corev1.Pod
	_ = a.feed.Locked(func(c *pcache.Cache) error {
		if p := c.Pod(key.Namespace, key.Name).Object(); p != nil && p.Spec.NodeName == a.nodeName {
			pod = p
		}
		return nil
	})
	return pod
}

func (a *Agent) forgetPod(obj any) {
	var key types.NamespacedName
	switch v := obj.(type) {
	case *corev1.Pod:
		key = types.NamespacedName{Namespace: v.Namespace, Name: v.Name}
	case toolscache.DeletedFinalStateUnknown:
		ns, n, err := toolscache.SplitMetaNamespaceKey(v.Key)
		if err != nil {
			return
		}
		key = types.NamespacedName{Namespace: ns, Name: n}
	default:
		return
	}
	_ = a.feed.Locked(func(*pcache.Cache) error {
		delete(a.overlay, key)
		return nil
	})
}

// Resync configures every local pod again, as one transaction: for a
// dataplane that lost its state (a VPP restart), and to repair a failed
// render. Before the first sync it does nothing (that sync will). A
// failure is repaired by a later resync (repair), whoever called this one.
func (a *Agent) Resync(ctx context.Context) error {
	synced := false
	err := a.feed.Locked(func(*pcache.Cache) error {
		if !a.hasSynced {
			return nil
		}
		synced = true
		return a.proc.Resync(ctx)
	})
	if err == nil && synced {
		err = a.afterResync(ctx)
	}
	switch {
	case err != nil:
		a.repair.failed(err)
	case synced:
		a.repair.repaired()
	}
	return err
}

// afterResync runs Options.AfterResync.
func (a *Agent) afterResync(ctx context.Context) error {
	if a.after == nil {
		return nil
	}
	if err := a.after(ctx); err != nil {
		return fmt.Errorf("after the policy resync: %w", err)
	}
	return nil
}

// nodeChanged follows the node's NAT loopback and addresses, which the
// configurator always permits, and resyncs the pods when they change.
func (a *Agent) nodeChanged(ctx context.Context, obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok || node.Name != a.nodeName {
		return
	}
	cfg := configurator.Config{}
	for _, s := range strings.Split(node.Annotations[vcoilv2.AnnotationNATLoopback], ",") {
		if addr, err := netip.ParseAddr(strings.TrimSpace(s)); err == nil {
			cfg.NATLoopback = append(cfg.NATLoopback, addr.Unmap())
		}
	}
	for _, na := range node.Status.Addresses {
		if na.Type != corev1.NodeInternalIP {
			continue
		}
		if addr, err := netip.ParseAddr(na.Address); err == nil && !slices.Contains(cfg.NodeAddresses, addr.Unmap()) {
			cfg.NodeAddresses = append(cfg.NodeAddresses, addr.Unmap())
		}
	}
	err := a.feed.Locked(func(*pcache.Cache) error {
		if slices.Equal(cfg.NATLoopback, a.node.NATLoopback) && slices.Equal(cfg.NodeAddresses, a.node.NodeAddresses) {
			return nil
		}
		if err := a.conf.SetConfig(cfg); err != nil {
			return fmt.Errorf("node %s: %w", node.Name, err)
		}
		a.node = cfg
		a.log.Info("the node's always permitted addresses changed", "natLoopback", cfg.NATLoopback, "nodeAddresses", cfg.NodeAddresses)
		if !a.hasSynced {
			return nil // the first sync uses them
		}
		return a.proc.Resync(ctx)
	})
	if err != nil {
		a.log.Error(err, "cannot apply the node's addresses to the network policies")
	}
}

// CacheOptions are the cache settings the agent needs, to merge into the
// manager's: the Pods of node only, trimmed to what policies read. Every
// pod of the cluster is a possible peer, but the other nodes' pods come as
// PodEndpoints, which change less and weigh less than Pods, trimmed too
// (podendpoint.Trim). The agent reads its own Node from whatever the manager
// caches of Nodes (all of them for direct routing, only this one for the
// service proxy): it sets nothing for them, since a cache has one setting
// per type and a narrower one would hide the other nodes from direct
// routing.
func CacheOptions(node string) map[client.Object]ctrlcache.ByObject {
	return map[client.Object]ctrlcache.ByObject{
		&corev1.Pod{}:          {Field: fields.OneTermEqualSelector("spec.nodeName", node), Transform: TrimPod},
		&vcoilv2.PodEndpoint{}: {Transform: podendpoint.Trim(node)},
	}
}

// TrimPod is the cache transform of Pods: it keeps what the policy
// processor reads (labels, node, host network, named ports, phase,
// addresses), the annotations naming Egresses (vcoild's egress side
// shares this cache), the pod's allowed source prefixes (which the
// renderers let the pod send from) and its checksum choice (a CNI ADD
// reads those two from this cache), a small part of a pod's size.
func TrimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone
	}
	t := &corev1.Pod{
		TypeMeta: pod.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID,
			ResourceVersion: pod.ResourceVersion, Labels: pod.Labels,
			DeletionTimestamp: pod.DeletionTimestamp,
			Annotations:       keptAnnotations(pod.Annotations),
		},
		Spec: corev1.PodSpec{NodeName: pod.Spec.NodeName, HostNetwork: pod.Spec.HostNetwork},
		Status: corev1.PodStatus{
			Phase: pod.Status.Phase, PodIP: pod.Status.PodIP, PodIPs: pod.Status.PodIPs,
		},
	}
	for _, c := range pod.Spec.Containers {
		if len(c.Ports) > 0 {
			t.Spec.Containers = append(t.Spec.Containers, corev1.Container{Name: c.Name, Ports: c.Ports})
		}
	}
	for _, c := range pod.Spec.InitContainers {
		if len(c.Ports) > 0 {
			t.Spec.InitContainers = append(t.Spec.InitContainers, corev1.Container{Name: c.Name, Ports: c.Ports, RestartPolicy: c.RestartPolicy})
		}
	}
	return t, nil
}

// keptAnnotations are the annotations egress.vcoil.io/<namespace>, the
// allowed source prefixes and the checksum choice of a pod, or nil.
func keptAnnotations(in map[string]string) map[string]string {
	var out map[string]string
	for k, v := range in {
		if strings.HasPrefix(k, vcoilv2.AnnotationEgressPrefix) || k == vcoilv2.AnnotationAllowedSourcePrefixes || k == vcoilv2.AnnotationChecksumOffload {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}
