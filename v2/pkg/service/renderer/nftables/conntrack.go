package nftables

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// staleFlows are the UDP conntrack entries a sync makes wrong, as
// kube-proxy clears them: UDP has no connection to end, so an entry keeps
// sending a client's packets to an endpoint that is gone, or (created
// while a frontend had no endpoints) past the DNAT it now has.
type staleFlows struct {
	// frontends lost no endpoints but gained their first: every UDP flow to
	// them is stale.
	frontends map[netip.AddrPort]bool
	// pairs are (frontend, endpoint) pairs that no longer hold: flows to the
	// frontend DNATed to the endpoint are stale.
	pairs map[[2]netip.AddrPort]bool
}

func (s *staleFlows) empty() bool { return len(s.frontends) == 0 && len(s.pairs) == 0 }

// add records what changes from old to want for frontend k (either may be
// nil).
func (s *staleFlows) add(k frontendKey, old, want *frontendState) {
	if k.Proto != protoUDP {
		return
	}
	fe := netip.AddrPortFrom(k.Addr, k.Port)
	if !old.picks() && want.picks() {
		if s.frontends == nil {
			s.frontends = map[netip.AddrPort]bool{}
		}
		s.frontends[fe] = true
		return
	}
	kept := want.endpointSet()
	for e := range old.endpointSet() {
		if !kept[e] {
			if s.pairs == nil {
				s.pairs = map[[2]netip.AddrPort]bool{}
			}
			s.pairs[[2]netip.AddrPort{fe, e}] = true
		}
	}
}

// MatchConntrackFlow makes staleFlows a netlink.CustomConntrackFilter.
func (s *staleFlows) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	if flow.Forward.Protocol != unix.IPPROTO_UDP {
		return false
	}
	dst, ok := netip.AddrFromSlice(flow.Forward.DstIP)
	if !ok {
		return false
	}
	fe := netip.AddrPortFrom(dst.Unmap(), flow.Forward.DstPort)
	if s.frontends[fe] {
		return true
	}
	src, ok := netip.AddrFromSlice(flow.Reverse.SrcIP)
	if !ok {
		return false
	}
	return s.pairs[[2]netip.AddrPort{fe, netip.AddrPortFrom(src.Unmap(), flow.Reverse.SrcPort)}]
}

// deleteFlows removes the stale entries from the node's conntrack table;
// h is a netfilter netlink handle in the node's namespace.
func deleteFlows(h *netlink.Handle, s *staleFlows) (uint, error) {
	var n uint
	for _, fam := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
		d, err := h.ConntrackDeleteFilters(netlink.ConntrackTable, fam, s)
		n += d
		if err != nil {
			return n, fmt.Errorf("delete stale UDP conntrack entries: %w", err)
		}
	}
	return n, nil
}
