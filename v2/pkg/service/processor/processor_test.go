package processor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// recordingRenderer records the calls it gets and fails the next fail ones.
type recordingRenderer struct {
	mu    sync.Mutex
	calls []call
	fail  int
}

type call struct {
	resync  *service.State
	changes *service.Changes
}

func (r *recordingRenderer) record(c call) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
	if r.fail > 0 {
		r.fail--
		return errors.New("renderer is broken")
	}
	return nil
}

func (r *recordingRenderer) Resync(_ context.Context, s *service.State) error {
	return r.record(call{resync: s})
}

func (r *recordingRenderer) Update(_ context.Context, c *service.Changes) error {
	return r.record(call{changes: c})
}

// take returns the calls since the last take.
func (r *recordingRenderer) take() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

func (c call) String() string {
	if c.resync != nil {
		var ids []string
		for id := range c.resync.Services {
			ids = append(ids, id.String())
		}
		slices.Sort(ids)
		return fmt.Sprintf("resync %v", ids)
	}
	s := "update"
	if c.changes.Node != nil {
		s += " node"
	}
	for _, u := range c.changes.Upsert {
		s += " +" + u.ID.String()
	}
	for _, d := range c.changes.Delete {
		s += " -" + d.String()
	}
	return s
}

func callsString(cs []call) string {
	var s []string
	for _, c := range cs {
		s = append(s, c.String())
	}
	return fmt.Sprint(s)
}

// eventLog is an events.EventRecorder that keeps the reasons it got.
type eventLog struct {
	mu      sync.Mutex
	reasons []string
}

func (e *eventLog) Eventf(_, _ runtime.Object, _, reason, _, _ string, _ ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reasons = append(e.reasons, reason)
}

// fakeClock is the processor's clock in the tests of step.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time          { return c.now }
func (c *fakeClock) Advance(d time.Duration) { c.now = c.now.Add(d) }

func newTestProcessor(t *testing.T, renderers ...service.Renderer) (*Processor, *fakeClock, *eventLog) {
	t.Helper()
	ev := &eventLog{}
	p, err := New(Options{
		NodeName: "node-a", Renderers: renderers, MinSyncPeriod: time.Second, SyncPeriod: 30 * time.Second,
		Recorder: ev, Log: testr.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	p.clock = clock.Now
	node := &corev1.Node{}
	node.Name = "node-a"
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.0.1"}}
	p.SetNode(node)
	return p, clock, ev
}

func named(name string) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Name = name }
}

func TestProcessorTiming(t *testing.T) {
	ctx := context.Background()
	r := &recordingRenderer{}
	p, clock, _ := newTestProcessor(t, r)
	p.SetService(svcOf(named("a")))

	if !p.LastSync().IsZero() || p.PendingSince().IsZero() {
		t.Fatalf("before the first sync: last sync %v, pending since %v", p.LastSync(), p.PendingSince())
	}
	select {
	case <-p.Synced():
		t.Fatal("synced before the first sync")
	default:
	}
	t.Log("the first round is a resync with the whole state")
	next := p.step(ctx)
	if got := callsString(r.take()); got != "[resync [default/a]]" {
		t.Fatalf("first round: %s", got)
	}
	if !next.Equal(clock.now.Add(30 * time.Second)) {
		t.Errorf("next round at %v, want the periodic resync", next)
	}
	if !p.LastSync().Equal(clock.now) || !p.PendingSince().IsZero() {
		t.Errorf("after the first sync: last sync %v, pending since %v", p.LastSync(), p.PendingSince())
	}
	select {
	case <-p.Synced():
	default:
		t.Fatal("not synced after the first sync")
	}

	t.Log("changes within the min sync period wait, then go as one update")
	clock.Advance(300 * time.Millisecond)
	changedAt := clock.now
	p.SetService(svcOf(named("b")))
	clock.Advance(100 * time.Millisecond)
	p.SetEndpointSlice(sliceOf("a-1", ep("10.1.0.1", "node-b")))
	next = p.step(ctx)
	if calls := r.take(); len(calls) != 0 {
		t.Fatalf("a round before the min sync period: %s", callsString(calls))
	}
	if want := changedAt.Add(-300 * time.Millisecond).Add(time.Second); !next.Equal(want) {
		t.Errorf("next round at %v, want %v", next, want)
	}
	if !p.PendingSince().Equal(changedAt) {
		t.Errorf("pending since %v, want %v", p.PendingSince(), changedAt)
	}
	clock.now = next
	p.step(ctx)
	// The slice is labelled for "web", a service that does not exist.
	if got := callsString(r.take()); got != "[update +default/b]" {
		t.Fatalf("second round: %s", got)
	}
	if !p.PendingSince().IsZero() {
		t.Errorf("pending since %v after the update", p.PendingSince())
	}

	t.Log("a change that leaves the model as it was sends nothing")
	clock.Advance(time.Second)
	p.SetService(svcOf(named("b")))
	p.step(ctx)
	if calls := r.take(); len(calls) != 0 {
		t.Fatalf("no-op change sent %s", callsString(calls))
	}

	t.Log("a service gone or no longer served is deleted")
	clock.Advance(time.Second)
	p.DeleteService("default", "a")
	p.SetService(svcOf(named("b"), func(s *corev1.Service) { s.Labels = map[string]string{LabelServiceProxyName: "other"} }))
	p.step(ctx)
	if got := callsString(r.take()); got != "[update -default/a -default/b]" {
		t.Fatalf("deletes: %s", got)
	}

	t.Log("every sync period, a resync")
	clock.now = p.lastResync.Add(30 * time.Second)
	p.step(ctx)
	if got := callsString(r.take()); got != "[resync []]" {
		t.Fatalf("periodic: %s", got)
	}
}

