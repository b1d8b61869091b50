package routes

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// DirectConfig places the direct routes. The zero value uses the defaults
// in the namespace of the process.
type DirectConfig struct {
	// Netns is the path of the node's network namespace; empty means the
	// process's (/proc/self/ns/net).
	Netns string
	// Table holds the direct routes; 0 means DefaultDirectTable.
	Table int
	// RulePriority is the priority of the rules "from all lookup <Table>";
	// 0 means DefaultDirectRulePriority. It must come after the pod table's
	// rule, so that the node's own pods win, and before main's (32766), so
	// that the default route does not.
	RulePriority int
	// Protocol marks the routes; 0 means DefaultProtocol.
	Protocol int
}

// DirectRouter routes the blocks of other nodes to their InternalIP
// ("10.64.0.64/26 via 198.18.0.3 table 118 proto 30"), for nodes that share
// an L2 network and run no routing daemon. It is off unless the daemon
// creates one.
//
// The routes live in a table of their own, reached by a rule, rather than in
// main: main belongs to the node's network configuration and to a routing
// daemon, which may install a route to the same block with the same metric
// (the kernel would refuse one of them), and a table of its own can be
// synced without reading or racing anyone else's routes.
type DirectRouter struct {
	table    *table
	priority int
}

// NewDirectRouter checks cfg and that the namespace can be opened; it
// changes nothing before Sync.
func NewDirectRouter(cfg DirectConfig, log logr.Logger) (*DirectRouter, error) {
	priority := or(cfg.RulePriority, DefaultDirectRulePriority)
	if priority < 1 || priority >= 32766 {
		return nil, fmt.Errorf("direct routes: RulePriority %d: want 1..32765, before the main table's rule", priority)
	}
	t, err := newTable(cfg.Netns, or(cfg.Table, DefaultDirectTable), or(cfg.Protocol, DefaultProtocol), "direct", log)
	if err != nil {
		return nil, fmt.Errorf("direct routes: %w", err)
	}
	return &DirectRouter{table: t, priority: priority}, nil
}

// Sync installs the rules (IPv4 and IPv6) if they are missing and makes the
// table hold exactly one route per block, via the node address it maps to.
// Every next hop must be on a link of the node (a flat L2 network); the
// kernel refuses others, and Sync reports them, joined with any other
// error, after trying every route.
func (d *DirectRouter) Sync(ctx context.Context, routes map[netip.Prefix]netip.Addr) error {
	want := make(map[netip.Prefix]netlink.Route, len(routes))
	for block, via := range routes {
		if err := checkBlock(block); err != nil {
			return fmt.Errorf("direct routes: %w", err)
		}
		if !via.IsValid() || via.Is4In6() || via.Is4() != block.Addr().Is4() || via.IsUnspecified() || via.IsMulticast() {
			return fmt.Errorf("direct routes: block %s: next hop %s is not a unicast address of the block's family", block, via)
		}
		r := d.table.route(block)
		r.Gw = via.AsSlice()
		want[block] = r
	}
	if err := d.ensureRules(ctx); err != nil {
		return err
	}
	if err := d.table.sync(ctx, want); err != nil {
		return fmt.Errorf("direct routes in table %d: %w", d.table.id, err)
	}
	return nil
}

// Remove deletes the rules and every route of the table's protocol, for a
// node on which direct routing was turned off. It is idempotent.
func (d *DirectRouter) Remove(ctx context.Context) error {
	if err := d.table.sync(ctx, nil); err != nil {
		return fmt.Errorf("direct routes in table %d: %w", d.table.id, err)
	}
	n, err := d.table.open()
	if err != nil {
		return err
	}
	defer n.Close()
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		found, err := d.hasRule(n, family)
		if err != nil {
			return err
		}
		if !found {
			continue
		}
		if err := n.NL.RuleDel(d.rule(family)); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("direct routes: delete %s rule from all lookup %d priority %d: %w", familyName(family), d.table.id, d.priority, err)
		}
		d.table.log.Info("removed direct table rule", "family", familyName(family), "table", d.table.id, "priority", d.priority)
	}
	return nil
}

func (d *DirectRouter) ensureRules(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n, err := d.table.open()
	if err != nil {
		return err
	}
	defer n.Close()
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		found, err := d.hasRule(n, family)
		if err != nil {
			return err
		}
		if found {
			continue
		}
		if err := n.NL.RuleAdd(d.rule(family)); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("direct routes: add %s rule from all lookup %d priority %d: %w", familyName(family), d.table.id, d.priority, err)
		}
		d.table.log.Info("added direct table rule", "family", familyName(family), "table", d.table.id, "priority", d.priority)
	}
	return nil
}

func (d *DirectRouter) rule(family int) *netlink.Rule {
	r := netlink.NewRule()
	r.Family = family
	r.Table = d.table.id
	r.Priority = d.priority
	return r
}

// hasRule looks for the rule exactly: same priority and table, no selector.
func (d *DirectRouter) hasRule(n *namespace, family int) (bool, error) {
	for attempt := 1; ; attempt++ {
		rules, err := n.NL.RuleListFiltered(family, &netlink.Rule{Table: d.table.id}, netlink.RT_FILTER_TABLE)
		if errors.Is(err, netlink.ErrDumpInterrupted) && attempt < 5 {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("list rules in %s: %w", n.Path, err)
		}
		for _, r := range rules {
			if r.Priority == d.priority && r.Table == d.table.id && r.Src == nil && r.Dst == nil &&
				r.IifName == "" && r.OifName == "" && r.Mark == 0 && !r.Invert && r.Tos == 0 {
				return true, nil
			}
		}
		return false, nil
	}
}

func familyName(family int) string {
	if family == netlink.FAMILY_V6 {
		return "IPv6"
	}
	return "IPv4"
}
