package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"

	"github.com/vcoil/vcoil/v2/pkg/checkpoint"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/ipam"
)

// A checkpoint file that cannot be decoded (damaged on disk) is no reason
// to stop: no vcoild could read it, so waiting helps nobody. It is set aside
// (<name>.json.corrupt) and what it still says decides what is kept out of
// use until its pod is gone:
//
//   - its block and offset, or its addresses, hold that address;
//   - its block alone holds every free address of the block (neither given
//     to another pod nor released);
//   - nothing: no address is held. A pod the dataplane still wires is
//     recovered from the dataplane's ListPods as a pod without an entry;
//     one it does not wire has no address on this node to collide with.
//
// The hold ends with the DEL of the file's key, or of its netns, or when the
// sweep finds its netns gone; the file set aside is then removed. It is held
// again at every start until then, with a Warning Event on the Node naming
// the file each time.

// ReasonCheckpointCorrupt is the Warning Event on the Node that names a
// checkpoint file that cannot be decoded and what is held for it.
const ReasonCheckpointCorrupt = "CheckpointCorrupt"

// heldFile is a checkpoint file set aside and the addresses kept for it.
type heldFile struct {
	path  string
	entry checkpoint.Entry
	holds []ipam.Allocation
}

type heldFiles struct {
	mu     sync.Mutex
	byPath map[string]*heldFile
}

// SetAsideCorrupt sets aside the checkpoint files under stateDir that
// cannot be decoded and returns their new paths. vcoild calls it before the
// agents read the checkpoint (KnownPodAddresses, KnownPodNetns), which
// fail on such a file; the daemon holds their addresses at its start
// (Recover), which sets aside any file found broken since.
func SetAsideCorrupt(stateDir string) ([]string, error) {
	store, err := checkpoint.Open(CheckpointDir(stateDir))
	if err != nil {
		return nil, err
	}
	_, bad, _ := store.LoadAll() // other errors are Recover's to report
	var out []string
	for _, ce := range bad {
		aside, err := store.SetAside(ce.Path)
		if err != nil {
			return out, err
		}
		out = append(out, aside)
	}
	return out, nil
}

// recoverCorrupt sets aside the files of bad and returns every file set
// aside, now or at an earlier start.
func (s *Server) recoverCorrupt(bad []*checkpoint.CorruptError) []*checkpoint.CorruptError {
	for _, ce := range bad {
		if _, err := s.store.SetAside(ce.Path); err != nil {
			s.log.Error(err, "cannot set aside a checkpoint file that cannot be decoded")
		}
	}
	aside, err := s.store.Corrupted()
	if err != nil {
		s.log.Error(err, "cannot read some checkpoint files set aside")
	}
	return aside
}

// asideMatches tells whether a file set aside describes dataplane pod p:
// the same key, or one of its addresses.
func asideMatches(ce *checkpoint.CorruptError, p dataplane.Pod) bool {
	e := ce.Partial
	if e.ContainerID != "" && e.ContainerID == p.ContainerID && e.IfName == p.IfName {
		return true
	}
	return (e.IPv4.IsValid() && e.IPv4 == p.IPv4) || (e.IPv6.IsValid() && e.IPv6 == p.IPv6)
}

// resolveAside forgets a file set aside whose pod was recovered from the
// dataplane under a new entry.
func (s *Server) resolveAside(ce *checkpoint.CorruptError, adopted checkpoint.Entry) {
	s.events.Warning(ReasonCheckpointCorrupt, "Recover", fmt.Sprintf("checkpoint file %s cannot be decoded; its pod %s was recovered from the %s dataplane with %s",
		ce.Path, key(adopted.ContainerID, adopted.IfName), s.dp.Name(), addrList(adopted.IPv4, adopted.IPv6)))
	if err := s.store.RemoveCorrupt(ce.Path); err != nil {
		s.log.Error(err, "cannot remove a checkpoint file set aside")
	}
}

// hold keeps out of use what a file set aside still tells, until its pod is
// gone, and records an Event naming the file.
func (s *Server) hold(ce *checkpoint.CorruptError) {
	e := ce.Partial
	h := &heldFile{path: ce.Path, entry: e}
	type offset struct {
		block string
		off   int
	}
	var candidates []offset
	if e.Block != "" && ce.HasOffset {
		candidates = append(candidates, offset{e.Block, ce.Partial.Offset})
	}
	for _, a := range []netip.Addr{e.IPv4, e.IPv6} {
		if block, off, ok := s.ipam.Lookup(a); a.IsValid() && ok {
			candidates = append(candidates, offset{block, off})
		}
	}
	seen := map[offset]bool{}
	for _, c := range candidates {
		if seen[c] {
			continue
		}
		seen[c] = true
		// A failure means the offset is another entry's or not the node's:
		// either way it is not given out on the file's account.
		if a, err := s.ipam.Restore(c.block, c.off); err == nil {
			h.holds = append(h.holds, a)
		}
	}
	what := ""
	switch {
	case len(candidates) > 0:
		var as []netip.Addr
		for _, a := range h.holds {
			as = append(as, a.IPv4, a.IPv6)
		}
		what = "holding " + addrList(as...)
	case e.Block != "":
		h.holds = s.holdBlock(e.Block)
		what = fmt.Sprintf("its address is unknown: holding every free address of block %s (%d)", e.Block, len(h.holds))
	default:
		what = "nothing in it tells its address; the dataplane holds no pod of it, so none is held"
	}
	s.held.mu.Lock()
	s.held.byPath[h.path] = h
	s.held.mu.Unlock()
	note := fmt.Sprintf("checkpoint file %s cannot be decoded (set aside); %s until %s", ce.Path, what, heldUntil(e))
	s.events.Warning(ReasonCheckpointCorrupt, "Recover", note)
	s.log.Info("holding the addresses of a checkpoint file that cannot be decoded", "file", ce.Path, "held", len(h.holds), "note", note)
}