func TestProcessorEndpointChange(t *testing.T) {
	ctx := context.Background()
	r := &recordingRenderer{}
	p, clock, _ := newTestProcessor(t, r)
	p.SetService(svcOf())
	p.SetEndpointSlice(sliceOf("web-1", ep("10.1.0.1", "node-b")))
	p.step(ctx)
	r.take()
	clock.Advance(time.Second)
	p.SetEndpointSlice(sliceOf("web-1", ep("10.1.0.1", "node-b"), ep("10.1.0.2", "node-a")))
	p.step(ctx)
	calls := r.take()
	if len(calls) != 1 || calls[0].changes == nil || len(calls[0].changes.Upsert) != 1 {
		t.Fatalf("got %s", callsString(calls))
	}
	if got := addrs(calls[0].changes.Upsert[0].Ports[0].Cluster); got != "10.1.0.1 10.1.0.2" {
		t.Errorf("cluster %q", got)
	}
	t.Log("a slice relabelled to another service moves")
	clock.Advance(time.Second)
	moved := sliceOf("web-1", ep("10.1.0.1", "node-b"))
	moved.Labels[discoveryv1.LabelServiceName] = "other"
	p.SetEndpointSlice(moved)
	p.step(ctx)
	calls = r.take()
	if len(calls) != 1 || len(calls[0].changes.Upsert) != 1 || calls[0].changes.Upsert[0].Ports[0].HasEndpoints {
		t.Fatalf("got %s", callsString(calls))
	}
}

func TestProcessorNode(t *testing.T) {
	ctx := context.Background()
	r := &recordingRenderer{}
	p, clock, ev := newTestProcessor(t, r)
	p.SetService(svcOf())
	p.SetEndpointSlice(sliceOf("web-1", ep("10.1.0.1", "node-b", zoneHints("zone-a")), ep("10.1.0.2", "node-c", zoneHints("zone-b"))))
	p.step(ctx)
	calls := r.take()
	if len(calls) != 1 || calls[0].resync.Node.NodePortAddresses[0].String() != "198.18.0.1" {
		t.Fatalf("got %s", callsString(calls))
	}

	t.Log("a new zone rebuilds the services and sends the node")
	clock.Advance(time.Second)
	node := &corev1.Node{}
	node.Name = "node-a"
	node.ResourceVersion = "2"
	node.Labels = map[string]string{corev1.LabelTopologyZone: "zone-a"}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.0.1"}}
	p.SetNode(node)
	p.step(ctx)
	calls = r.take()
	if got := callsString(calls); got != "[update node +default/web]" {
		t.Fatalf("got %s", got)
	}
	if got := addrs(calls[0].changes.Upsert[0].Ports[0].Cluster); got != "10.1.0.1" {
		t.Errorf("cluster in zone-a: %q", got)
	}

	t.Log("a bad NAT loopback annotation is reported once and the node still served")
	for _, rv := range []string{"3", "3"} {
		clock.Advance(time.Second)
		n := node.DeepCopy()
		n.ResourceVersion = rv
		n.Annotations = map[string]string{"vcoil.io/nat-loopback": "nonsense"}
		p.SetNode(n)
		p.step(ctx)
	}
	if got := callsString(r.take()); got != "[]" {
		t.Errorf("got %s", got)
	}
	if !slices.Equal(ev.reasons, []string{ReasonNodeInvalid}) {
		t.Errorf("events %v", ev.reasons)
	}

	t.Log("other nodes are ignored")
	other := node.DeepCopy()
	other.Name = "node-b"
	p.SetNode(other)
	if !p.PendingSince().IsZero() {
		t.Error("another node made a change")
	}

	t.Log("another node's deletion is ignored too (vcoild with direct routing caches every Node)")
	p.DeleteNode(other.Name)
	if !p.PendingSince().IsZero() {
		t.Error("another node's deletion made a change")
	}

	t.Log("this node's deletion empties the node model")
	clock.Advance(time.Second)
	p.DeleteNode(node.Name)
	p.step(ctx)
	calls = r.take()
	if len(calls) != 1 || calls[0].changes == nil || calls[0].changes.Node == nil || len(calls[0].changes.Node.NodePortAddresses) != 0 {
		t.Errorf("got %s", callsString(calls))
	}
}

