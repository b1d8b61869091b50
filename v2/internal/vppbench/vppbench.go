// Package vppbench holds what the VPP service renderers' benchmarks share:
// a fresh VPP in a namespace, pipelined requests, VPP's heap and the
// process's memory, percentiles.
package vppbench

import (
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.fd.io/govpp/adapter/socketclient"
	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/vlib"
	"go.fd.io/govpp/core"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
)

// StartVPP starts an empty VPP in a namespace of its own, with a main heap
// fit for n services, and connects to it.
func StartVPP(t *testing.T, bin string, n int) (*core.Connection, *vpptest.VPP) {
	t.Helper()
	node := netnstest.New(t, "vppbench")
	// 30,000 services of 10 backends need more than the tests' heap.
	heap := "1G"
	if n > 10000 {
		heap = "2G"
	}
	v := vpptest.StartWith(t, bin, node.Path(), vpptest.Options{MainHeapSize: heap})
	conn, err := core.Connect(socketclient.NewVppClient(v.APISocket))
	if err != nil {
		t.Fatalf("connect to VPP: %v", err)
	}
	t.Cleanup(conn.Disconnect)
	return conn, v
}

// Channel is a channel with room for window requests in flight.
func Channel(t *testing.T, conn *core.Connection, window int) api.Channel {
	t.Helper()
	ch, err := conn.NewAPIChannelBuffered(window, window)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ch.Close)
	return ch
}

// Call sends req and fails the test unless it succeeds.
func Call(t *testing.T, ch api.Channel, req, reply api.Message) {
	t.Helper()
	if err := vppapi.Call(ch, req, reply); err != nil {
		t.Fatal(err)
	}
}

// CLI runs a debug CLI command through the API.
func CLI(t *testing.T, ch api.Channel, cmd string) string {
	t.Helper()
	reply := &vlib.CliInbandReply{}
	Call(t, ch, &vlib.CliInband{Cmd: cmd}, reply)
	return reply.Reply
}

// Version is VPP's version ("v25.10-release").
func Version(t *testing.T, ch api.Channel) string {
	if f := strings.Fields(CLI(t, ch, "show version")); len(f) >= 2 {
		return f[1] // "vpp v25.10-release built by ..."
	}
	return ""
}

var heapUsed = regexp.MustCompile(`used: ([0-9.]+)([kKmMgG]?)`)

// HeapMB is the "used" figure of `show memory main-heap`, in MB.
func HeapMB(t *testing.T, ch api.Channel) float64 {
	t.Helper()
	out := CLI(t, ch, "show memory main-heap")
	m := heapUsed.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no used: in show memory main-heap:\n%s", out)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	switch strings.ToLower(m[2]) {
	case "k":
		v /= 1024
	case "g":
		v *= 1024
	case "":
		v /= 1024 * 1024
	}
	return v
}

// Pipeline sends reqs with up to window in flight, receiving replies in
// order, and fails the test at the first failure.
func Pipeline(t *testing.T, ch api.Channel, window int, reqs []api.Message, reply func() api.Message) {
	t.Helper()
	inFlight := make([]api.RequestCtx, 0, window)
	receive := func(rc api.RequestCtx) {
		if err := rc.ReceiveReply(reply()); err != nil {
			t.Fatalf("pipelined request: %v", err)
		}
	}
	for _, r := range reqs {
		if len(inFlight) == window {
			receive(inFlight[0])
			inFlight = inFlight[1:]
		}
		inFlight = append(inFlight, ch.SendRequest(r))
	}
	for _, rc := range inFlight {
		receive(rc)
	}
}

// AddrPlus is the IPv4 address n after a.
func AddrPlus(a netip.Addr, n int) netip.Addr {
	v := a.As4()
	x := uint32(v[0])<<24 | uint32(v[1])<<16 | uint32(v[2])<<8 | uint32(v[3])
	x += uint32(n)
	return netip.AddrFrom4([4]byte{byte(x >> 24), byte(x >> 16), byte(x >> 8), byte(x)})
}

var vmRSS = regexp.MustCompile(`VmRSS:\s+(\d+) kB`)

// RSSMB is the test process's resident memory in MB.
func RSSMB(t *testing.T) float64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	m := vmRSS.FindSubmatch(b)
	if m == nil {
		t.Fatal("no VmRSS in /proc/self/status")
	}
	kb, _ := strconv.Atoi(string(m[1]))
	return float64(kb) / 1024
}

// Percentile is the p-th percentile of v (nearest rank).
func Percentile(v []float64, p int) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	if i > 0 {
		i--
	}
	return s[i]
}

// Ms is d in milliseconds.
func Ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
