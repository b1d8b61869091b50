// Package memlimit keeps vcoild's soft memory limit (GOMEMLIMIT) above
// what its heap holds live.
//
// The limit keeps the heap near its live size: by default Go lets the heap
// grow to twice what is live before it collects, and a node daemon's RSS
// then is twice its caches. But a fixed limit is sized for one cluster.
// vcoild caches every Service, EndpointSlice, PodEndpoint, NetworkPolicy
// and Namespace of the cluster, so its live heap grows with the cluster;
// once it passes the limit the collector runs back to back, taking up to
// half of the CPU (Go's limiter stops it there), and allocations wait on
// it. In a simulated cluster of 30,000 pods and 10,000 Services vcoild's
// heap held 232 MB against the DaemonSet's limit of 120 MiB.
//
// A Keeper makes the configured limit a floor: the limit is the larger of
// it and the live heap times a headroom (1.5, as GOGC=50 would give), read
// every few seconds from the runtime. Below the floor nothing changes;
// above it the heap grows half of what is live before a collection, never
// less. While something asks for more room for a burst (Boost: the service
// proxy's first sync, which allocates several times what it keeps), the
// floor doubles.
package memlimit

import (
	"context"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// Headroom is the limit over the live heap: the heap may grow by half of
// what is live before the collector must run.
const Headroom = 1.5

// DefaultInterval is how often the live heap is read.
const DefaultInterval = 5 * time.Second

// liveMetric is the runtime's live heap as of the last collection.
const liveMetric = "/gc/heap/live:bytes"

// Keeper owns the process's memory limit. Its methods are safe for
// concurrent use.
type Keeper struct {
	// set sets the limit and returns the previous one (debug.SetMemoryLimit);
	// live reads the live heap in bytes.
	set  func(int64) int64
	live func() uint64
	log  logr.Logger

	mu sync.Mutex
	// floor is the configured limit; 0 when none is set (the keeper then
	// does nothing).
	floor  int64
	boosts int
	// lastLive is the live heap last read.
	lastLive uint64
	// raised tells whether the limit is above the floor (for the log).
	raised bool
}

// New returns a keeper of the process's limit as GOMEMLIMIT set it; with
// no limit set it does nothing.
func New(log logr.Logger) *Keeper {
	return newKeeper(debug.SetMemoryLimit, readLive, log)
}

func newKeeper(set func(int64) int64, live func() uint64, log logr.Logger) *Keeper {
	k := &Keeper{set: set, live: live, log: log}
	if l := set(-1); l > 0 && l < math.MaxInt64 {
		k.floor = l
	}
	return k
}

func readLive() uint64 {
	s := []metrics.Sample{{Name: liveMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// Floor is the configured limit, 0 when none is set.
func (k *Keeper) Floor() int64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.floor
}

// Boost doubles the floor until release is called: for a burst that
// allocates several times what it keeps. release may be called more than
// once.
func (k *Keeper) Boost() (release func()) {
	k.mu.Lock()
	k.boosts++
	k.apply()
	k.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			k.mu.Lock()
			k.boosts--
			k.apply()
			k.mu.Unlock()
		})
	}
}

// NeedLeaderElection is false: every vcoild keeps its own memory.
func (k *Keeper) NeedLeaderElection() bool { return false }

// Start reads the live heap every DefaultInterval until ctx ends.
func (k *Keeper) Start(ctx context.Context) error {
	if k.Floor() == 0 {
		k.log.V(1).Info("no memory limit set (GOMEMLIMIT): nothing to keep")
		return nil
	}
	t := time.NewTicker(DefaultInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			k.Update()
		}
	}
}

// Update reads the live heap and sets the limit from it.
func (k *Keeper) Update() {
	live := k.live()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lastLive = live
	k.apply()
}

// apply sets the limit from the floor, the boosts and the last live heap;
// k.mu is held.
func (k *Keeper) apply() {
	if k.floor == 0 {
		return
	}
	floor := k.floor
	if k.boosts > 0 {
		floor *= 2
	}
	want := max(floor, int64(float64(k.lastLive)*Headroom))
	if prev := k.set(want); prev == want {
		return
	}
	raised := want > floor
	if raised != k.raised {
		if raised {
			k.log.Info("the live heap is above two thirds of the memory limit (GOMEMLIMIT): the limit follows it, at 1.5 times the live heap; raise GOMEMLIMIT to this cluster's size to keep it fixed",
				"liveMiB", k.lastLive>>20, "limitMiB", want>>20, "gomemlimitMiB", k.floor>>20)
		} else {
			k.log.Info("the memory limit is back at GOMEMLIMIT", "liveMiB", k.lastLive>>20, "limitMiB", want>>20)
		}
		k.raised = raised
	}
}
