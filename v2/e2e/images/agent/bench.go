package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/vcoil/vcoil/v2/e2e/netbench"
)

// benchServeCommand runs netbench's server (make bench-dataplane).
func benchServeCommand() *cobra.Command {
	var port int
	cmd := &cobra.Command{
		Use:   "bench-serve --port PORT",
		Short: "sink bulk streams and echo ping-pongs for agent bench, until SIGTERM",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			l, err := net.Listen("tcp", ":"+strconv.Itoa(port))
			if err != nil {
				return err
			}
			return netbench.Serve(ctx, l)
		},
	}
	cmd.Flags().IntVar(&port, "port", 5201, "TCP port")
	return cmd
}

// benchCommand measures a path to a bench-serve and prints the result as
// JSON.
func benchCommand() *cobra.Command {
	var streams, count int
	var duration time.Duration
	cmd := &cobra.Command{
		Use:   "bench stream|pingpong HOST:PORT [--streams N --duration D] [--count N]",
		Short: "measure bulk TCP throughput (stream) or 1-byte round trips (pingpong) to an agent bench-serve; JSON on stdout",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			var result any
			var err error
			switch args[0] {
			case "stream":
				result, err = netbench.Stream(ctx, &net.Dialer{Timeout: 5 * time.Second}, args[1], streams, duration)
			case "pingpong":
				result, err = netbench.PingPong(ctx, &net.Dialer{Timeout: 5 * time.Second}, args[1], count)
			default:
				return usageError{fmt.Errorf("unknown measurement %q: want stream or pingpong", args[0])}
			}
			if err != nil {
				return err
			}
			return json.NewEncoder(os.Stdout).Encode(result)
		},
	}
	cmd.Flags().IntVar(&streams, "streams", 1, "parallel TCP streams (stream)")
	cmd.Flags().DurationVar(&duration, "duration", 10*time.Second, "how long the streams send (stream)")
	cmd.Flags().IntVar(&count, "count", 10000, "round trips (pingpong)")
	return cmd
}
