// Package routerwatch keeps the router of one Egress (package egress's
// Router, in a router pod) in step with the cluster: the Egress's
// destinations, and the client pods whose annotation
// egress.vcoil.io/<egress namespace> names the Egress, which become the
// router's peers while they run.
//
// It only reads: it neither changes the Egress nor the pods, and it knows
// nothing of tunnels or nftables, which are the Router's business (its
// metrics read the Router's drop counter through an interface). It
// trusts the apiserver's validation of the Egress (the webhook rejects
// unparsable destinations); one that slips through is reported and not
// applied.
package routerwatch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/egress"
)

// RBAC of router pods (ClusterRole vcoil-egress).
// +kubebuilder:rbac:groups=vcoil.io,resources=egresses,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// Router is what the watcher needs from package egress's Router.
type Router interface {
	// SetDestinations replaces the networks the router forwards for its
	// peers.
	SetDestinations(ctx context.Context, destinations []netip.Prefix) error
	// AddPeer makes the pod id (its UID), with addresses ips, a peer; it
	// is called again, after RemovePeer, when the pod's addresses change.
	AddPeer(ctx context.Context, id string, ips []netip.Addr) error
	// RemovePeer forgets the pod id. Addresses another pod still holds
	// stay reachable: that is the Router's contract.
	RemovePeer(ctx context.Context, id string) error
}

// Options configure a Watcher.
type Options struct {
	// Egress is the router's Egress.
	Egress types.NamespacedName
	Router Router
	// Metrics, when set, receives the peer count and the Router's errors.
	Metrics *Metrics
	Log     logr.Logger
}

// Watcher feeds one Router. It is ready (Ready) once the Egress's
// destinations are applied and every client pod present when the caches
// synced has been offered to the Router, so that a new router pod takes
// traffic (the Service sends it only to ready pods) only when it can
// answer every client.
type Watcher struct {
	opts       Options
	reader     client.Reader
	annotation string
	ready      atomic.Bool

	// apply serializes the Router's calls and guards destinations and
	// applied: the controllers of destinations and of pods, and the
	// initial pass, run concurrently. mu guards peers alone, so that the
	// event filter never waits for a Router call.
	apply sync.Mutex
	mu    sync.Mutex
	// peers are the pods handed to the Router, by name: a reconcile of a
	// deleted pod has only its name, and the entry gives the UID (the id
	// the Router knows) to remove. A pod recreated under the same name has
	// a new UID, which replaces the old one.
	peers map[types.NamespacedName]peer
	// destinations last applied; applied says whether any were.
	destinations []netip.Prefix
	applied      bool
}

type peer struct {
	uid types.UID
	ips []netip.Addr
}

// CacheOptions are the manager's cache settings for a router of the Egress eg:
// only that Egress, and Pods of every namespace trimmed to what the
// watcher reads (a router caches every pod of the cluster).
func CacheOptions(eg types.NamespacedName) map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&vcoilv2.Egress{}: {
			Namespaces: map[string]cache.Config{eg.Namespace: {}},
			Field:      fields.OneTermEqualSelector("metadata.name", eg.Name),
		},
		&corev1.Pod{}: {Transform: TrimPod(eg.Namespace)},
	}
}

// TrimPod returns the cache transform of Pods for Egresses of namespace
// egressNamespace: it keeps the pod's identity, its annotation naming
// Egresses of that namespace, host network, phase and addresses.
func TrimPod(egressNamespace string) toolscache.TransformFunc {
	key := vcoilv2.AnnotationEgressPrefix + egressNamespace
	return func(obj any) (any, error) {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			return obj, nil // a tombstone
		}
		t := &corev1.Pod{
			TypeMeta: pod.TypeMeta,
			ObjectMeta: metav1.ObjectMeta{
				Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID,
				ResourceVersion:   pod.ResourceVersion,
				DeletionTimestamp: pod.DeletionTimestamp,
			},
			Spec: corev1.PodSpec{HostNetwork: pod.Spec.HostNetwork},
			Status: corev1.PodStatus{
				Phase: pod.Status.Phase, PodIP: pod.Status.PodIP, PodIPs: pod.Status.PodIPs,
			},
		}
		if v, ok := pod.Annotations[key]; ok {
			t.Annotations = map[string]string{key: v}
		}
		return t, nil
	}
}

// Names says whether the value of an egress.vcoil.io/<namespace>
// annotation names the Egress name: a comma separated list, spaces around
// names ignored.
func Names(annotation, name string) bool {
	for n := range strings.SplitSeq(annotation, ",") {
		if strings.TrimSpace(n) == name {
			return true
		}
	}
	return false
}

