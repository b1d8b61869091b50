package poll_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/internal/poll"
)

var errNotYet = errors.New("not yet")

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	err := poll.Until(t.Context(), 5*time.Second, time.Millisecond, func(context.Context) error {
		calls++
		if calls < 3 {
			return errNotYet
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("got %v after %d calls, want nil after 3", err, calls)
	}
}

func TestUntilNamesTheTimeoutAndWrapsTheLastError(t *testing.T) {
	calls := 0
	err := poll.Until(t.Context(), 50*time.Millisecond, 5*time.Millisecond, func(context.Context) error {
		calls++
		return fmt.Errorf("call %d: %w", calls, errNotYet)
	})
	if !errors.Is(err, errNotYet) {
		t.Fatalf("got %v, want it to wrap %v", err, errNotYet)
	}
	if want := fmt.Sprintf("not within 50ms: call %d: not yet", calls); err.Error() != want {
		t.Fatalf("got %q, want %q", err, want)
	}
}

func TestUntilCallsTheConditionWithTheDeadline(t *testing.T) {
	err := poll.Until(t.Context(), time.Minute, time.Millisecond, func(ctx context.Context) error {
		if d, ok := ctx.Deadline(); !ok || time.Until(d) > time.Minute {
			return poll.Stop(fmt.Errorf("deadline %v, %v", d, ok))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestUntilStopsWhenTheConditionSaysSo(t *testing.T) {
	exited := errors.New("the process exited")
	calls := 0
	err := poll.Until(t.Context(), time.Minute, time.Millisecond, func(context.Context) error {
		calls++
		return poll.Stop(exited)
	})
	if err != exited || calls != 1 {
		t.Fatalf("got %v after %d calls, want %v after 1", err, calls, exited)
	}
}

func TestUntilEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	calls := 0
	err := poll.Until(ctx, time.Minute, time.Millisecond, func(context.Context) error {
		if calls++; calls == 2 {
			cancel()
		}
		return errNotYet
	})
	if !errors.Is(err, context.Canceled) || !errors.Is(err, errNotYet) {
		t.Fatalf("got %v, want it to wrap %v and %v", err, context.Canceled, errNotYet)
	}
}

// recorder is a test that records a failure instead of stopping.
type recorder struct {
	testing.TB
	failure string
}

func (r *recorder) Fatal(args ...any) { r.failure = fmt.Sprint(args...) }

func TestEventuallyFailsTheTestNamingTheLastError(t *testing.T) {
	r := &recorder{TB: t}
	poll.Eventually(r, 30*time.Millisecond, func() error { return errors.New("the route is missing") })
	if !strings.Contains(r.failure, "not within 30ms: the route is missing") {
		t.Fatalf("failure %q does not name the timeout and the last error", r.failure)
	}
}

func TestEventuallyPassesOnceTheConditionHolds(t *testing.T) {
	r := &recorder{TB: t}
	calls := 0
	poll.Eventually(r, 5*time.Second, func() error {
		if calls++; calls < 3 {
			return errNotYet
		}
		return nil
	})
	if r.failure != "" || calls != 3 {
		t.Fatalf("failed (%q) or stopped after %d calls, want 3", r.failure, calls)
	}
}

func TestEventuallyWaitsInACleanup(t *testing.T) {
	t.Run("a test whose cleanup waits", func(t *testing.T) {
		t.Cleanup(func() {
			r := &recorder{TB: t}
			calls := 0
			poll.Eventually(r, 5*time.Second, func() error {
				if calls++; calls < 3 {
					return errNotYet
				}
				return nil
			})
			if r.failure != "" {
				t.Errorf("Eventually in a cleanup failed: %s", r.failure)
			}
		})
	})
}