func TestProcessorInvalidService(t *testing.T) {
	ctx := context.Background()
	r := &recordingRenderer{}
	p, clock, ev := newTestProcessor(t, r)
	p.SetService(svcOf())
	p.step(ctx)
	r.take()

	bad := svcOf(func(s *corev1.Service) { s.Spec.Ports[0].Protocol = "ICMP"; s.ResourceVersion = "2" })
	for range 2 {
		clock.Advance(time.Second)
		p.SetService(bad)
		p.step(ctx)
	}
	if got := callsString(r.take()); got != "[update -default/web]" {
		t.Errorf("got %s", got)
	}
	clock.Advance(time.Second)
	bad = bad.DeepCopy()
	bad.ResourceVersion = "3"
	p.SetService(bad)
	p.step(ctx)
	if !slices.Equal(ev.reasons, []string{ReasonServiceInvalid, ReasonServiceInvalid}) {
		t.Errorf("events %v, want one per resourceVersion", ev.reasons)
	}
}

func TestProcessorRendererFailure(t *testing.T) {
	ctx := context.Background()
	good, bad := &recordingRenderer{}, &recordingRenderer{}
	p, clock, _ := newTestProcessor(t, good, bad)
	p.SetService(svcOf(named("a")))
	p.step(ctx)
	good.take()
	bad.take()

	bad.fail = 2
	start := clock.now
	clock.Advance(time.Second)
	p.SetService(svcOf(named("b")))
	next := p.step(ctx)
	if got := callsString(good.take()) + callsString(bad.take()); got != "[update +default/b][update +default/b]" {
		t.Fatalf("got %s", got)
	}
	if p.RenderFailures() != 1 || !p.LastSync().Equal(start) || !p.PendingSince().Equal(clock.now) {
		t.Errorf("failures %d, last sync %v, pending since %v", p.RenderFailures(), p.LastSync(), p.PendingSince())
	}
	if want := clock.now.Add(time.Second); !next.Equal(want) {
		t.Errorf("retry at %v, want %v", next, want)
	}

	t.Log("the failed renderer gets no updates, only its resync when due; the other one goes on")
	clock.Advance(500 * time.Millisecond)
	p.SetService(svcOf(named("c")))
	clock.Advance(500 * time.Millisecond)
	next = p.step(ctx)
	if got := callsString(good.take()) + callsString(bad.take()); got != "[update +default/c][resync [default/a default/b default/c]]" {
		t.Fatalf("got %s", got)
	}
	if want := clock.now.Add(2 * time.Second); !next.Equal(want) {
		t.Errorf("second retry at %v, want %v (backoff doubles)", next, want)
	}
	clock.now = next
	p.step(ctx)
	if got := callsString(good.take()) + callsString(bad.take()); got != "[][resync [default/a default/b default/c]]" {
		t.Fatalf("got %s", got)
	}
	if !p.LastSync().Equal(clock.now) || !p.PendingSince().IsZero() {
		t.Errorf("after recovery: last sync %v, pending since %v", p.LastSync(), p.PendingSince())
	}
}

