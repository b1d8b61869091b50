package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/nodeevents"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// eventLog is an events.EventRecorder that keeps each Event as
// "Kind/name type reason: note".
type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) Eventf(regarding, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ref := "?"
	switch o := regarding.(type) {
	case *corev1.ObjectReference:
		ref = o.Kind + "/" + o.Name
	case *networkingv1.NetworkPolicy:
		ref = "NetworkPolicy/" + o.Namespace + "/" + o.Name
	}
	l.events = append(l.events, fmt.Sprintf("%s %s %s: %s", ref, eventtype, reason, fmt.Sprintf(note, args...)))
}

func (l *eventLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.events
	l.events = nil
	return e
}

// failingRenderer fails with err while it is set.
type failingRenderer struct {
	mu  sync.Mutex
	err error
}

func (r *failingRenderer) set(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
}

func (r *failingRenderer) Render(context.Context, renderer.Txn) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// A renderer's failure is one Warning on the Node per distinct error until
// a transaction succeeds; a dataplane that is not ready is left to the
// dataplane's own Events.
func TestARenderFailureIsReportedOnTheNodeOncePerError(t *testing.T) {
	log := &eventLog{}
	fr := &failingRenderer{}
	r := renderReport{r: fr, name: "vpp-acl", events: nodeevents.New(log, "node-a")}
	render := func() { _ = r.Render(context.Background(), renderer.Txn{}) }

	fr.set(fmt.Errorf("apply ACLs of pod default/web: %w", dataplane.ErrNotReady))
	render()
	fr.set(errors.New("acl_add_replace: VPPApiError: invalid value (-2)"))
	render()
	render()
	render()
	fr.set(nil)
	render()
	fr.set(errors.New("acl_add_replace: VPPApiError: invalid value (-2)"))
	render()
	note := "Node/node-a Warning PolicyRenderFailed: the vpp-acl renderer refused the network policies: acl_add_replace: VPPApiError: invalid value (-2); pods keep the rules they had, new pods' ADDs fail, vcoild is not ready, and a resync retries with backoff"
	if got, want := log.take(), []string{note, note}; !slices.Equal(got, want) {
		t.Fatalf("events:\n got %q\nwant %q", got, want)
	}
}

// A NetworkPolicy with parts the processor leaves out gets a Warning
// naming them, once per version; a version without them gets none. (The
// apiserver validates what the processor checks, so such a policy comes
// only from an apiserver that validates less: this is a unit test.)
func TestAPolicyWithPartsLeftOutIsToldWhich(t *testing.T) {
	log := &eventLog{}
	pp := newPolicyProblems(log)
	icmp := corev1.Protocol("ICMP")
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "odd", UID: "u1", ResourceVersion: "1"},
		Spec: networkingv1.NetworkPolicySpec{
			Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &icmp}}}},
		},
	}
	pp.check(np)
	pp.check(np) // an informer's resync: the same version
	newer := np.DeepCopy()
	newer.ResourceVersion = "2"
	pp.check(newer)
	fixed := newer.DeepCopy()
	fixed.ResourceVersion, fixed.Spec.Ingress[0].Ports = "3", nil
	pp.check(fixed)
	pp.forget(toolscache.DeletedFinalStateUnknown{Key: "default/odd", Obj: fixed})
	note := `NetworkPolicy/default/odd Warning PolicyPartIgnored: vcoil leaves out parts of this NetworkPolicy, which then permit nothing: ingress[0].ports[0]: unsupported protocol "ICMP"`
	if got, want := log.take(), []string{note, note}; !slices.Equal(got, want) {
		t.Fatalf("events:\n got %q\nwant %q", got, want)
	}
	if len(pp.reported) != 0 {
		t.Fatalf("reported after the fix and the deletion: %v", pp.reported)
	}
}

// In vcoild: the agent's renderer failing is an Event on the Node in the
// apiserver, recorded with the manager's recorder.
func TestARenderFailureIsAnEventOnTheNode(t *testing.T) {
	env, err := testenv.Start(testenv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	}()
	ctx, cancel := context.WithCancel(t.Context())
	const nodeName = "pol-events-node"
	env.CreateNode(t, nodeName, "198.18.0.3")
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{ByObject: CacheOptions(nodeName)},
	})
	if err != nil {
		t.Fatal(err)
	}
	fr := &failingRenderer{err: errors.New("nftables: table inet vcoil-policy: operation not permitted")}
	if _, err := Setup(ctx, mgr, Options{NodeName: nodeName, Renderer: fr, RendererName: "nftables", Reader: mgr.GetAPIReader(), Log: testr.New(t)}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	e := env.WaitForEvent(t, 30*time.Second, testenv.EventOf{Kind: "Node", Name: nodeName,
		Type: corev1.EventTypeWarning, Reason: ReasonPolicyRenderFailed, Note: "the nftables renderer refused the network policies: nftables: table inet vcoil-policy: operation not permitted"})
	if e.Action != "Render" || !strings.Contains(e.ReportingController, "vcoild") {
		t.Fatalf("event action %q, controller %q", e.Action, e.ReportingController)
	}
}
