// Package poll waits for a condition with a deadline: the one polling loop
// of vcoil's tests, the end-to-end suite and the lab. A condition says why it
// does not hold yet by returning an error, and that last error is what the
// caller sees when time runs out.
//
// It does not retry operations on a growing schedule (daemons retry with
// wait.Backoff) and it does not wait for channels: a test that waits for a
// goroutine selects on its channel.
package poll

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// Interval is the pause between two calls of Eventually's condition: short,
// since the conditions tests wait for are cheap and usually hold soon.
const Interval = 20 * time.Millisecond

// Until calls cond until it returns nil, pausing interval between calls, for
// at most timeout and never after ctx ends. cond gets a context that ends
// with the deadline, so that a call in flight is bounded too. cond is called
// at least once. When it returns an error wrapped by Stop, Until returns that
// error at once. Otherwise it returns an error that names the timeout, or the
// end of ctx, and wraps cond's last error.
func Until(ctx context.Context, timeout, interval time.Duration, cond func(context.Context) error) error {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pause := time.NewTimer(interval)
	defer pause.Stop()
	for {
		last := cond(ctx)
		if last == nil {
			return nil
		}
		if s, ok := errors.AsType[stopError](last); ok {
			return s.err
		}
		pause.Reset(interval)
		select {
		case <-ctx.Done():
			if err := parent.Err(); err != nil {
				return fmt.Errorf("gave up waiting (%w): %w", err, last)
			}
			return fmt.Errorf("not within %s: %w", timeout, last)
		case <-pause.C:
		}
	}
}

// Stop marks cond's error as final: Until returns err without calling cond
// again. It is for conditions that can no longer come true, such as a
// process that exited while it was waited for.
func Stop(err error) error {
	return stopError{err}
}

type stopError struct{ err error }

func (s stopError) Error() string { return s.err.Error() }
func (s stopError) Unwrap() error { return s.err }

// Eventually calls cond every Interval until it returns nil and fails the
// test, naming cond's last error, if timeout passes first. Tests use it
// instead of sleeping for something to settle. Only timeout bounds it, not
// the test's context, which ends before cleanups run: a cleanup can wait for
// what it removes.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	if err := Until(context.Background(), timeout, Interval, func(context.Context) error { return cond() }); err != nil {
		t.Fatal(err)
	}
}
