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
			select {
			case err := <-done:
				fmt.Fprintf(log, "supervise: %s (pid %d) exited after %s: %v; restarting in %s\n", argv[0], cmd.Process.Pid, time.Since(start).Round(time.Millisecond), exitText(err), delay)
			case <-ctx.Done():
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