func TestProcessorBackoffIsBounded(t *testing.T) {
	ctx := context.Background()
	bad := &recordingRenderer{fail: 100}
	p, clock, _ := newTestProcessor(t, bad)
	var next time.Time
	for range 10 {
		next = p.step(ctx)
		clock.now = next
	}
	if got := next.Sub(p.lastRound); got != 30*time.Second {
		t.Errorf("backoff %v, want the sync period", got)
	}
	select {
	case <-p.Synced():
		t.Error("synced although every sync failed")
	default:
	}
}

// TestProcessorRun runs the loop with a real clock and short periods.
func TestProcessorRun(t *testing.T) {
	r := &recordingRenderer{}
	p, err := New(Options{NodeName: "node-a", Renderers: []service.Renderer{r}, MinSyncPeriod: 10 * time.Millisecond, SyncPeriod: 300 * time.Millisecond, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	p.SetService(svcOf(named("a")))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	<-p.Synced()
	var seen []call
	wait := func(what string, ok func(call) bool) {
		t.Helper()
		poll.Eventually(t, 5*time.Second, func() error {
			seen = append(seen, r.take()...)
			if slices.ContainsFunc(seen, ok) {
				seen = nil
				return nil
			}
			return fmt.Errorf("no %s in %s", what, callsString(seen))
		})
	}
	wait("first resync", func(c call) bool { return c.resync != nil && len(c.resync.Services) == 1 })
	p.SetService(svcOf(named("b")))
	wait("update", func(c call) bool { return c.changes != nil && len(c.changes.Upsert) == 1 })
	wait("periodic resync", func(c call) bool { return c.resync != nil && len(c.resync.Services) == 2 })
}

// A requested resync is the next round, at once, for every renderer, even
// within the min sync period and long before the periodic one; pending
// changes go with it, and the periodic resync counts from it.
func TestRequestResyncResyncsEveryRendererAtTheNextRound(t *testing.T) {
	ctx := context.Background()
	a, b := &recordingRenderer{}, &recordingRenderer{}
	p, clock, _ := newTestProcessor(t, a, b)
	p.SetService(svcOf(named("a")))
	p.step(ctx)
	a.take()
	b.take()

	clock.Advance(100 * time.Millisecond)
	p.SetService(svcOf(named("b")))
	if calls := a.take(); len(calls) != 0 {
		t.Fatalf("calls before the step: %s", callsString(calls))
	}
	if next := p.step(ctx); !next.Equal(clock.now.Add(900 * time.Millisecond)) {
		t.Fatalf("without a request the change waits for the min sync period; next round at %v", next)
	}
	if calls := a.take(); len(calls) != 0 {
		t.Fatalf("a round within the min sync period: %s", callsString(calls))
	}
	// Two requests before the round make one resync.
	p.RequestResync()
	p.RequestResync()
	select {
	case <-p.kick:
	default:
		t.Fatal("RequestResync did not wake the loop")
	}
	next := p.step(ctx)
	for name, r := range map[string]*recordingRenderer{"first": a, "second": b} {
		if got := callsString(r.take()); got != "[resync [default/a default/b]]" {
			t.Fatalf("%s renderer after RequestResync: %s", name, got)
		}
	}
	if !next.Equal(clock.now.Add(30 * time.Second)) {
		t.Errorf("next round at %v, want a sync period after the requested resync", next)
	}
	clock.Advance(time.Second)
	p.step(ctx)
	if calls := a.take(); len(calls) != 0 {
		t.Fatalf("a second round after one request: %s", callsString(calls))
	}
}

// RequestResync from other goroutines reaches a running loop promptly.
func TestRequestResyncWhileRunning(t *testing.T) {
	r := &recordingRenderer{}
	p, err := New(Options{NodeName: "node-a", Renderers: []service.Renderer{r}, MinSyncPeriod: time.Second, SyncPeriod: time.Hour, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	<-p.Synced()
	poll.Eventually(t, 5*time.Second, func() error {
		if n := len(r.take()); n != 1 {
			return fmt.Errorf("%d calls, want the first resync", n)
		}
		return nil
	})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(p.RequestResync)
	}
	wg.Wait()
	start := time.Now()
	poll.Eventually(t, 5*time.Second, func() error {
		for _, c := range r.take() {
			if c.resync != nil {
				return nil
			}
		}
		return errors.New("no resync yet")
	})
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("the requested resync took %v (the sync period is an hour)", d)
	}
}
