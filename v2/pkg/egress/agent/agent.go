// Package agent sets up the client side of Egresses in vcoild: for each
// pod of this node whose annotation egress.vcoil.io/<namespace> names
// Egresses, the tunnels, routes and rules in the pod's network namespace
// that send the Egresses' destinations to their router pods
// (docs/egress.md).
//
// It applies a pod's configuration at its CNI ADD, before the pod's
// containers start, and again on every change of the pod's annotation, of
// an Egress it names, of that Egress's Service (its ClusterIP), or of the
// cluster's networks (AddressPools, ServiceCIDRs), which never go through
// an Egress. A pod that names an Egress that does not exist (or whose
// Service has no ClusterIP yet) starts all the same; an Event on the pod
// says why its egress is not set up, and the agent sets it up once the
// Egress appears.
package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/egress"
)

// vcoild reads Egresses, their Services and the cluster's networks, and
// tells a pod's owner why its egress is not set up (role "daemon").
// +kubebuilder:rbac:groups=vcoil.io,resources=egresses,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=vcoil.io,resources=addresspools,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=servicecidrs,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Event reasons on client pods.
const (
	ReasonEgressNotFound    = "EgressNotFound"    // the annotation names an Egress that does not exist
	ReasonEgressNotReady    = "EgressNotReady"    // its Service has no ClusterIP of the pod's families yet
	ReasonEgressUnsupported = "EgressUnsupported" // its encapsulation cannot be made on this node
	ReasonEgressInvalid     = "EgressInvalid"     // a destination does not parse
	ReasonEgressSetupFailed = "EgressSetupFailed"
	ReasonEgressConfigured  = "EgressConfigured"
)

// Pod is what vcoild's checkpoint knows of a local pod.
type Pod struct {
	Netns string
	IPs   []netip.Addr
}

// Options configure the agent of one node.
type Options struct {
	NodeName string
	// Apply makes a pod's netns match a configuration (egress.ApplyClient).
	Apply func(ctx context.Context, netns string, cfg egress.ClientConfig) error
	// FoU says whether this node's kernel can make FoU tunnels
	// (egress.FoUAvailable): nil, or why not.
	FoU func() error
	// Reader reads a pod the cache has not delivered yet, at its CNI ADD.
	Reader client.Reader
	// Recorder records Events on client pods.
	Recorder events.EventRecorder
	// Known, when set, lists the local pods of vcoild's checkpoint, read
	// once before the first sync: after a restart, their netns are checked
	// against their annotations once.
	Known func() (map[types.NamespacedName]Pod, error)
	// ClusterCIDRs are networks that never go through an Egress besides
	// the AddressPools' subnets and the ServiceCIDRs (vcoild's
	// --cluster-cidr and --service-cidr: node networks, for instance).
	ClusterCIDRs []netip.Prefix
	Log          logr.Logger
}

// Agent is the Egress client side of one node.
type Agent struct {
	opts   Options
	cache  client.Reader
	synced chan struct{}
	fouErr error

	mu   sync.Mutex
	pods map[types.NamespacedName]*podState
}

// podState is what the agent knows and last did for one local pod.
type podState struct {
	Pod
	// applied is the digest of the configuration last applied to the
	// netns; "" when unknown (after a restart), which makes the next
	// reconcile apply whatever it computes.
	applied string
	// problem is the last problem reported in an Event, so that a pod
	// gets one Event per problem, not one per reconcile.
	problem string
	// refs, config and err are what the node's state shows: the Egresses
	// the pod's annotation names, the configuration last applied, and why
	// the pod's egress is not as asked ("" when it is).
	refs   []types.NamespacedName
	config egress.ClientConfig
	err    string
}