// Setup adds the watcher to mgr, whose cache must have CacheOptions: a
// controller of the Egress, one of the pods, and the initial pass that
// makes the watcher ready.
func Setup(mgr manager.Manager, opts Options) (*Watcher, error) {
	if opts.Router == nil || opts.Egress.Name == "" || opts.Egress.Namespace == "" {
		return nil, fmt.Errorf("egress router watcher: options need the Egress's namespace and name and a Router")
	}
	w := &Watcher{
		opts:       opts,
		reader:     mgr.GetClient(),
		annotation: vcoilv2.AnnotationEgressPrefix + opts.Egress.Namespace,
		peers:      map[types.NamespacedName]peer{},
	}
	thisEgress := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetNamespace() == opts.Egress.Namespace && o.GetName() == opts.Egress.Name
	})
	err := builder.ControllerManagedBy(mgr).
		Named("egress-destinations").
		For(&vcoilv2.Egress{}, builder.WithPredicates(thisEgress)).
		Complete(reconcile.Func(w.reconcileEgress))
	if err != nil {
		return nil, fmt.Errorf("egress %s: destinations controller: %w", opts.Egress, err)
	}
	err = builder.ControllerManagedBy(mgr).
		Named("egress-peers").
		For(&corev1.Pod{}, builder.WithPredicates(w.clientPods())).
		Complete(reconcile.Func(w.reconcilePod))
	if err != nil {
		return nil, fmt.Errorf("egress %s: peers controller: %w", opts.Egress, err)
	}
	if err := mgr.Add(w); err != nil {
		return nil, err
	}
	return w, nil
}

// clientPods lets through the events of pods that name the Egress, named
// it before an update, or are peers: the router caches every pod of the
// cluster and most are none of its business.
func (w *Watcher) clientPods() predicate.Predicate {
	relevant := func(o client.Object) bool {
		if Names(o.GetAnnotations()[w.annotation], w.opts.Egress.Name) {
			return true
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		_, ok := w.peers[client.ObjectKeyFromObject(o)]
		return ok
	}
	return predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return relevant(e.Object) },
		UpdateFunc:  func(e event.UpdateEvent) bool { return relevant(e.ObjectOld) || relevant(e.ObjectNew) },
		DeleteFunc:  func(e event.DeleteEvent) bool { return relevant(e.Object) },
		GenericFunc: func(event.GenericEvent) bool { return true },
	}
}

// Ready says whether the watcher is ready (see Watcher); it is a
// healthz.Checker for /readyz.
func (w *Watcher) Ready(_ *http.Request) error {
	if !w.ready.Load() {
		return fmt.Errorf("egress %s: destinations and client pods not yet handed to the router", w.opts.Egress)
	}
	return nil
}

// NeedLeaderElection is false: every router replica serves.
func (w *Watcher) NeedLeaderElection() bool { return false }

// Start runs the initial pass (a manager.Runnable): the Egress and every
// pod naming it, read from the synced cache and handed to the Router,
// retried until they all went through. Then the watcher is ready; the
// controllers go on from there.
func (w *Watcher) Start(ctx context.Context) error {
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		if err := w.syncAll(ctx); err != nil {
			w.opts.Log.Error(err, "initial pass over the Egress and its client pods failed; retrying", "egress", w.opts.Egress)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return nil // the manager is stopping
	}
	w.ready.Store(true)
	w.opts.Log.Info("router ready", "egress", w.opts.Egress, "peers", w.peerCount())
	return nil
}

func (w *Watcher) syncAll(ctx context.Context) error {
	if _, err := w.reconcileEgress(ctx, reconcile.Request{NamespacedName: w.opts.Egress}); err != nil {
		return err
	}
	w.apply.Lock()
	applied := w.applied
	w.apply.Unlock()
	if !applied {
		return fmt.Errorf("egress %s not found", w.opts.Egress)
	}
	var pods corev1.PodList
	if err := w.reader.List(ctx, &pods); err != nil {
		return fmt.Errorf("list pods: %w", err)
	}
	var failed []error
	for i := range pods.Items {
		p := &pods.Items[i]
		if !Names(p.Annotations[w.annotation], w.opts.Egress.Name) {
			continue
		}
		_, err := w.reconcilePod(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(p)})
		switch {
		case errors.Is(err, reconcile.TerminalError(nil)):
			// One pod the router cannot serve does not keep it from
			// serving the others.
			w.opts.Log.Error(err, "client pod left out")
		case err != nil:
			failed = append(failed, err)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d client pods of egress %s: first: %w", len(failed), w.opts.Egress, failed[0])
	}
	return nil
}

