package processor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/nodeevents"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// noteLog is an events.EventRecorder that keeps each Event as "Kind/name
// type reason: note".
type noteLog struct {
	mu     sync.Mutex
	events []string
}

func (l *noteLog) Eventf(regarding, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ref := "?"
	switch o := regarding.(type) {
	case *corev1.ObjectReference:
		ref = o.Kind + "/" + o.Name
	case metav1.Object:
		ref = fmt.Sprintf("%T/%s", o, o.GetName())
	}
	l.events = append(l.events, fmt.Sprintf("%s %s %s: %s", ref, eventtype, reason, fmt.Sprintf(note, args...)))
}

func (l *noteLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.events
	l.events = nil
	return e
}

// A renderer that fails gives one Warning ServiceSyncFailed on the Node
// with its error, not one per retry; once every renderer is in sync again,
// the next failure is reported again.
func TestARendererFailureIsReportedOnTheNodeOncePerError(t *testing.T) {
	ctx := context.Background()
	r := &recordingRenderer{}
	p, clock, _ := newTestProcessor(t, r)
	events := &noteLog{}
	p.nodeEvents = nodeevents.New(events, "node-a")
	p.SetService(svcOf(named("a")))
	p.step(ctx)

	r.fail = 3
	for range 4 { // three failures (an update, then two resyncs), then the resync that works
		clock.Advance(time.Minute)
		p.SetService(svcOf(named(fmt.Sprintf("s%d", clock.now.Minute()))))
		p.step(ctx)
	}
	want := []string{"Node/node-a Warning ServiceSyncFailed: Services are not rendered into this node's dataplane as the API has them: renderer is broken; vcoild retries with a backoff and resyncs everything"}
	if got := events.take(); !slices.Equal(got, want) {
		t.Fatalf("events after three failures and a recovery:\n got %q\nwant %q", got, want)
	}
	if n := len(r.take()); n != 5 {
		t.Fatalf("%d renderer calls, want 5", n)
	}

	r.fail = 1
	clock.Advance(time.Minute)
	p.SetService(svcOf(named("again")))
	p.step(ctx)
	if got := events.take(); !slices.Equal(got, want) {
		t.Fatalf("events of a failure after the recovery:\n got %q\nwant %q", got, want)
	}
}

// notReadyRenderer fails as the NAT44 renderer does while VPP restarts.
type notReadyRenderer struct{ calls int }

func (r *notReadyRenderer) fail() error {
	r.calls++
	return fmt.Errorf("open an API channel: %w", dataplane.ErrNotReady)
}
func (r *notReadyRenderer) Resync(context.Context, *service.State) error   { return r.fail() }
func (r *notReadyRenderer) Update(context.Context, *service.Changes) error { return r.fail() }

// A dataplane that is not ready (VPP restarting) is not reported as the
// services' failure: the dataplane's own Events say so.
func TestADataplaneNotReadyIsNotAServiceSyncFailure(t *testing.T) {
	r := &notReadyRenderer{}
	p, clock, _ := newTestProcessor(t, r)
	events := &noteLog{}
	p.nodeEvents = nodeevents.New(events, "node-a")
	for range 3 {
		p.SetService(svcOf(named(fmt.Sprintf("s%d", r.calls))))
		p.step(context.Background())
		clock.Advance(time.Minute)
	}
	if got := events.take(); r.calls != 3 || len(got) != 0 {
		t.Fatalf("%d failed calls gave events %q, want 3 and none", r.calls, got)
	}
}

// In vcoild: the Event is on the Node in the apiserver, where `kubectl
// describe node` shows it.
func TestARendererFailureIsAnEventOnTheNode(t *testing.T) {
	ctx := context.Background()
	env.CleanAtEnd(t)
	env.CreateNode(t, "svc-node-3", "198.18.0.3")
	_, rec, _ := startProcessor(t, "svc-node-3")
	rec.mu.Lock()
	rec.fail = 1 << 20
	rec.mu.Unlock()
	t.Cleanup(func() { rec.mu.Lock(); rec.fail = 0; rec.mu.Unlock() })
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "refused"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}},
	}
	if err := env.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, svc) })
	e := env.WaitForEvent(t, 20*time.Second, testenv.EventOf{Kind: "Node", Name: "svc-node-3",
		Type: corev1.EventTypeWarning, Reason: ReasonServiceSyncFailed, Note: ": renderer is broken;"})
	if e.Action != "Sync" || !strings.HasPrefix(e.Note, "Services are not rendered") {
		t.Fatalf("event %q %q", e.Action, e.Note)
	}
}