// holdBlock restores every free offset of a block of the node.
func (s *Server) holdBlock(block string) []ipam.Allocation {
	size := 0
	for _, b := range s.ipam.Blocks() {
		if b.Name != block {
			continue
		}
		for _, p := range []netip.Prefix{b.Block.IPv4, b.Block.IPv6} {
			if p.IsValid() {
				size = max(size, 1<<min(p.Addr().BitLen()-p.Bits(), 16))
			}
		}
	}
	var out []ipam.Allocation
	for off := 0; off < size; off++ {
		if a, err := s.ipam.Restore(block, off); err == nil {
			out = append(out, a)
		}
	}
	return out
}

func heldUntil(e checkpoint.Entry) string {
	var ways []string
	if e.ContainerID != "" && e.IfName != "" {
		pod := key(e.ContainerID, e.IfName)
		if e.Name != "" {
			pod = e.Namespace + "/" + e.Name + " (" + pod + ")"
		}
		ways = append(ways, "the DEL of pod "+pod)
	}
	if e.Netns != "" {
		ways = append(ways, "its network namespace "+e.Netns+" is gone")
	}
	if len(ways) == 0 {
		return "the file is removed by hand and vcoild restarted"
	}
	return strings.Join(ways, " or ")
}

// heldFor returns the files held for a pod interface: by key, or by its
// network namespace.
func (s *Server) heldFor(containerID, ifName, netns string) []*heldFile {
	s.held.mu.Lock()
	defer s.held.mu.Unlock()
	var out []*heldFile
	for _, h := range s.held.byPath {
		e := h.entry
		if (e.ContainerID == containerID && e.IfName == ifName) || (netns != "" && filepath.Clean(e.Netns) == filepath.Clean(netns)) {
			out = append(out, h)
		}
	}
	return out
}

// releaseHeld frees what was held for a file set aside and removes it.
func (s *Server) releaseHeld(ctx context.Context, h *heldFile) {
	s.held.mu.Lock()
	if s.held.byPath[h.path] != h {
		s.held.mu.Unlock()
		return
	}
	delete(s.held.byPath, h.path)
	s.held.mu.Unlock()
	log := s.log.WithValues("file", h.path)
	for _, a := range h.holds {
		s.freeOrLog(ctx, log, a)
	}
	if err := s.store.RemoveCorrupt(h.path); err != nil {
		log.Error(err, "cannot remove a checkpoint file set aside")
	}
	log.Info("released the addresses held for a checkpoint file that could not be decoded", "released", len(h.holds))
}

// corruptAtDel sets aside the file of a pod interface that broke while
// vcoild ran: its address is allocated in memory, and it is freed when an
// address the file still tells agrees with its block and offset (a damaged
// offset must not free another pod's address; an address not freed is
// free again at the next start).
func (s *Server) corruptAtDel(ce *checkpoint.CorruptError, containerID, ifName string) *heldFile {
	aside, err := s.store.SetAside(ce.Path)
	if err != nil {
		aside = ce.Path
		s.log.Error(err, "cannot set aside a checkpoint file that cannot be decoded")
	}
	e := ce.Partial
	// The file's name is the key's: the key is the DEL's whatever the file says.
	e.ContainerID, e.IfName = containerID, ifName
	h := &heldFile{path: aside, entry: e}
	if e.Block != "" && ce.HasOffset {
		for _, a := range []netip.Addr{e.IPv4, e.IPv6} {
			if block, off, ok := s.ipam.Lookup(a); a.IsValid() && ok && block == e.Block && off == e.Offset {
				h.holds = []ipam.Allocation{{Pool: e.Pool, Block: e.Block, Offset: e.Offset, IPv4: e.IPv4, IPv6: e.IPv6}}
				break
			}
		}
	}
	freed := "its address is not told reliably and stays allocated until vcoild restarts"
	if len(h.holds) > 0 {
		freed = "freeing " + addrList(e.IPv4, e.IPv6)
	}
	s.events.Warning(ReasonCheckpointCorrupt, "Delete", fmt.Sprintf("checkpoint file %s of pod %s cannot be decoded (%v); set aside, the pod is torn down by its key, %s",
		ce.Path, key(e.ContainerID, e.IfName), ce.Err, freed))
	s.held.mu.Lock()
	s.held.byPath[h.path] = h
	s.held.mu.Unlock()
	return h
}

func addrList(as ...netip.Addr) string {
	var out []string
	for _, a := range as {
		if a.IsValid() {
			out = append(out, a.String())
		}
	}
	if len(out) == 0 {
		return "no address"
	}
	return strings.Join(out, ", ")
}
