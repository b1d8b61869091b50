// Package supervise keeps one program running, as a node's service manager
// keeps VPP running: started again whenever it exits, until told to stop.
package supervise

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Options tune the restarts.
type Options struct {
	// Delay before a restart; it doubles while the program dies within
	// MinUptime of its start, up to MaxDelay, and starts over after a run
	// that lasted longer.
	Delay, MaxDelay, MinUptime time.Duration
	// StopTimeout is how long a stopping program gets after SIGTERM before
	// it is killed.
	StopTimeout time.Duration
	// PidFile, when set, receives the PID of each start of the program
	// (a test that kills the program reads it).
	PidFile string
	// Check, when set, is a liveness check run every CheckInterval while
	// the program runs, from CheckGrace after its start: after
	// CheckFailures failures in a row the program is killed (and started
	// again), as a service manager's watchdog kills a hung service.
	Check                     func(context.Context) error
	CheckInterval, CheckGrace time.Duration
	CheckFailures             int
}

// DefaultOptions restart at once (0.5 s), back off to 10 s for a program
// that keeps dying at start, and give it 5 s to stop.
var DefaultOptions = Options{Delay: 500 * time.Millisecond, MaxDelay: 10 * time.Second, MinUptime: 10 * time.Second, StopTimeout: 5 * time.Second}

// Run starts argv and starts it again each time it exits, logging each
// start and exit to log, until ctx ends; then it stops the program
// (SIGTERM, SIGKILL after StopTimeout) and returns. It fails only when argv
// cannot be started at all the first time.
func Run(ctx context.Context, argv []string, opts Options, log io.Writer) error {
	if len(argv) == 0 {
		return errors.New("supervise: no program")
	}
	delay := opts.Delay
	for starts := 1; ; starts++ {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		start := time.Now()
		if err := cmd.Start(); err != nil {
			if starts == 1 {
				return fmt.Errorf("start %s: %w", argv[0], err)
			}
			fmt.Fprintf(log, "supervise: start %d of %s failed: %v\n", starts, argv[0], err)
		} else {
			fmt.Fprintf(log, "supervise: started %s (start %d, pid %d)\n", argv[0], starts, cmd.Process.Pid)
			if opts.PidFile != "" {
				if err := os.WriteFile(opts.PidFile, []byte(fmt.Sprintf("%d\n", cmd.Process.Pid)), 0o644); err != nil {
					fmt.Fprintf(log, "supervise: write %s: %v\n", opts.PidFile, err)
				}
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			checkCtx, stopCheck := context.WithCancel(ctx)
			if opts.Check != nil {
				go watch(checkCtx, cmd, opts, log)
			}
			select {
			case err := <-done:
				stopCheck()
				fmt.Fprintf(log, "supervise: %s (pid %d) exited after %s: %v; restarting in %s\n", argv[0], cmd.Process.Pid, time.Since(start).Round(time.Millisecond), exitText(err), delay)
			case <-ctx.Done():
				stopCheck()
				stop(cmd, done, opts.StopTimeout)
				fmt.Fprintf(log, "supervise: stopped %s (pid %d)\n", argv[0], cmd.Process.Pid)
				return nil
			}
		}
		if time.Since(start) > opts.MinUptime {
			delay = opts.Delay
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil
		}
		delay = min(2*delay, opts.MaxDelay)
	}
}

func stop(cmd *exec.Cmd, done <-chan error, timeout time.Duration) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
	}
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// watch runs opts.Check until ctx ends and kills cmd after
// opts.CheckFailures failures in a row.
func watch(ctx context.Context, cmd *exec.Cmd, opts Options, log io.Writer) {
	select {
	case <-time.After(opts.CheckGrace):
	case <-ctx.Done():
		return
	}
	failed := 0
	t := time.NewTicker(opts.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
		err := opts.Check(ctx)
		if err == nil {
			failed = 0
			continue
		}
		if ctx.Err() != nil {
			return
		}
		failed++
		fmt.Fprintf(log, "supervise: liveness check of %s (pid %d) failed (%d of %d): %v\n", cmd.Path, cmd.Process.Pid, failed, opts.CheckFailures, err)
		if failed >= opts.CheckFailures {
			fmt.Fprintf(log, "supervise: killing %s (pid %d): its liveness check failed %d times in a row\n", cmd.Path, cmd.Process.Pid, failed)
			_ = cmd.Process.Kill()
			return
		}
	}
}
