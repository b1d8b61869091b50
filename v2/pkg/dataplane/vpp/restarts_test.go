package vpp

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

	"github.com/vcoil/vcoil/v2/internal/poll"
)

// announcingVPP is a dataplane that only announces: new incarnations and
// connection events, as the driver does.
type announcingVPP struct {
	Dataplane
	resynced chan Incarnation
	events   chan ConnectionEvent
}

func (a announcingVPP) Resynced() <-chan Incarnation             { return a.resynced }
func (a announcingVPP) ConnectionEvents() <-chan ConnectionEvent { return a.events }

// nodeEvents records the Events as "type reason: note".
type nodeEvents struct {
	mu  sync.Mutex
	got []string
}

func (n *nodeEvents) Normal(reason, _, note string)  { n.add("Normal", reason, note) }
func (n *nodeEvents) Warning(reason, _, note string) { n.add("Warning", reason, note) }
func (n *nodeEvents) add(typ, reason, note string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.got = append(n.got, typ+" "+reason+": "+note)
}

func (n *nodeEvents) list() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.got)
}

// A new incarnation reaches every subscriber (the latest only, for one
// that lags) and then resyncs each registered part, whose failure becomes
// a Warning Event on the Node; the connection's events become Events too.
func TestRestartsFanOutEachNewIncarnation(t *testing.T) {
	dp := announcingVPP{resynced: make(chan Incarnation), events: make(chan ConnectionEvent)}
	events := &nodeEvents{}
	r := NewRestarts(dp, events, testr.New(t))
	services, other := r.Subscribe(), r.Subscribe()
	var mu sync.Mutex
	resyncs := 0
	fail := errors.New("VPP refused the ACL")
	r.OnRestart(Resync{What: "network policies", Retry: "the next policy change or pod ADD retries", Do: func(context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		resyncs++
		if resyncs == 2 {
			return fail
		}
		return nil
	}})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- r.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start = %v", err)
		}
	}()

	dp.events <- ConnectionEvent{Warning: true, Reason: ReasonRestarted, Note: "VPP restarted"}
	dp.events <- ConnectionEvent{Reason: ReasonResynced, Note: "resynced"}
	dp.resynced <- 2
	if inc := <-services.Resynced(); inc != 2 {
		t.Fatalf("the service proxy got incarnation %d, want 2", inc)
	}
	// The second subscriber lags: of 2 and 3 it finds 3.
	dp.resynced <- 3
	poll.Eventually(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if resyncs != 2 {
			return fmt.Errorf("%d resyncs, want 2", resyncs)
		}
		return nil
	})
	if inc := <-other.Resynced(); inc != 3 {
		t.Fatalf("the lagging subscriber got incarnation %d, want the latest, 3", inc)
	}
	if inc := <-services.Resynced(); inc != 3 {
		t.Fatalf("the service proxy got incarnation %d, want 3", inc)
	}
	want := []string{
		"Warning " + ReasonRestarted + ": VPP restarted",
		"Normal " + ReasonResynced + ": resynced",
		"Warning " + ReasonResyncFailed + ": network policies not resynced into VPP (incarnation 3): VPP refused the ACL; the next policy change or pod ADD retries",
	}
	poll.Eventually(t, 10*time.Second, func() error {
		if got := events.list(); !slices.Equal(got, want) {
			return fmt.Errorf("Events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		return nil
	})
	// The subscribers' dataplane is the dataplane in all but Resynced.
	if services.(subscribed).Dataplane != Dataplane(dp) {
		t.Error("a subscriber's dataplane is not the dataplane")
	}
}
