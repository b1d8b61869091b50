package router

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/vcoil/vcoil/v2/internal/ipnet"
	"github.com/vcoil/vcoil/v2/pkg/routes"
)

// LBProtocol marks the fabric's routes to LoadBalancer addresses, apart
// from the block routes (Protocol) so that each sync owns its own.
const LBProtocol = 202

// LBPeriod is how often the router reads the nodes' export tables: a
// change there reaches the fabric within about this long.
const LBPeriod = time.Second

// Peer is a node whose export table the router reads, as BIRD peers with
// the BIRD of every node.
type Peer struct {
	// Netns is the path of the node's network namespace.
	Netns string
	// NextHops are the node's InternalIPs; an address is routed via the one
	// of its own family (a node without one is no next hop for it).
	NextHops []netip.Addr
}

// Announcement is what one peer exports: the LoadBalancer addresses
// (prefixes) in its export table.
type Announcement struct {
	Peer     Peer
	Prefixes []netip.Prefix
}

// LBRoutes maps every announced prefix to the next hops of all the peers
// announcing it (ECMP), sorted so that equal sets compare equal. Pure.
func LBRoutes(announcements []Announcement) map[netip.Prefix][]netip.Addr {
	out := map[netip.Prefix][]netip.Addr{}
	for _, a := range announcements {
		for _, p := range a.Prefixes {
			p = p.Masked()
			for _, via := range a.Peer.NextHops {
				if via.Is4() == p.Addr().Is4() && !slices.Contains(out[p], via) {
					out[p] = append(out[p], via)
				}
			}
		}
	}
	for p, hops := range out {
		if len(hops) == 0 {
			delete(out, p)
			continue
		}
		slices.SortFunc(hops, func(a, b netip.Addr) int { return a.Compare(b) })
	}
	return out
}

// LBRouter keeps, in the fabric namespace's main table, one route per
// LoadBalancer address that any peer exports (table 119, protocol 32,
// where vcoild puts them), multipath across the peers exporting it. It
// polls the peers' tables instead of subscribing: one filtered dump per
// peer and one of its own routes per period, whatever the traffic.
type LBRouter struct {
	fabric *netlink.Handle
	peers  []Peer
	// handles of the peers' namespaces, opened on first use and kept.
	handles []*netlink.Handle
	// last is what each peer exported when it was last read.
	last [][]netip.Prefix
	log  logr.Logger
}

// NewLBRouter routes in the namespace of fabric (a handle the caller owns)
// what the peers export.
func NewLBRouter(fabric *netlink.Handle, peers []Peer, log logr.Logger) *LBRouter {
	return &LBRouter{fabric: fabric, peers: peers, handles: make([]*netlink.Handle, len(peers)), last: make([][]netip.Prefix, len(peers)), log: log}
}

// Close releases the handles of the peers' namespaces.
func (r *LBRouter) Close() {
	for i, h := range r.handles {
		if h != nil {
			h.Close()
			r.handles[i] = nil
		}
	}
}

