package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
)

// Pods that vanish without a DEL (a runtime that never calls GC) are
// released by the sweep once their network namespace has been seen gone
// on two sweeps at least the grace apart; a pod whose namespace exists is
// never released, however long it lives.
func TestTheSweepReleasesPodsWhoseNetnsIsGoneAfterTheGraceOnly(t *testing.T) {
	ensureNode(t, "node-fc")
	dp := newFakeDataplane()
	n := startNode(t, "node-fc", t.TempDir(), dp)
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	n.srv.now = func() time.Time { return clock }
	dir := t.TempDir()
	netns := map[string]string{}
	for _, id := range []string{"live0001", "gone0001"} {
		netns[id] = filepath.Join(dir, "cni-"+id)
		if err := os.WriteFile(netns[id], nil, 0o600); err != nil {
			t.Fatal(err)
		}
		args := n.args(id, "plain")
		args.Netns = netns[id]
		if _, err := n.srv.Add(context.Background(), args); err != nil {
			t.Fatal(err)
		}
	}
	inUse := addrsInUse(n)
	if err := os.Remove(netns["gone0001"]); err != nil {
		t.Fatal(err)
	}
	drainEvents(n)
	const grace = 2 * time.Minute
	alive := func(id string) bool {
		_, found, err := n.srv.store.Get(id, "eth0")
		if err != nil {
			t.Fatal(err)
		}
		_, wired := dp.pods[dataplane.PodKey{ContainerID: id, IfName: "eth0"}]
		if found != wired {
			t.Fatalf("%s: recorded %v, wired %v", id, found, wired)
		}
		return found
	}

	n.srv.Sweep(context.Background(), grace) // first seen gone
	clock = clock.Add(grace - time.Second)
	n.srv.Sweep(context.Background(), grace)
	if !alive("gone0001") || !alive("live0001") {
		t.Fatal("a pod was released before the grace had passed")
	}
	clock = clock.Add(time.Second)
	n.srv.Sweep(context.Background(), grace)
	if alive("gone0001") {
		t.Fatal("the pod whose netns is gone was not released after the grace")
	}
	if got := addrsInUse(n); got != inUse-1 {
		t.Fatalf("%d addresses in use after the sweep, want %d", got, inUse-1)
	}
	if evs := strings.Join(drainEvents(n), "\n"); !strings.Contains(evs, "plain/pod-gone0001") || !strings.Contains(evs, netns["gone0001"]) {
		t.Fatalf("no Event names the released pod and its netns:\n%s", evs)
	}
	for i := 0; i < 5; i++ {
		clock = clock.Add(time.Hour)
		n.srv.Sweep(context.Background(), grace)
	}
	if !alive("live0001") {
		t.Fatal("the sweep released a pod whose netns exists")
	}
	// The runtime's late DEL of the swept pod finds nothing and succeeds.
	args := n.args("gone0001", "plain")
	args.Netns = netns["gone0001"]
	if _, err := n.srv.Del(context.Background(), args); err != nil {
		t.Fatalf("DEL after the sweep: %v", err)
	}
}

// A netns that reappears before the grace ends (seen gone once, then
// present) starts the grace again: only two sightings of its absence, the
// grace apart, release a pod.
func TestANetnsSeenAgainRestartsTheGrace(t *testing.T) {
	ensureNode(t, "node-fc")
	dp := newFakeDataplane()
	n := startNode(t, "node-fc", t.TempDir(), dp)
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	n.srv.now = func() time.Time { return clock }
	ns := filepath.Join(t.TempDir(), "cni-flap")
	if err := os.WriteFile(ns, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	args := n.args("flap0001", "plain")
	args.Netns = ns
	if _, err := n.srv.Add(context.Background(), args); err != nil {
		t.Fatal(err)
	}
	const grace = time.Minute
	_ = os.Remove(ns)
	n.srv.Sweep(context.Background(), grace)
	clock = clock.Add(grace / 2)
	if err := os.WriteFile(ns, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	n.srv.Sweep(context.Background(), grace)
	_ = os.Remove(ns)
	clock = clock.Add(grace / 2)
	n.srv.Sweep(context.Background(), grace) // seen gone again: the grace starts here
	clock = clock.Add(grace / 2)
	n.srv.Sweep(context.Background(), grace)
	if _, found, _ := n.srv.store.Get("flap0001", "eth0"); !found {
		t.Fatal("released before a whole grace of absence")
	}
	clock = clock.Add(grace / 2)
	n.srv.Sweep(context.Background(), grace)
	if _, found, _ := n.srv.store.Get("flap0001", "eth0"); found {
		t.Fatal("not released after a whole grace of absence")
	}
}
