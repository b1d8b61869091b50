package memlimit

import (
	"math"
	"runtime"
	"testing"

	"github.com/go-logr/logr"
)

// fakeRuntime stands for debug.SetMemoryLimit and the live heap, so that
// the tests never change the test process's own limit.
type fakeRuntime struct {
	limit int64
	live  uint64
	sets  int
}

func (f *fakeRuntime) set(l int64) int64 {
	prev := f.limit
	if l >= 0 {
		f.limit = l
		f.sets++
	}
	return prev
}

func (f *fakeRuntime) readLive() uint64 { return f.live }

const mib = 1 << 20

func TestTheLimitFollowsTheLiveHeapAboveTheFloor(t *testing.T) {
	rt := &fakeRuntime{limit: 120 * mib}
	k := newKeeper(rt.set, rt.readLive, logr.Discard())
	if k.Floor() != 120*mib {
		t.Fatalf("floor %d, want GOMEMLIMIT's 120 MiB", k.Floor())
	}
	for _, step := range []struct {
		live uint64
		want int64
	}{
		{40 * mib, 120 * mib},  // far below: the configured limit
		{80 * mib, 120 * mib},  // 1.5 x 80 = 120: still the floor
		{100 * mib, 150 * mib}, // above two thirds: 1.5 x live
		{232 * mib, 348 * mib}, // the full-size cluster's heap: no thrashing under 120 MiB
		{50 * mib, 120 * mib},  // the cluster shrank: back to the floor
	} {
		rt.live = step.live
		k.Update()
		if rt.limit != step.want {
			t.Errorf("live %d MiB: limit %d MiB, want %d MiB", step.live/mib, rt.limit/mib, step.want/mib)
		}
	}
}

func TestBoostDoublesTheFloorUntilReleased(t *testing.T) {
	rt := &fakeRuntime{limit: 120 * mib, live: 60 * mib}
	k := newKeeper(rt.set, rt.readLive, logr.Discard())
	k.Update()
	release := k.Boost()
	if rt.limit != 240*mib {
		t.Errorf("boosted: limit %d MiB, want 240", rt.limit/mib)
	}
	second := k.Boost()
	rt.live = 200 * mib
	k.Update()
	if rt.limit != 300*mib {
		t.Errorf("boosted, live 200 MiB: limit %d MiB, want 300", rt.limit/mib)
	}
	release()
	release() // a second call changes nothing
	rt.live = 60 * mib
	k.Update()
	if rt.limit != 240*mib {
		t.Errorf("one boost of two released: limit %d MiB, want 240", rt.limit/mib)
	}
	second()
	if rt.limit != 120*mib {
		t.Errorf("all released: limit %d MiB, want the floor, 120", rt.limit/mib)
	}
}

func TestWithoutALimitTheKeeperSetsNone(t *testing.T) {
	rt := &fakeRuntime{limit: math.MaxInt64, live: 500 * mib}
	k := newKeeper(rt.set, rt.readLive, logr.Discard())
	k.Update()
	release := k.Boost()
	release()
	if rt.sets != 0 || rt.limit != math.MaxInt64 {
		t.Errorf("no GOMEMLIMIT: the keeper set a limit %d times (now %d)", rt.sets, rt.limit)
	}
}

// The runtime's live heap, as the keeper reads it, counts what is
// reachable.
func TestReadLiveCountsWhatIsReachable(t *testing.T) {
	runtime.GC()
	before := readLive()
	keep := make([][]byte, 64)
	for i := range keep {
		keep[i] = make([]byte, mib)
	}
	runtime.GC()
	after := readLive()
	runtime.KeepAlive(keep)
	if after < before+60*mib {
		t.Errorf("live heap %d MiB after keeping 64 MiB, %d MiB before", after/mib, before/mib)
	}
}