// Run syncs every period until ctx ends. A failure (a peer's namespace
// gone, a route refused) is logged and retried at the next tick.
func (r *LBRouter) Run(ctx context.Context, period time.Duration) {
	defer r.Close()
	r.log.Info("routing LoadBalancer addresses in the fabric", "peers", len(r.peers), "period", period)
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		if err := r.Sync(); err != nil {
			r.log.Error(err, "sync LoadBalancer routes")
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Sync reads every peer's export table once and makes the fabric's routes
// match. A peer that cannot be read counts with what it exported when it
// was last read (as a routing daemon keeps a peer's routes for a while), so
// that a transient failure neither flaps the fabric nor holds up the other
// peers' changes; the failure is returned.
func (r *LBRouter) Sync() error {
	var errs []error
	anns := make([]Announcement, 0, len(r.peers))
	for i, p := range r.peers {
		prefixes, err := r.exported(i)
		if err != nil {
			errs = append(errs, fmt.Errorf("read the LoadBalancer addresses of peer %s: %w", p.Netns, err))
			prefixes = r.last[i]
		}
		r.last[i] = prefixes
		anns = append(anns, Announcement{Peer: p, Prefixes: prefixes})
	}
	return errors.Join(append(errs, r.apply(LBRoutes(anns)))...)
}

// exported dumps peer i's export table, protocol 32 only.
func (r *LBRouter) exported(i int) ([]netip.Prefix, error) {
	if r.handles[i] == nil {
		ns, err := netns.GetFromPath(r.peers[i].Netns)
		if err != nil {
			return nil, err
		}
		h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
		ns.Close()
		if err != nil {
			return nil, err
		}
		r.handles[i] = h
	}
	have, err := r.handles[i].RouteListFiltered(netlink.FAMILY_ALL,
		&netlink.Route{Table: routes.DefaultExportTable, Protocol: routes.DefaultLBProtocol},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		// A namespace made anew needs a new handle.
		r.handles[i].Close()
		r.handles[i] = nil
		return nil, err
	}
	out := make([]netip.Prefix, 0, len(have))
	for _, rt := range have {
		if p, ok := ipnet.Prefix(rt.Dst); ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// apply makes the fabric's LBProtocol routes be want: replaces those whose
// next hops differ, adds the missing, deletes the rest.
func (r *LBRouter) apply(want map[netip.Prefix][]netip.Addr) error {
	have, err := r.fabric.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: LBProtocol}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		return fmt.Errorf("list the fabric's LoadBalancer routes: %w", err)
	}
	var errs []error
	seen := map[netip.Prefix]bool{}
	for _, rt := range have {
		dst, ok := ipnet.Prefix(rt.Dst)
		if !ok {
			continue
		}
		hops, wanted := want[dst]
		if wanted && !seen[dst] {
			seen[dst] = true
			if slices.Equal(nextHopsOf(rt), hops) {
				continue
			}
			if err := r.fabric.RouteReplace(lbRoute(dst, hops)); err != nil {
				errs = append(errs, fmt.Errorf("route LoadBalancer address %s via %v: %w", dst, hops, err))
				continue
			}
			r.log.Info("rerouted LoadBalancer address", "address", dst, "via", hops, "was", nextHopsOf(rt))
			continue
		}
		if err := r.fabric.RouteDel(&rt); err != nil {
			errs = append(errs, fmt.Errorf("withdraw LoadBalancer address %s: %w", dst, err))
			continue
		}
		r.log.Info("withdrew LoadBalancer address", "address", dst, "was", nextHopsOf(rt))
	}
	for dst, hops := range want {
		if seen[dst] {
			continue
		}
		if err := r.fabric.RouteReplace(lbRoute(dst, hops)); err != nil {
			errs = append(errs, fmt.Errorf("route LoadBalancer address %s via %v: %w", dst, hops, err))
			continue
		}
		r.log.Info("learnt LoadBalancer address", "address", dst, "via", hops)
	}
	return errors.Join(errs...)
}

// lbRoute is dst via every hop; the kernel keeps a route of one next hop
// as a plain gateway route, so that is how one hop is written.
func lbRoute(dst netip.Prefix, hops []netip.Addr) *netlink.Route {
	rt := &netlink.Route{
		Dst:      &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), dst.Addr().BitLen())},
		Protocol: LBProtocol,
	}
	if len(hops) == 1 {
		rt.Gw = hops[0].AsSlice()
		return rt
	}
	for _, h := range hops {
		rt.MultiPath = append(rt.MultiPath, &netlink.NexthopInfo{Gw: h.AsSlice()})
	}
	return rt
}

// nextHopsOf reads a route's gateways, sorted as LBRoutes sorts them.
func nextHopsOf(rt netlink.Route) []netip.Addr {
	var out []netip.Addr
	add := func(ip net.IP) {
		if a, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, a.Unmap())
		}
	}
	if rt.Gw != nil {
		add(rt.Gw)
	}
	for _, nh := range rt.MultiPath {
		add(nh.Gw)
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}