// Setup adds the agent to mgr: a controller of the local pods, woken by
// changes of Egresses, Services and the cluster's networks.
func Setup(ctx context.Context, mgr manager.Manager, opts Options) (*Agent, error) {
	if opts.Apply == nil || opts.FoU == nil || opts.Recorder == nil || opts.Reader == nil {
		return nil, errors.New("egress agent: options need Apply, FoU, Recorder and Reader")
	}
	a := &Agent{
		opts: opts, cache: mgr.GetClient(), synced: make(chan struct{}),
		pods: map[types.NamespacedName]*podState{},
	}
	a.fouErr = opts.FoU()
	if a.fouErr != nil {
		opts.Log.Info("FoU tunnels cannot be made on this node: Egresses with encapsulation auto use VXLAN", "reason", a.fouErr.Error())
	}
	if opts.Known != nil {
		known, err := opts.Known()
		if err != nil {
			return nil, fmt.Errorf("egress agent: the pods of this node: %w", err)
		}
		for key, p := range known {
			a.pods[key] = &podState{Pod: p}
		}
	}
	local := predicate.NewPredicateFuncs(func(o client.Object) bool {
		p, ok := o.(*corev1.Pod)
		return ok && p.Spec.NodeName == opts.NodeName
	})
	err := builder.ControllerManagedBy(mgr).
		Named("egress-client").
		For(&corev1.Pod{}, builder.WithPredicates(local)).
		Watches(&vcoilv2.Egress{}, handler.EnqueueRequestsFromMapFunc(a.clientsIn)).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(a.clientsIn)).
		Watches(&vcoilv2.AddressPool{}, handler.EnqueueRequestsFromMapFunc(a.allPods)).
		Watches(&networkingv1.ServiceCIDR{}, handler.EnqueueRequestsFromMapFunc(a.allPods)).
		Complete(a)
	if err != nil {
		return nil, fmt.Errorf("egress agent: %w", err)
	}
	err = mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return nil // stopped before the sync
		}
		close(a.synced)
		return nil
	}))
	return a, err
}

// Ready reports whether the agent can serve ADDs (readyz check).
func (a *Agent) Ready(_ *http.Request) error {
	select {
	case <-a.synced:
		return nil
	default:
		return errors.New("the egress agent's cache has not synced yet")
	}
}

// PodAdded sets up a new local pod's egress before its CNI ADD returns.
// A missing Egress is not an error (the pod starts, an Event says why);
// an error applying an existing Egress's configuration is, so that the
// runtime retries rather than start a pod whose egress traffic would leave
// un-NATed.
func (a *Agent) PodAdded(ctx context.Context, namespace, name, netns string, ips []netip.Addr) error {
	select {
	case <-a.synced:
	case <-ctx.Done():
		return fmt.Errorf("set up the egress of pod %s/%s: the egress agent's cache has not synced yet: %w", namespace, name, ctx.Err())
	}
	key := types.NamespacedName{Namespace: namespace, Name: name}
	a.mu.Lock()
	defer a.mu.Unlock()
	st, ok := a.pods[key]
	if !ok || st.Netns != netns {
		// A new pod has nothing to clean in its fresh netns.
		st = &podState{applied: digest(egress.ClientConfig{})}
		a.pods[key] = st
	}
	st.Netns, st.IPs = netns, slices.Clone(ips)
	pod := &corev1.Pod{}
	if err := a.cache.Get(ctx, key, pod); err != nil {
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("set up the egress of pod %s: read the pod: %w", key, err)
		}
		// The cache has not delivered the pod yet.
		if err := a.opts.Reader.Get(ctx, key, pod); err != nil {
			return fmt.Errorf("set up the egress of pod %s: read the pod: %w", key, err)
		}
	}
	return a.sync(ctx, key, st, pod)
}

// PodReleased forgets a local pod at its CNI DEL (its netns goes with it).
func (a *Agent) PodReleased(_ context.Context, namespace, name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.pods, types.NamespacedName{Namespace: namespace, Name: name})
}

// Reconcile brings one local pod's netns in line with its annotation.
func (a *Agent) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st, ok := a.pods[req.NamespacedName]
	if !ok {
		return reconcile.Result{}, nil // not wired by this vcoild (yet)
	}
	pod := &corev1.Pod{}
	if err := a.cache.Get(ctx, req.NamespacedName, pod); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil // deleted: its DEL comes
		}
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, a.sync(ctx, req.NamespacedName, st, pod)
}

// sync computes a pod's configuration and applies it when it changed. The
// caller holds a.mu.
func (a *Agent) sync(ctx context.Context, key types.NamespacedName, st *podState, pod *corev1.Pod) error {
	log := a.opts.Log.WithValues("pod", key)
	st.refs = References(pod)
	cfg, problems, err := a.desired(ctx, pod, st.IPs)
	if err != nil {
		err = fmt.Errorf("set up the egress of pod %s: %w", key, err)
		st.err = err.Error()
		return err
	}
	var all []string
	for _, p := range problems {
		all = append(all, p.note)
	}
	st.err = strings.Join(all, "; ")
	if p := st.err; p != st.problem {
		st.problem = p
		for _, p := range problems {
			log.Info("egress not set up", "reason", p.reason, "problem", p.note)
			// Events of one reason on one pod are merged into a series
			// that keeps the first note: one reason per kind of problem.
			a.opts.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, p.reason, "SetUpEgress", "%s", p.note)
		}
	}
	d := digest(cfg)
	if d == st.applied {
		return nil
	}
	if err := a.opts.Apply(ctx, st.Netns, cfg); err != nil {
		a.opts.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonEgressSetupFailed, "SetUpEgress", "cannot set up the pod's egress tunnels: %v", err)
		err = fmt.Errorf("set up the egress of pod %s in netns %s: %w", key, st.Netns, err)
		st.err = err.Error()
		return err
	}
	st.applied, st.config = d, cfg
	if len(cfg.Egresses) > 0 {
		names := make([]string, 0, len(cfg.Egresses))
		for _, e := range cfg.Egresses {
			names = append(names, fmt.Sprintf("%s (%s)", e.Egress, e.Kind))
		}
		log.Info("egress set up", "egresses", names)
		a.opts.Recorder.Eventf(pod, nil, corev1.EventTypeNormal, ReasonEgressConfigured, "SetUpEgress", "egress through %s", strings.Join(names, ", "))
	}
	return nil
}

