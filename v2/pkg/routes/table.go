// Package routes keeps the kernel routes that describe address blocks, each
// as a full sync of the routes of one protocol in one table:
//
//   - Exporter: every block of the node as a blackhole route in table 119,
//     protocol 30, for a routing daemon such as BIRD to advertise (Coil's
//     design: vcoil does not speak a routing protocol itself);
//   - LocalBlocks: every block of the node as an unreachable route in the
//     pod table (116) of the Linux dataplane, so that a packet to an address
//     of the node's blocks that no pod holds is refused on the node instead
//     of following the default route out and back again;
//     The same Exporter, with protocol 32, exports the LoadBalancer
//     addresses a node announces (package service/announce decides which);
//   - DirectRouter (off unless configured): routes to the blocks of other
//     nodes via their InternalIP, for nodes on one L2 network without a
//     routing daemon, in a table of their own (118) consulted after the pod
//     table.
//
// Each Sync makes its table hold exactly the routes asked for among the
// routes of its protocol, and leaves every other route alone. The package
// does not decide which blocks a node has (package nodeipam does) and does
// not wire pods (package dataplane/linux does).
package routes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/kernelns"
)

// Defaults of the configurations. They are documented in
// docs/linux-dataplane.md; change both together.
const (
	// DefaultProtocol marks every route of this package ("proto 30"),
	// except the exported LoadBalancer addresses.
	DefaultProtocol = 30
	// DefaultLBProtocol marks the LoadBalancer addresses a node exports
	// ("proto 32"): they share the export table with the blocks, and a
	// protocol of their own lets each exporter sync its routes without
	// removing the other's. 31 is the Linux dataplane's pod routes'
	// (constants.PodRouteProtocol).
	DefaultLBProtocol = 32
	// DefaultExportTable is the table a routing daemon reads the node's
	// blocks from.
	DefaultExportTable = 119
	// DefaultLocalBlocksTable is the Linux dataplane's default pod table;
	// LocalBlocks must use the dataplane's table.
	DefaultLocalBlocksTable = constants.PodTable
	// DefaultDirectTable holds the direct routes to other nodes' blocks.
	DefaultDirectTable = 118
	// DefaultDirectRulePriority puts the direct table after the pod table
	// (2000) and before main (32766).
	DefaultDirectRulePriority = 2010
)

// table is the part of one kernel table that one protocol owns.
type table struct {
	netns    string
	id       int
	protocol int
	// what names the routes in logs and errors ("exported block").
	what string
	log  logr.Logger

	// mu serialises syncs, which would otherwise race to add the same route.
	mu sync.Mutex
}

func newTable(netnsPath string, id, protocol int, what string, log logr.Logger) (*table, error) {
	switch {
	case id <= 0 || id == unix.RT_TABLE_DEFAULT || id == unix.RT_TABLE_MAIN || id == unix.RT_TABLE_LOCAL:
		return nil, fmt.Errorf("table %d: want a table other than default (253), main (254) and local (255)", id)
	case protocol <= unix.RTPROT_STATIC || protocol > 255:
		// 0-4 are the kernel's own (unspec, redirect, kernel, boot, static).
		return nil, fmt.Errorf("protocol %d: want 5..255, not one of the kernel's", protocol)
	}
	t := &table{netns: netnsPath, id: id, protocol: protocol, what: what, log: log}
	n, err := t.open()
	if err != nil {
		return nil, err
	}
	n.Close()
	return t, nil
}

// namespace is an open network namespace with a netlink handle in it.
type namespace struct{ *kernelns.Namespace }

func (t *table) open() (*namespace, error) {
	n, err := kernelns.Open(t.netns)
	if err != nil {
		return nil, fmt.Errorf("open %w", err)
	}
	return &namespace{n}, nil
}

