package proxy

import (
	"math"
	"runtime/debug"
	"testing"
)

func TestLiftMemoryLimitDoublesAndReturnsTheLimit(t *testing.T) {
	was := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(was) })

	debug.SetMemoryLimit(120 << 20)
	if got := liftMemoryLimit(); got != 120<<20 {
		t.Errorf("limit to restore = %d, want %d", got, 120<<20)
	}
	if now := debug.SetMemoryLimit(-1); now != 240<<20 {
		t.Errorf("limit during the first sync = %d, want %d", now, 240<<20)
	}

	debug.SetMemoryLimit(math.MaxInt64)
	if got := liftMemoryLimit(); got != -1 {
		t.Errorf("without a limit: restore %d, want -1 (none)", got)
	}
	if now := debug.SetMemoryLimit(-1); now != math.MaxInt64 {
		t.Errorf("without a limit one was set: %d", now)
	}
}
