package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"
)

// A runtime that never calls GC (containerd 1.6, CNI 1.0.0 conflists) and
// loses a DEL (a node reboot mid-teardown, a crash) leaves a pod's address
// allocated for good. The sweep releases the pod interfaces whose network
// namespace file is gone: the runtime removes it with the sandbox, and
// vcoild sees the same paths as the runtime (ADD refuses a netns it cannot
// stat). A path that exists means a live pod, whatever else is true, and
// an entry without a netns path is never swept.

// Sweep defaults (vcoild's --pod-sweep-interval and --pod-sweep-grace).
const (
	DefaultSweepInterval = time.Minute
	DefaultSweepGrace    = 2 * time.Minute
)

// ReasonVanishedPodReleased is the Normal Event on the Node naming a pod
// interface the sweep released.
const ReasonVanishedPodReleased = "VanishedPodReleased"

// goneSince is when each swept candidate's netns was first seen gone, by
// entry key or by file set aside.
type goneSince struct {
	mu    sync.Mutex
	first map[string]time.Time
}

// seenGone records a sighting of an absent netns at now and tells whether
// the first one was at least grace earlier.
func (g *goneSince) seenGone(k string, now time.Time, grace time.Duration) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	first, ok := g.first[k]
	if !ok {
		g.first[k] = now
		return false
	}
	return now.Sub(first) >= grace
}

// keep forgets every candidate not in seen: a netns seen again (or an
// entry released by a DEL) starts over.
func (g *goneSince) keep(seen map[string]bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k := range g.first {
		if !seen[k] {
			delete(g.first, k)
		}
	}
}

// netnsGone is true only when the netns path certainly does not exist;
// any other answer (it exists, it cannot be checked) keeps the pod.
func netnsGone(path string) bool {
	_, err := os.Lstat(path)
	return errors.Is(err, fs.ErrNotExist)
}

// Sweep releases, once, the pod interfaces whose netns has been seen gone
// for at least grace (see above), and the addresses held for checkpoint
// files set aside whose netns is gone likewise. An interface with an
// operation in flight is left for the next sweep, as GC leaves it.
func (s *Server) Sweep(ctx context.Context, grace time.Duration) {
	now := s.now()
	seen := map[string]bool{}
	// Files that cannot be read are Recover's, GC's and DEL's to report.
	entries, _ := s.store.Load()
	for _, e := range entries {
		k := key(e.ContainerID, e.IfName)
		if e.Netns == "" || !netnsGone(e.Netns) {
			continue
		}
		seen[k] = true
		if !s.gone.seenGone(k, now, grace) {
			continue
		}
		unlock, ok := s.keys.tryLock(k)
		if !ok {
			continue
		}
		// Read again under the lock: a DEL or a new ADD may have come first.
		cur, found, err := s.store.Get(e.ContainerID, e.IfName)
		if err == nil && found && cur.Netns == e.Netns && netnsGone(cur.Netns) {
			err = s.release(ctx, cur, true, "")
			if err == nil {
				delete(seen, k)
				pod := k
				if cur.Name != "" {
					pod = cur.Namespace + "/" + cur.Name + " (" + k + ")"
				}
				note := fmt.Sprintf("released %s of pod %s: its network namespace %s has been gone since %s without a DEL",
					addrList(cur.IPv4, cur.IPv6), pod, cur.Netns, now.Add(-grace).UTC().Format(time.RFC3339))
				s.events.Normal(ReasonVanishedPodReleased, "Sweep", note)
				s.log.Info("released a pod whose network namespace is gone", "containerID", cur.ContainerID, "ifname", cur.IfName, "netns", cur.Netns)
			}
		}
		unlock()
		if err != nil {
			s.log.Error(err, "cannot release a pod whose network namespace is gone; tried again at the next sweep", "containerID", e.ContainerID, "ifname", e.IfName)
		}
	}
	s.held.mu.Lock()
	var held []*heldFile
	for _, h := range s.held.byPath {
		held = append(held, h)
	}
	s.held.mu.Unlock()
	for _, h := range held {
		k := "file:" + h.path
		if h.entry.Netns == "" || !netnsGone(h.entry.Netns) {
			continue
		}
		seen[k] = true
		if !s.gone.seenGone(k, now, grace) {
			continue
		}
		unlock := func() {}
		if h.entry.ContainerID != "" && h.entry.IfName != "" {
			u, ok := s.keys.tryLock(key(h.entry.ContainerID, h.entry.IfName))
			if !ok {
				continue
			}
			unlock = u
		}
		s.releaseHeld(ctx, h)
		unlock()
		delete(seen, k)
		s.events.Normal(ReasonVanishedPodReleased, "Sweep", fmt.Sprintf("released the addresses held for checkpoint file %s: its network namespace %s is gone", h.path, h.entry.Netns))
	}
	s.gone.keep(seen)
}

// RunSweeper sweeps every interval until ctx ends.
func (s *Server) RunSweeper(ctx context.Context, interval, grace time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.Sweep(ctx, grace)
		}
	}
}