// desired is the configuration a pod's annotation asks for, with what
// keeps part of it from being set up (missing Egress, no ClusterIP yet).
func (a *Agent) desired(ctx context.Context, pod *corev1.Pod, ips []netip.Addr) (egress.ClientConfig, []problem, error) {
	cfg := egress.ClientConfig{PodIPs: sortedAddrs(ips)}
	refs := References(pod)
	if len(refs) == 0 {
		return cfg, nil, nil
	}
	var problems []problem
	for _, ref := range refs {
		ce, problem, err := a.clientEgress(ctx, ref, cfg.PodIPs)
		if err != nil {
			return cfg, nil, err
		}
		if problem.note != "" {
			problems = append(problems, problem)
			continue
		}
		cfg.Egresses = append(cfg.Egresses, ce)
	}
	if len(cfg.Egresses) > 0 {
		ex, err := a.clusterNetworks(ctx)
		if err != nil {
			return cfg, nil, err
		}
		cfg.Excluded = ex
	}
	return cfg, problems, nil
}

// clientEgress is one Egress as a pod's tunnel: its Service's ClusterIPs
// and its destinations, of the pod's families.
func (a *Agent) clientEgress(ctx context.Context, ref types.NamespacedName, podIPs []netip.Addr) (egress.ClientEgress, problem, error) {
	eg := &vcoilv2.Egress{}
	if err := a.cache.Get(ctx, ref, eg); err != nil {
		if apierrors.IsNotFound(err) {
			return egress.ClientEgress{}, problem{ReasonEgressNotFound, fmt.Sprintf("Egress %s, named by annotation %s%s, does not exist", ref, vcoilv2.AnnotationEgressPrefix, ref.Namespace)}, nil
		}
		return egress.ClientEgress{}, problem{}, fmt.Errorf("read Egress %s: %w", ref, err)
	}
	kind, err := egress.Choose(eg.Spec.Encapsulation, a.fouErr)
	if err != nil {
		return egress.ClientEgress{}, problem{ReasonEgressUnsupported, fmt.Sprintf("Egress %s: %v", ref, err)}, nil
	}
	svc := &corev1.Service{}
	if err := a.cache.Get(ctx, ref, svc); err != nil {
		if apierrors.IsNotFound(err) {
			return egress.ClientEgress{}, problem{ReasonEgressNotReady, fmt.Sprintf("Egress %s has no Service yet", ref)}, nil
		}
		return egress.ClientEgress{}, problem{}, fmt.Errorf("read the Service of Egress %s: %w", ref, err)
	}
	ce := egress.ClientEgress{Egress: ref, Kind: kind, FoUSourcePortAuto: eg.Spec.FouSourcePortAuto}
	for _, s := range svc.Spec.ClusterIPs {
		ip, err := netip.ParseAddr(s)
		if err == nil && hasFamily(podIPs, ip) {
			ce.ServiceIPs = append(ce.ServiceIPs, ip)
		}
	}
	if len(ce.ServiceIPs) == 0 {
		return egress.ClientEgress{}, problem{ReasonEgressNotReady, fmt.Sprintf("the Service of Egress %s has no ClusterIP of the pod's families yet", ref)}, nil
	}
	slices.SortFunc(ce.ServiceIPs, netip.Addr.Compare)
	for _, s := range eg.Spec.Destinations {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			// The webhook rejects these; an Egress stored before it ran
			// still must not break its other destinations.
			return egress.ClientEgress{}, problem{ReasonEgressInvalid, fmt.Sprintf("Egress %s: destination %q: %v", ref, s, err)}, nil
		}
		if hasFamily(ce.ServiceIPs, p.Addr()) {
			ce.Destinations = append(ce.Destinations, p.Masked())
		}
	}
	slices.SortFunc(ce.Destinations, comparePrefix)
	return ce, problem{}, nil
}

