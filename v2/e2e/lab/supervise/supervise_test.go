package supervise

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a log that the test reads while Run writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A program that dies is started again, with a growing delay, until the
// context ends.
func TestRunRestartsAProgramThatExits(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	ctx, cancel := context.WithCancel(context.Background())
	var log syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"sh", "-c", "echo run >> " + count + "; exit 3"},
			Options{Delay: 10 * time.Millisecond, MaxDelay: 40 * time.Millisecond, MinUptime: time.Second, StopTimeout: time.Second}, &log)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(count)
		if strings.Count(string(b), "run") >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the program ran %d times in 10 s, want 4; log:\n%s", strings.Count(string(b), "run"), log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	l := log.String()
	if !strings.Contains(l, "exit status 3; restarting in 10ms") || !strings.Contains(l, "restarting in 40ms") {
		t.Errorf("the log does not show the exits and the back-off:\n%s", l)
	}
}

// Ending the context stops a running program with SIGTERM.
func TestRunStopsTheProgram(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	ctx, cancel := context.WithCancel(context.Background())
	var log syncBuffer
	done := make(chan error, 1)
	opts := DefaultOptions
	opts.PidFile = filepath.Join(dir, "supervised.pid")
	go func() {
		done <- Run(ctx, []string{"sh", "-c", "echo $$ > " + pidFile + "; exec sleep 60"}, opts, &log)
	}()
	var pid string
	for i := 0; i < 500 && pid == ""; i++ {
		b, _ := os.ReadFile(pidFile)
		pid = strings.TrimSpace(string(b))
		time.Sleep(10 * time.Millisecond)
	}
	if pid == "" {
		t.Fatal("the program did not start")
	}
	if b, _ := os.ReadFile(opts.PidFile); strings.TrimSpace(string(b)) != pid {
		t.Errorf("PidFile holds %q, want the program's PID %s", b, pid)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after the context ended")
	}
	if _, err := os.Stat("/proc/" + pid); err == nil {
		t.Errorf("the program (pid %s) still runs after Run returned", pid)
	}
	if !strings.Contains(log.String(), "stopped sh (pid "+pid+")") {
		t.Errorf("log:\n%s", log.String())
	}
}

// A program that cannot start at all is an error at once.
func TestRunFailsForAMissingProgram(t *testing.T) {
	err := Run(context.Background(), []string{filepath.Join(t.TempDir(), "nothing")}, DefaultOptions, &syncBuffer{})
	if err == nil || !strings.Contains(err.Error(), "nothing") {
		t.Fatalf("Run = %v, want an error naming the program", err)
	}
}

// A program whose liveness check keeps failing is killed and started
// again; a passing check leaves it alone.
func TestRunKillsAProgramWhoseLivenessCheckFails(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	healthy := filepath.Join(dir, "healthy")
	if err := os.WriteFile(healthy, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var log syncBuffer
	done := make(chan error, 1)
	opts := Options{Delay: 10 * time.Millisecond, MaxDelay: 10 * time.Millisecond, MinUptime: time.Second, StopTimeout: time.Second,
		CheckInterval: 20 * time.Millisecond, CheckGrace: 20 * time.Millisecond, CheckFailures: 3,
		Check: func(context.Context) error {
			_, err := os.Stat(healthy)
			return err
		}}
	go func() {
		done <- Run(ctx, []string{"sh", "-c", "echo run >> " + count + "; exec sleep 60"}, opts, &log)
	}()
	runs := func() int {
		b, _ := os.ReadFile(count)
		return strings.Count(string(b), "run")
	}
	time.Sleep(300 * time.Millisecond)
	if n := runs(); n != 1 {
		t.Fatalf("a healthy program ran %d times, want once; log:\n%s", n, log.String())
	}
	if err := os.Remove(healthy); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for runs() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("an unhealthy program was not started again; log:\n%s", log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if l := log.String(); !strings.Contains(l, "failed (3 of 3)") || !strings.Contains(l, "its liveness check failed 3 times in a row") {
		t.Errorf("the log does not show the failed checks:\n%s", l)
	}
}
