package routes

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vcoil/vcoil/v2/pkg/constants"
)

// ExporterConfig places the exported routes. The zero value uses the
// defaults in the namespace of the process.
type ExporterConfig struct {
	// Netns is the path of the node's network namespace; empty means the
	// process's (/proc/self/ns/net).
	Netns string
	// Table is read by the routing daemon; 0 means DefaultExportTable.
	Table int
	// Protocol marks the exported routes; 0 means DefaultProtocol. Two
	// exporters of one table must use different protocols.
	Protocol int
	// What names the routes in logs and errors; "" means "exported block".
	What string
}

// Exporter publishes the node's blocks for a routing daemon: one blackhole
// route per block ("blackhole 10.64.0.0/26 table 119 proto 30"). With
// another protocol it publishes single addresses as /32 and /128 blocks
// (the LoadBalancer addresses, proto 32). The table
// is not consulted for forwarding (no rule points at it); the routing daemon
// reads it, advertises the blocks, and other nodes route them to this node.
type Exporter struct {
	table *table
}

// NewExporter checks cfg and that the namespace can be opened; it changes
// nothing.
func NewExporter(cfg ExporterConfig, log logr.Logger) (*Exporter, error) {
	what := cfg.What
	if what == "" {
		what = "exported block"
	}
	t, err := newTable(cfg.Netns, or(cfg.Table, DefaultExportTable), or(cfg.Protocol, DefaultProtocol), what, log)
	if err != nil {
		return nil, fmt.Errorf("route exporter: %w", err)
	}
	return &Exporter{table: t}, nil
}

// Sync makes the export table hold exactly blocks among the routes of the
// protocol: it adds what is missing, removes what is stale and leaves the
// routes of other protocols alone. It tries every block and returns the
// errors joined; an invalid block is an error and changes nothing.
func (e *Exporter) Sync(ctx context.Context, blocks []netip.Prefix) error {
	want, err := blockRoutes(e.table, blocks, unix.RTN_BLACKHOLE)
	if err != nil {
		return fmt.Errorf("export blocks: %w", err)
	}
	if err := e.table.sync(ctx, want); err != nil {
		return fmt.Errorf("export blocks to table %d: %w", e.table.id, err)
	}
	return nil
}

// LocalBlocksConfig places the unreachable routes of the node's blocks.
type LocalBlocksConfig struct {
	// Netns is the path of the node's network namespace; empty means the
	// process's (/proc/self/ns/net).
	Netns string
	// Table must be the Linux dataplane's pod table; 0 means
	// DefaultLocalBlocksTable, which is the dataplane's default.
	Table int
	// Protocol marks the routes; 0 means DefaultProtocol. It must differ
	// from the dataplane's pod routes' (constants.PodRouteProtocol, 31).
	Protocol int
}

// LocalBlocks puts an unreachable route for each of the node's blocks into
// the Linux dataplane's pod table ("unreachable 10.64.0.0/26 table 116
// proto 30"). In that table the pods' /32 and /128 routes are longer
// matches and win; any other address of the node's blocks is answered with
// ICMP unreachable instead of following the main table's default route
// out of the node, from where the network would route it back: a loop until
// the TTL runs out. Only the Linux dataplane needs it; VPP keeps its own FIB.
type LocalBlocks struct {
	table *table
}

// NewLocalBlocks checks cfg and that the namespace can be opened; it
// changes nothing.
func NewLocalBlocks(cfg LocalBlocksConfig, log logr.Logger) (*LocalBlocks, error) {
	protocol := or(cfg.Protocol, DefaultProtocol)
	if protocol == constants.PodRouteProtocol {
		// Sync would take the pods' routes for stale ones and remove them.
		return nil, fmt.Errorf("local block routes: protocol %d marks the Linux dataplane's pod routes", protocol)
	}
	t, err := newTable(cfg.Netns, or(cfg.Table, DefaultLocalBlocksTable), protocol, "local block", log)
	if err != nil {
		return nil, fmt.Errorf("local block routes: %w", err)
	}
	return &LocalBlocks{table: t}, nil
}

// Sync makes the pod table hold an unreachable route for exactly blocks
// among the routes of the protocol; the pods' routes (another protocol)
// are left alone. Errors are joined as in Exporter.Sync.
func (l *LocalBlocks) Sync(ctx context.Context, blocks []netip.Prefix) error {
	want, err := blockRoutes(l.table, blocks, unix.RTN_UNREACHABLE)
	if err != nil {
		return fmt.Errorf("local block routes: %w", err)
	}
	if err := l.table.sync(ctx, want); err != nil {
		return fmt.Errorf("local block routes in table %d: %w", l.table.id, err)
	}
	return nil
}

func blockRoutes(t *table, blocks []netip.Prefix, routeType int) (map[netip.Prefix]netlink.Route, error) {
	want := make(map[netip.Prefix]netlink.Route, len(blocks))
	for _, b := range blocks {
		if err := checkBlock(b); err != nil {
			return nil, err
		}
		r := t.route(b)
		r.Type = routeType
		want[b] = r
	}
	return want, nil
}

func or(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}
