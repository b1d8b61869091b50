package processor

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vcoil/vcoil/v2/pkg/nodestate"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// slowRenderer is a recordingRenderer whose calls take d on the clock.
type slowRenderer struct {
	*recordingRenderer
	clock *fakeClock
	d     time.Duration
}

func (r slowRenderer) Resync(ctx context.Context, s *service.State) error {
	r.clock.Advance(r.d)
	return r.recordingRenderer.Resync(ctx, s)
}

func (r slowRenderer) Update(ctx context.Context, c *service.Changes) error {
	r.clock.Advance(r.d)
	return r.recordingRenderer.Update(ctx, c)
}

func servicesState(t *testing.T, p *Processor) *nodestate.Services {
	t.Helper()
	var s nodestate.State
	if err := p.StateSource().Fill(context.Background(), &s); err != nil {
		t.Fatal(err)
	}
	if s.Services == nil {
		t.Fatal("no services section")
	}
	return s.Services
}

func frontendLines(fs []nodestate.Frontend) string {
	var out []string
	for _, f := range fs {
		var bs []string
		for _, b := range f.Backends {
			bs = append(bs, fmt.Sprintf("%v:%d", b.Address, b.Port))
		}
		out = append(out, fmt.Sprintf("%s %s/%d %s %s [%s]%s", f.Address, f.Protocol, f.Port, f.Kind, f.Service, strings.Join(bs, " "), f.NoBackends))
	}
	return strings.Join(out, "; ")
}

// TestStateSourceShowsWhatTheDataplaneRendererLastApplied: the services
// section holds the renderer's name, the frontends of the model its last
// successful call applied (a failed call changes them not), the end,
// duration and error of its calls on the processor's clock, and the
// invalid Services with the reason of their Event.
func TestStateSourceShowsWhatTheDataplaneRendererLastApplied(t *testing.T) {
	ctx := context.Background()
	inner := &recordingRenderer{}
	rd := NewRendered(nil, service.Rendering{Name: "nftables"})
	p, clock, _ := newTestProcessor(t, rd)
	rd.r = slowRenderer{inner, clock, 250 * time.Millisecond}
	rd.clock = clock.Now

	if got := servicesState(t, p); got.Renderer != "nftables" || got.Sync != (nodestate.Sync{}) || len(got.Frontends) != 0 {
		t.Errorf("before the first sync: %+v, want the renderer's name only", got)
	}
	p.SetService(svcOf(nodePort))
	p.SetEndpointSlice(sliceOf("web-1", ep("10.64.1.5", "node-b")))
	start := clock.now
	p.step(ctx)
	got := servicesState(t, p)
	firstEnd := start.Add(250 * time.Millisecond)
	if want := (nodestate.Sync{Last: firstEnd, Duration: 0.25, Attempted: firstEnd}); got.Sync != want {
		t.Errorf("after the first resync: sync %+v, want %+v", got.Sync, want)
	}
	want := "10.96.0.10 TCP/80 ClusterIP default/web [10.64.1.5:8080]; 198.18.0.1 TCP/30000 NodePort default/web [10.64.1.5:8080]"
	if l := frontendLines(got.Frontends); l != want {
		t.Errorf("after the first resync: frontends %s, want %s", l, want)
	}

	// A failed Update: the frontends stay those applied, the error shows.
	inner.fail = 1
	clock.Advance(time.Second)
	p.DeleteEndpointSlice("default", "web-1")
	p.step(ctx)
	got = servicesState(t, p)
	failedAt := clock.now
	if got.Sync.Last != firstEnd || got.Sync.Attempted != failedAt || got.Sync.Errors != 1 || !strings.Contains(got.Sync.Error, "renderer is broken") {
		t.Errorf("after a failed update: sync %+v, want the first sync, an attempt at %v and its error", got.Sync, failedAt)
	}
	if l := frontendLines(got.Frontends); l != want {
		t.Errorf("after a failed update: frontends %s, want those applied before: %s", l, want)
	}

	// The retry (a Resync) succeeds: the frontends reject, the error is gone.
	clock.Advance(time.Second)
	p.step(ctx)
	got = servicesState(t, p)
	if got.Sync.Last != clock.now || got.Sync.Attempted != clock.now || got.Sync.Error != "" || got.Sync.Errors != 1 {
		t.Errorf("after the retry: sync %+v, want a success at %v and the one error counted", got.Sync, clock.now)
	}
	want = "10.96.0.10 TCP/80 ClusterIP default/web []reject; 198.18.0.1 TCP/30000 NodePort default/web []reject"
	if l := frontendLines(got.Frontends); l != want {
		t.Errorf("after the retry: frontends %s, want %s", l, want)
	}

	// An Update that deletes the Service as invalid: no frontend, and the
	// Service is listed as rejected with Build's reason.
	clock.Advance(time.Second)
	p.SetService(svcOf(func(s *corev1.Service) { s.Spec.Ports[0].Protocol = "ICMP" }))
	p.step(ctx)
	got = servicesState(t, p)
	if len(got.Frontends) != 0 {
		t.Errorf("after the Service became invalid: frontends %s, want none", frontendLines(got.Frontends))
	}
	if len(got.Rejected) != 1 || got.Rejected[0].Service != "default/web" || !strings.Contains(got.Rejected[0].Reason, "ICMP") {
		t.Errorf("rejected %+v, want default/web with the protocol as reason", got.Rejected)
	}
	if calls := callsString(inner.take()); calls != "[resync [default/web] update +default/web resync [default/web] update -default/web]" {
		t.Errorf("calls %s", calls)
	}
}