// problem is why one Egress of a pod is not set up, as an Event says it.
type problem struct{ reason, note string }

// clusterNetworks are the networks no Egress may take: every AddressPool's
// subnets, every ServiceCIDR, and the configured ones.
func (a *Agent) clusterNetworks(ctx context.Context) ([]netip.Prefix, error) {
	out := slices.Clone(a.opts.ClusterCIDRs)
	pools := &vcoilv2.AddressPoolList{}
	if err := a.cache.List(ctx, pools); err != nil {
		return nil, fmt.Errorf("list AddressPools: %w", err)
	}
	for _, p := range pools.Items {
		for _, s := range p.Spec.Subnets {
			for _, c := range []*string{s.IPv4, s.IPv6} {
				if c == nil {
					continue
				}
				if pfx, err := netip.ParsePrefix(*c); err == nil {
					out = append(out, pfx.Masked())
				}
			}
		}
	}
	cidrs := &networkingv1.ServiceCIDRList{}
	if err := a.cache.List(ctx, cidrs); err != nil {
		return nil, fmt.Errorf("list ServiceCIDRs: %w", err)
	}
	for _, c := range cidrs.Items {
		for _, s := range c.Spec.CIDRs {
			if pfx, err := netip.ParsePrefix(s); err == nil {
				out = append(out, pfx.Masked())
			}
		}
	}
	slices.SortFunc(out, comparePrefix)
	return slices.Compact(out), nil
}

// References are the Egresses a pod's annotations name, sorted.
func References(pod *corev1.Pod) []types.NamespacedName {
	var out []types.NamespacedName
	for k, v := range pod.Annotations {
		ns, ok := strings.CutPrefix(k, vcoilv2.AnnotationEgressPrefix)
		if !ok || ns == "" {
			continue
		}
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				out = append(out, types.NamespacedName{Namespace: ns, Name: name})
			}
		}
	}
	slices.SortFunc(out, func(x, y types.NamespacedName) int {
		return cmp.Or(strings.Compare(x.Namespace, y.Namespace), strings.Compare(x.Name, y.Name))
	})
	return slices.Compact(out)
}

// clientsIn maps an Egress or a Service to the local pods that name an
// Egress of its namespace (the map functions run without a.mu held by
// the controller; they take it to read the pod set).
func (a *Agent) clientsIn(ctx context.Context, o client.Object) []reconcile.Request {
	var out []reconcile.Request
	for _, key := range a.known() {
		pod := &corev1.Pod{}
		if err := a.cache.Get(ctx, key, pod); err != nil {
			continue
		}
		for _, ref := range References(pod) {
			if ref.Namespace == o.GetNamespace() && ref.Name == o.GetName() {
				out = append(out, reconcile.Request{NamespacedName: key})
				break
			}
		}
	}
	return out
}

// allPods maps a change of the cluster's networks to every local pod.
func (a *Agent) allPods(context.Context, client.Object) []reconcile.Request {
	keys := a.known()
	out := make([]reconcile.Request, 0, len(keys))
	for _, k := range keys {
		out = append(out, reconcile.Request{NamespacedName: k})
	}
	return out
}

func (a *Agent) known() []types.NamespacedName {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]types.NamespacedName, 0, len(a.pods))
	for k := range a.pods {
		out = append(out, k)
	}
	return out
}

// digest identifies a configuration: equal configurations (sorted the
// same way by desired) have equal digests.
func digest(cfg egress.ClientConfig) string {
	if len(cfg.Egresses) == 0 {
		return "none" // whatever the pod's addresses: nothing of egress in the netns
	}
	return fmt.Sprintf("%v", cfg)
}

func hasFamily(ips []netip.Addr, ip netip.Addr) bool {
	return slices.ContainsFunc(ips, func(a netip.Addr) bool { return a.Is4() == ip.Is4() })
}

func sortedAddrs(ips []netip.Addr) []netip.Addr {
	out := slices.Clone(ips)
	// IPv4 first, as the pod's addresses are listed.
	slices.SortFunc(out, func(x, y netip.Addr) int {
		if x.Is4() != y.Is4() {
			if x.Is4() {
				return -1
			}
			return 1
		}
		return x.Compare(y)
	})
	return out
}

func comparePrefix(x, y netip.Prefix) int {
	return cmp.Or(x.Addr().Compare(y.Addr()), cmp.Compare(x.Bits(), y.Bits()))
}
