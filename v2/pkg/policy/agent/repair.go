package agent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Default bounds of the backoff between the resyncs that repair a failed
// render (Options.RetryMin, RetryMax).
const (
	DefaultRetryMin = time.Second
	DefaultRetryMax = time.Minute
)

// repair is the agent's answer to a failed render: the dataplane's rules
// are then not what the policies say (a pod may keep rules it should have
// lost, or a new pod has none), so a full resync is retried on a timer,
// backing off from min to max, until one succeeds. It does not wait for an
// unrelated change to come, which may never. Until then the agent is not
// ready.
type repair struct {
	min, max time.Duration
	kick     chan struct{} // a failure to repair, buffered: one pending is enough

	mu     sync.Mutex
	broken error // the failure being repaired, nil when none
}

func newRepair(lo, hi time.Duration) *repair {
	if lo <= 0 {
		lo = DefaultRetryMin
	}
	if hi < lo {
		hi = max(DefaultRetryMax, lo)
	}
	return &repair{min: lo, max: hi, kick: make(chan struct{}, 1)}
}

// failed records a failure and wakes the loop; it never blocks (renders
// call it under the feed's lock).
func (r *repair) failed(err error) {
	r.mu.Lock()
	r.broken = err
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *repair) repaired() {
	r.mu.Lock()
	r.broken = nil
	r.mu.Unlock()
}

func (r *repair) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.broken
}

// run resyncs with resync after each failure until ctx ends: after min,
// then doubling up to max while the resyncs fail.
func (r *repair) run(ctx context.Context, resync func(context.Context) error, log func(err error, retryIn time.Duration)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		}
		for delay := r.min; ; delay = min(2*delay, r.max) {
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			// The resync covers every failure before it.
			select {
			case <-r.kick:
			default:
			}
			err := resync(ctx)
			if err == nil {
				log(nil, 0)
				break
			}
			if ctx.Err() != nil {
				return
			}
			log(err, min(2*delay, r.max))
		}
	}
}

// Ready is a readiness check: the agent has done its first sync and the
// dataplane holds the rules of its last transaction (after a failed one,
// until a resync repaired it).
func (a *Agent) Ready(*http.Request) error {
	select {
	case <-a.synced:
	default:
		return errors.New("the NetworkPolicy cache has not synced yet")
	}
	if err := a.repair.err(); err != nil {
		return fmt.Errorf("the network policies are not all in the dataplane, a resync retries: %w", err)
	}
	return nil
}