// list returns the table's routes of the protocol, both families. The dump
// runs with strict checking so that the kernel filters it, instead of
// sending the whole FIB (which may hold a full Internet table).
func (t *table) list(n *namespace) ([]netlink.Route, error) {
	if err := n.NL.SetStrictCheck(true); err != nil {
		return nil, fmt.Errorf("netlink strict checking in %s: %w", n.Path, err)
	}
	defer func() { _ = n.NL.SetStrictCheck(false) }()
	filter := &netlink.Route{Table: t.id, Protocol: netlink.RouteProtocol(t.protocol)}
	for attempt := 1; ; attempt++ {
		rs, err := n.NL.RouteListFiltered(netlink.FAMILY_ALL, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		switch {
		case errors.Is(err, netlink.ErrDumpInterrupted) && attempt < 5:
			continue
		case errors.Is(err, unix.ENOENT):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("list routes of table %d proto %d in %s: %w", t.id, t.protocol, n.Path, err)
		}
		return rs, nil
	}
}

// sync makes the table's routes of the protocol exactly want, keyed by
// destination. It goes on after an error, so that one bad route does not
// hold back the others, and returns all errors joined.
func (t *table) sync(ctx context.Context, want map[netip.Prefix]netlink.Route) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n, err := t.open()
	if err != nil {
		return err
	}
	defer n.Close()
	have, err := t.list(n)
	if err != nil {
		return err
	}

	var errs []error
	seen := map[netip.Prefix]bool{}
	for _, r := range have {
		dst := prefixOf(r.Dst)
		w, wanted := want[dst]
		switch {
		case !wanted || seen[dst]:
			if err := n.NL.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("remove stale %s route %s from table %d: %w", t.what, dst, t.id, err))
				continue
			}
			t.log.Info("removed stale route", "what", t.what, "dst", dst, "table", t.id)
		case !sameRoute(r, w):
			if err := n.NL.RouteReplace(&w); err != nil {
				errs = append(errs, fmt.Errorf("replace %s route %s in table %d: %w", t.what, dst, t.id, err))
				continue
			}
			seen[dst] = true
			t.log.Info("replaced route", "what", t.what, "dst", dst, "table", t.id, "was", describeRoute(r), "now", describeRoute(w))
		default:
			seen[dst] = true
		}
	}
	for dst, w := range want {
		if seen[dst] {
			continue
		}
		if err := n.NL.RouteAdd(&w); err != nil {
			if errors.Is(err, unix.EEXIST) {
				err = fmt.Errorf("a route of another protocol holds that destination: %w", err)
			}
			errs = append(errs, fmt.Errorf("add %s route %s to table %d: %w", t.what, dst, t.id, err))
			continue
		}
		t.log.Info("added route", "what", t.what, "dst", dst, "table", t.id, "route", describeRoute(w))
	}
	return errors.Join(errs...)
}

// route is the route of the table for dst; callers set its type or gateway.
func (t *table) route(dst netip.Prefix) netlink.Route {
	family := netlink.FAMILY_V4
	if dst.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	return netlink.Route{
		Family:   family,
		Dst:      &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), dst.Addr().BitLen())},
		Table:    t.id,
		Protocol: netlink.RouteProtocol(t.protocol),
		Type:     unix.RTN_UNICAST,
	}
}

// sameRoute compares what Sync decides: the type and the gateway.
func sameRoute(have, want netlink.Route) bool {
	return have.Type == want.Type && have.Gw.Equal(want.Gw)
}

func describeRoute(r netlink.Route) string {
	switch r.Type {
	case unix.RTN_BLACKHOLE:
		return "blackhole"
	case unix.RTN_UNREACHABLE:
		return "unreachable"
	}
	if r.Gw != nil {
		return "via " + r.Gw.String()
	}
	return "unicast"
}

// prefixOf turns a route's destination back into a netip.Prefix; a nil
// destination is the default route of its family, which this package never
// adds and so removes.
func prefixOf(dst *net.IPNet) netip.Prefix {
	if dst == nil {
		return netip.Prefix{}
	}
	addr, _ := netip.AddrFromSlice(dst.IP)
	ones, _ := dst.Mask.Size()
	if dst.IP.To4() != nil {
		addr = addr.Unmap()
	}
	return netip.PrefixFrom(addr, ones)
}

// checkBlock rejects a prefix that is not a block: invalid, with host bits
// set, or an IPv4-mapped IPv6 prefix.
func checkBlock(p netip.Prefix) error {
	switch {
	case !p.IsValid():
		return fmt.Errorf("block %s is not a valid prefix", p)
	case p.Addr().Is4In6():
		return fmt.Errorf("block %s is IPv4-mapped IPv6: give IPv4 blocks as IPv4", p)
	case p.Masked() != p:
		return fmt.Errorf("block %s has host bits set (the block is %s)", p, p.Masked())
	case p.Addr().Zone() != "":
		return fmt.Errorf("block %s has a zone", p)
	}
	return nil
}
