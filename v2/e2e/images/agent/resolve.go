package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"time"

	"github.com/spf13/cobra"
)

// resolveCommand asks a DNS server (the pod's, from resolv.conf, or
// --server) for a name's addresses of both families, A and AAAA queries
// apart, and prints them one a line, sorted: what a test needs to check
// that the cluster DNS answers both families, over either of its own.
func resolveCommand() *cobra.Command {
	var server string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "resolve NAME [--server IP:PORT] [--timeout 2s]",
		Short: "print a name's IPv4 and IPv6 addresses (A and AAAA), one a line",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r := &net.Resolver{PreferGo: true}
			if server != "" {
				if _, _, err := net.SplitHostPort(server); err != nil {
					return usageError{fmt.Errorf("--server %q: want IP:PORT ([IP]:PORT for IPv6): %w", server, err)}
				}
				r.Dial = func(ctx context.Context, network, _ string) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, network, server)
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			var out []string
			for _, network := range []string{"ip4", "ip6"} {
				ips, err := r.LookupIP(ctx, network, args[0])
				var dnsErr *net.DNSError
				if err != nil && !(errors.As(err, &dnsErr) && dnsErr.IsNotFound) {
					return fmt.Errorf("resolve %s (%s) at %s: %w", args[0], network, serverName(server), err)
				}
				for _, ip := range ips {
					out = append(out, ip.String())
				}
			}
			if len(out) == 0 {
				return fmt.Errorf("resolve %s at %s: no address of either family", args[0], serverName(server))
			}
			sort.Strings(out)
			for _, a := range out {
				fmt.Fprintln(cmd.OutOrStdout(), a)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&server, "server", "", "the DNS server to ask, IP:PORT (default: the nameservers of /etc/resolv.conf)")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Second, "give up after this long")
	return cmd
}

func serverName(server string) string {
	if server == "" {
		return "the nameservers of /etc/resolv.conf"
	}
	return server
}
