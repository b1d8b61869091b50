package daemon

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/checkpoint"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// A downgraded vcoild finds a checkpoint file of a newer format: recovery
// stops before it adopts, tears down or saves anything, and names the file.
func TestRecoverRefusesACheckpointOfANewerFormatAndChangesNothing(t *testing.T) {
	dir := t.TempDir()
	store, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Save(checkpoint.Entry{ContainerID: "old", IfName: "eth0", Pool: "default", Block: "default-0", Offset: 2,
		IPv4: netip.MustParseAddr("10.100.0.2")}); err != nil {
		t.Fatal(err)
	}
	// The newer vcoild's entry of pod "new", under the name today's code
	// gives that key.
	if err := store.Save(checkpoint.Entry{ContainerID: "new", IfName: "eth0", Block: "default-0", Offset: 3}); err != nil {
		t.Fatal(err)
	}
	var newerPath string
	all, _ := os.ReadDir(dir)
	for _, f := range all {
		if b, _ := os.ReadFile(filepath.Join(dir, f.Name())); bytes.Contains(b, []byte(`"containerID":"new"`)) {
			newerPath = filepath.Join(dir, f.Name())
		}
	}
	newer := []byte(`{"format":3,"containerID":"new","ifName":"eth0","block":"default-0","offset":3}`)
	if err := os.WriteFile(newerPath, newer, 0o600); err != nil {
		t.Fatal(err)
	}
	dp := newFakeDataplane()
	for _, id := range []string{"old", "new", "stranger"} {
		k := dataplane.PodKey{ContainerID: id, IfName: "eth0"}
		dp.pods[k] = dataplane.Pod{PodKey: k, IPv4: netip.MustParseAddr("10.100.0.9")}
	}
	srv := NewServer(Config{Dataplane: dp, Store: store, Log: testr.New(t)})
	_, err = srv.Recover(t.Context())
	var ne *formatversion.NewerError
	if !errors.As(err, &ne) || ne.Found != 3 || !strings.Contains(err.Error(), newerPath) {
		t.Fatalf("Recover = %v, want a refusal naming %s", err, newerPath)
	}
	if dp.teardowns != 0 || len(dp.pods) != 3 {
		t.Fatalf("Recover tore down %d pods (%d left), want none", dp.teardowns, len(dp.pods))
	}
	if got, _ := os.ReadFile(newerPath); !bytes.Equal(got, newer) {
		t.Fatalf("the newer file changed: %s", got)
	}
}

// The refusal reaches readiness and the log, and vcoild waits there
// instead of exiting into a restart loop.
func TestARefusedStartHoldsAndReportsItsReasonInReadiness(t *testing.T) {
	d := &Daemon{log: testr.New(t)}
	if err := d.Refused(); err != nil {
		t.Fatalf("Refused before any refusal = %v", err)
	}
	refusal := &formatversion.NewerError{Object: "checkpoint file /var/lib/vcoil/pods/x.json", Found: 3, Known: formatversion.Checkpoint}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- d.refuse(ctx, refusal) }()
	poll.Eventually(t, 5*time.Second, func() error {
		if err := d.Refused(); !errors.Is(err, formatversion.ErrNewer) {
			return errors.New("readiness does not report the refusal yet")
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("refuse returned %v before vcoild was stopped", err)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	if err := <-done; !errors.Is(err, formatversion.ErrNewer) {
		t.Fatalf("refuse at shutdown = %v, want the refusal", err)
	}
}
