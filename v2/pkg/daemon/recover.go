package daemon

import (
	"context"
	"errors"
	"fmt"

	"github.com/vcoil/vcoil/v2/pkg/checkpoint"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// RecoveryReport says what Recover found.
type RecoveryReport struct {
	// Restored allocations from the checkpoint.
	Restored int
	// Adopted pods the dataplane held without a checkpoint entry.
	Adopted int
	// Stale entries whose block is not the node's (kept for a DEL), and
	// dataplane objects torn down because no address of the node backs them.
	Stale, TornDown int
	// Held checkpoint files that cannot be decoded, whose addresses are kept
	// out of use until their pods are gone.
	Held int
}

// Recover rebuilds the allocations at start, before the gRPC server serves:
// every checkpoint entry is taken again in its block; a pod the dataplane
// holds without an entry (the checkpoint was lost) is adopted when its
// address lies in a block of the node and is free, and torn down otherwise.
// The node's blocks must be loaded into IPAM first.
//
// A checkpoint file of a newer format stops Recover before it changes
// anything (an error matching formatversion.ErrNewer): its pod would otherwise look
// like one without an entry, to be adopted over the file or torn down.
func (s *Server) Recover(ctx context.Context) (RecoveryReport, error) {
	var rep RecoveryReport
	entries, bad, loadErr := s.store.LoadAll()
	if errors.Is(loadErr, formatversion.ErrNewer) {
		return rep, fmt.Errorf("recover the allocations of checkpoint %s: %w", s.store.Dir(), loadErr)
	}
	if loadErr != nil {
		// Unreadable files are reported, not fatal: their addresses stay
		// unallocated; the dataplane pass below can still adopt the pods.
		s.log.Error(loadErr, "some checkpoint entries cannot be read")
	}
	// Files that cannot be decoded are set aside (corrupt.go); what they
	// still tell is held once the dataplane's pods are adopted.
	aside := s.recoverCorrupt(bad)
	resolved := make([]bool, len(aside))
	have := map[string]bool{}
	for _, e := range entries {
		have[key(e.ContainerID, e.IfName)] = true
		if _, err := s.ipam.Restore(e.Block, e.Offset); err != nil {
			rep.Stale++
			s.log.Error(err, "checkpoint entry does not fit the node's blocks; it stays until the runtime deletes the pod",
				"containerID", e.ContainerID, "ifname", e.IfName, "block", e.Block)
			continue
		}
		rep.Restored++
	}

	pods, err := s.dp.ListPods(ctx)
	if err != nil {
		return rep, fmt.Errorf("list pods of the %s dataplane: %w", s.dp.Name(), err)
	}
	pools := map[string]string{}
	for _, b := range s.ipam.Blocks() {
		pools[b.Name] = b.Pool
	}
	var errs []error
	for _, p := range pods {
		if have[key(p.ContainerID, p.IfName)] {
			continue
		}
		var matches []int
		for i, ce := range aside {
			if !resolved[i] && asideMatches(ce, p) {
				matches = append(matches, i)
			}
		}
		if e, ok := s.adopt(p, pools); ok {
			if err := s.store.Save(e); err != nil {
				errs = append(errs, err)
				continue
			}
			rep.Adopted++
			s.log.Info("adopted a pod the dataplane holds without a checkpoint entry", "containerID", p.ContainerID, "ifname", p.IfName,
				"ipv4", addrString(e.IPv4), "ipv6", addrString(e.IPv6))
			for _, i := range matches {
				resolved[i] = true
				s.resolveAside(aside[i], e)
			}
			continue
		}
		if len(matches) > 0 {
			// Its file is set aside: the pod stays wired until its DEL.
			continue
		}
		if err := s.dp.TeardownPod(ctx, p); err != nil {
			errs = append(errs, err)
			continue
		}
		rep.TornDown++
		s.log.Info("tore down a dataplane pod no address of the node backs", "containerID", p.ContainerID, "ifname", p.IfName)
	}
	for i, ce := range aside {
		if !resolved[i] {
			s.hold(ce)
			rep.Held++
		}
	}
	return rep, errors.Join(errs...)
}

// adopt restores a dataplane pod's addresses when they are one free offset
// of one of the node's blocks.
func (s *Server) adopt(p dataplane.Pod, pools map[string]string) (checkpoint.Entry, bool) {
	addr := p.IPv4
	if !addr.IsValid() {
		addr = p.IPv6
	}
	if !addr.IsValid() {
		return checkpoint.Entry{}, false
	}
	block, off, ok := s.ipam.Lookup(addr)
	if !ok {
		return checkpoint.Entry{}, false
	}
	a, err := s.ipam.Restore(block, off)
	if err != nil || (p.IPv4.IsValid() && a.IPv4 != p.IPv4) || (p.IPv6.IsValid() && a.IPv6 != p.IPv6) {
		if err == nil {
			// The pod's other address is not the pair at that offset.
			_ = s.ipam.Free(context.Background(), a)
		}
		return checkpoint.Entry{}, false
	}
	return checkpoint.Entry{
		ContainerID: p.ContainerID, IfName: p.IfName, Netns: p.Netns,
		Namespace: p.Namespace, Name: p.Name,
		Pool: pools[block], Block: block, Offset: off, IPv4: a.IPv4, IPv6: a.IPv6,
		Created: s.now().UTC(),
	}, true
}
