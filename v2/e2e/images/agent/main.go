// Command agent is the network test agent of vcoil's end-to-end tests and
// demo (image vcoil-e2e-agent:lab). One side serves, the other connects:
//
//	agent serve [--tcp PORT] [--udp PORT] [--http PORT]
//	agent connect tcp|udp|http HOST:PORT [--timeout 2s] [--message TEXT] [--path /] [--upload BYTES]
//	agent routes [--table N]
//	agent resolve NAME [--server IP:PORT] [--timeout 2s]
//	agent bench-serve [--port 5201]
//	agent bench stream|pingpong HOST:PORT [--streams N] [--duration D] [--count N]
//
// The TCP and UDP servers echo what they receive; the HTTP server answers
// GET / with {"hostname": ..., "client": "IP:PORT"} (the client's source
// address as the server sees it), GET /hostname and GET /clientip with those
// alone, and POST /upload with {"bytes": N, "client": "IP:PORT", "sha256":
// HEX} of the body it read (connect http --upload BYTES sends that many
// bytes and checks the count and hash). connect prints what the server answered and exits 0 when the answer
// is right (the echo equals the message; HTTP status 200), 1 when the
// connection failed or the answer is wrong, 2 on a usage error. routes prints
// a routing table of the agent's network namespace (of the node, in a
// hostNetwork pod); resolve prints a name's IPv4 and IPv6 addresses as a DNS
// server answers A and AAAA queries. bench-serve and bench measure a path
// for make bench-dataplane (package netbench) and print JSON. Tests run it with `kubectl exec POD -- /agent ...`.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// errWrongAnswer marks a connection that worked but got an unexpected reply.
var errWrongAnswer = errors.New("wrong answer")

func main() {
	root := &cobra.Command{
		Use:           "agent",
		Short:         "vcoil's network test agent: echo servers and a client that checks them",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(serveCommand(), connectCommand(), routesCommand(), resolveCommand(), benchServeCommand(), benchCommand())
	cmd, err := root.ExecuteC()
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "agent:", err)
	if cmd == root || isUsageError(err) {
		os.Exit(2)
	}
	os.Exit(1)
}
