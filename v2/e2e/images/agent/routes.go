package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// routesCommand lists a routing table of the agent's network namespace:
// in a hostNetwork pod, the node's (vcoil's export table 119, its direct
// routes 118, its pod table 116).
func routesCommand() *cobra.Command {
	var table int
	cmd := &cobra.Command{
		Use:   "routes [--table N]",
		Short: "print the IPv4 and IPv6 routes of a routing table, one a line, as `ip route` would",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
			if err != nil {
				return fmt.Errorf("list routes of table %d: %w", table, err)
			}
			for _, r := range routes {
				fmt.Fprintln(cmd.OutOrStdout(), formatRoute(r))
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&table, "table", unix.RT_TABLE_MAIN, "routing table number")
	return cmd
}

var routeTypes = map[int]string{
	unix.RTN_UNREACHABLE: "unreachable", unix.RTN_BLACKHOLE: "blackhole", unix.RTN_PROHIBIT: "prohibit",
	unix.RTN_LOCAL: "local", unix.RTN_BROADCAST: "broadcast", unix.RTN_MULTICAST: "multicast",
}

func formatRoute(r netlink.Route) string {
	var parts []string
	if t, ok := routeTypes[r.Type]; ok {
		parts = append(parts, t)
	}
	if r.Dst == nil {
		parts = append(parts, "default")
	} else {
		parts = append(parts, r.Dst.String())
	}
	if r.Gw != nil {
		parts = append(parts, "via", r.Gw.String())
	}
	if r.LinkIndex > 0 {
		name := fmt.Sprint(r.LinkIndex)
		if l, err := netlink.LinkByIndex(r.LinkIndex); err == nil {
			name = l.Attrs().Name
		}
		parts = append(parts, "dev", name)
	}
	parts = append(parts, "proto", fmt.Sprint(int(r.Protocol)))
	if r.Src != nil {
		parts = append(parts, "src", r.Src.String())
	}
	return strings.Join(parts, " ")
}
