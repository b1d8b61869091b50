package vpp

import (
	"context"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
)

// NodeEvents records Events on the node's Node (nodeevents.Recorder).
type NodeEvents interface {
	Normal(reason, action, note string)
	Warning(reason, action, note string)
}

// Resync is a part that must render again into a new VPP incarnation,
// called by Restarts in the order added, one after the other.
type Resync struct {
	// What names the part in the log and in the Warning Event of a
	// failure ("network policies").
	What string
	// Retry tells, in that Event, what retries after a failure.
	Retry string
	Do    func(context.Context) error
}

// Restarts hands the dataplane's announcements of a new incarnation to
// every part that renders into VPP, and records the connection's events on
// the Node. The dataplane announces a new incarnation on one channel
// (Resynced, for one reader) while several parts need it: Restarts is that
// one reader. Subscribe and OnRestart are for before Start.
type Restarts struct {
	dp      Dataplane
	events  NodeEvents
	log     logr.Logger
	mu      sync.Mutex
	subs    []chan Incarnation
	resyncs []Resync
}

// NewRestarts returns the fan-out of dp's new incarnations; events records
// the connection's events.
func NewRestarts(dp Dataplane, events NodeEvents, log logr.Logger) *Restarts {
	return &Restarts{dp: dp, events: events, log: log}
}

// Subscribe returns dp with a Resynced channel of its own, for a part that
// reads the new incarnations itself (the service proxy). A reader that
// lags finds only the latest incarnation: the earlier ones are gone with
// their VPP anyway.
func (r *Restarts) Subscribe() Dataplane {
	ch := make(chan Incarnation, 1)
	r.mu.Lock()
	r.subs = append(r.subs, ch)
	r.mu.Unlock()
	return subscribed{Dataplane: r.dp, ch: ch}
}

// OnRestart adds a part that Restarts resyncs itself after each new
// incarnation, after the subscribers got it. A failure is logged and
// recorded as a Warning Event (ReasonResyncFailed); the part retries on
// its own (Resync.Retry says how: the policy agent with backoff).
func (r *Restarts) OnRestart(s Resync) {
	r.mu.Lock()
	r.resyncs = append(r.resyncs, s)
	r.mu.Unlock()
}

// Start fans out until ctx ends.
func (r *Restarts) Start(ctx context.Context) error {
	r.mu.Lock()
	subs, resyncs := r.subs, r.resyncs
	r.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-r.dp.ConnectionEvents():
			if e.Warning {
				r.events.Warning(e.Reason, "Resync", e.Note)
			} else {
				r.events.Normal(e.Reason, "Resync", e.Note)
			}
		case inc := <-r.dp.Resynced():
			for _, ch := range subs {
				// Only the latest matters: replace one not read yet.
				select {
				case <-ch:
				default:
				}
				ch <- inc
			}
			for _, s := range resyncs {
				r.log.Info("VPP synced a new incarnation; resyncing the "+s.What, "incarnation", inc)
				if err := s.Do(ctx); err != nil {
					r.log.Error(err, "cannot resync the "+s.What+" after a VPP restart; "+s.Retry)
					r.events.Warning(ReasonResyncFailed, "Resync", fmt.Sprintf(
						"%s not resynced into VPP (incarnation %d): %v; %s", s.What, inc, err, s.Retry))
				}
			}
		}
	}
}

// subscribed is the dataplane with a subscriber's own channel of new
// incarnations.
type subscribed struct {
	Dataplane
	ch chan Incarnation
}

func (s subscribed) Resynced() <-chan Incarnation { return s.ch }