// reconcileEgress applies the Egress's destinations when they changed. A
// deleted Egress leaves them: its Deployment, and so this router, goes
// with it.
func (w *Watcher) reconcileEgress(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	eg := &vcoilv2.Egress{}
	if err := w.reader.Get(ctx, req.NamespacedName, eg); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("get egress %s: %w", req.NamespacedName, err)
	}
	dests, err := ParseDestinations(eg.Spec.Destinations)
	if err != nil {
		w.opts.Metrics.failed(opParse)
		// Retrying cannot help: a new spec brings a new event.
		return reconcile.Result{}, reconcile.TerminalError(fmt.Errorf("egress %s: %w", req.NamespacedName, err))
	}
	w.apply.Lock()
	defer w.apply.Unlock()
	if w.applied && slices.Equal(dests, w.destinations) {
		return reconcile.Result{}, nil
	}
	if err := w.opts.Router.SetDestinations(ctx, dests); err != nil {
		w.opts.Metrics.failed(opSetDestinations)
		return reconcile.Result{}, fmt.Errorf("egress %s: set destinations %v: %w", req.NamespacedName, dests, err)
	}
	w.destinations, w.applied = dests, true
	w.opts.Metrics.setDestinations(len(dests))
	w.opts.Log.Info("destinations applied", "egress", req.NamespacedName, "destinations", dests)
	return reconcile.Result{}, nil
}

// ParseDestinations parses an Egress's spec.destinations into masked
// prefixes, naming the first bad entry by its index.
func ParseDestinations(ds []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(ds))
	for i, d := range ds {
		p, err := netip.ParsePrefix(strings.TrimSpace(d))
		if err != nil {
			return nil, fmt.Errorf("spec.destinations[%d] %q: %w", i, d, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// reconcilePod makes the Router's idea of the pod match the pod: a peer
// while it names the Egress, runs in the pod network with addresses and
// has not finished; otherwise not.
func (w *Watcher) reconcilePod(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pod := &corev1.Pod{}
	if err := w.reader.Get(ctx, req.NamespacedName, pod); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("get pod %s: %w", req.NamespacedName, err)
		}
		pod = nil
	}
	want, isPeer := w.peerOf(pod)

	w.apply.Lock()
	defer w.apply.Unlock()
	defer func() { w.opts.Metrics.setPeers(w.peerCount()) }()
	w.mu.Lock()
	had, wasPeer := w.peers[req.NamespacedName]
	w.mu.Unlock()
	if wasPeer && isPeer && had.uid == want.uid && slices.Equal(had.ips, want.ips) {
		return reconcile.Result{}, nil
	}
	if wasPeer {
		if err := w.opts.Router.RemovePeer(ctx, string(had.uid)); err != nil {
			w.opts.Metrics.failed(opRemovePeer)
			return reconcile.Result{}, fmt.Errorf("egress %s: remove peer pod %s (%s): %w", w.opts.Egress, req.NamespacedName, had.uid, err)
		}
		w.mu.Lock()
		delete(w.peers, req.NamespacedName)
		w.mu.Unlock()
		w.opts.Log.Info("peer removed", "egress", w.opts.Egress, "pod", req.NamespacedName, "uid", had.uid, "ips", had.ips)
	}
	if isPeer {
		if err := w.opts.Router.AddPeer(ctx, string(want.uid), want.ips); err != nil {
			w.opts.Metrics.failed(opAddPeer)
			err = fmt.Errorf("egress %s: add peer pod %s (%s) %v: %w", w.opts.Egress, req.NamespacedName, want.uid, want.ips, err)
			if errors.Is(err, egress.ErrInvalidConfig) {
				// Such as a client of a family the router lacks: retrying
				// cannot help; a change of the pod brings a new event.
				return reconcile.Result{}, reconcile.TerminalError(err)
			}
			return reconcile.Result{}, err
		}
		w.mu.Lock()
		w.peers[req.NamespacedName] = want
		w.mu.Unlock()
		w.opts.Log.Info("peer added", "egress", w.opts.Egress, "pod", req.NamespacedName, "uid", want.uid, "ips", want.ips)
	}
	return reconcile.Result{}, nil
}

func (w *Watcher) peerCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.peers)
}

// peerOf says whether pod (nil when deleted) is a peer, and with which
// UID and addresses.
func (w *Watcher) peerOf(pod *corev1.Pod) (peer, bool) {
	if pod == nil || pod.Spec.HostNetwork || !Names(pod.Annotations[w.annotation], w.opts.Egress.Name) {
		return peer{}, false
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return peer{}, false
	}
	ips := PodIPs(pod)
	if len(ips) == 0 {
		return peer{}, false
	}
	return peer{uid: pod.UID, ips: ips}, true
}

// PodIPs are a pod's addresses from its status (podIPs, else podIP),
// unparsable ones skipped.
func PodIPs(pod *corev1.Pod) []netip.Addr {
	var ips []netip.Addr
	add := func(s string) {
		if a, err := netip.ParseAddr(s); err == nil && !slices.Contains(ips, a.Unmap()) {
			ips = append(ips, a.Unmap())
		}
	}
	for _, p := range pod.Status.PodIPs {
		add(p.IP)
	}
	if len(ips) == 0 {
		add(pod.Status.PodIP)
	}
	return ips
}
