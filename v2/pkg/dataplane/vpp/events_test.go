package vpp

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
)

// withRegistry registers the driver's metrics with reg before Init.
func withRegistry(reg *prometheus.Registry) func(*harness) {
	return func(h *harness) {
		if err := h.d.metrics.register(reg); err != nil {
			h.t.Fatal(err)
		}
	}
}

// events reads the connection events queued so far, as "Type Reason:
// note" with durations replaced by D.
func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.d.ConnectionEvents():
			typ := "Normal"
			if e.Warning {
				typ = "Warning"
			}
			out = append(out, typ+" "+e.Reason+": "+durations.ReplaceAllString(e.Note, "in D:"))
		default:
			return out
		}
	}
}

var durations = regexp.MustCompile(`in [0-9.]+(ns|µs|ms|s|m[0-9.]+s):`)

// waitEvents waits until n connection events are queued and returns them.
func (h *harness) waitEvents(n int) []string {
	h.t.Helper()
	var got []string
	poll.Eventually(h.t, 5*time.Second, func() error {
		got = append(got, h.events()...)
		if len(got) < n {
			return fmt.Errorf("%d connection events, want %d: %q", len(got), n, got)
		}
		return nil
	})
	return got
}

// metricsText is the connection metrics in the text format, the
// histogram by its count only.
func metricsText(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetGauge() != nil:
				lines = append(lines, fmt.Sprintf("%s %g", mf.GetName(), m.GetGauge().GetValue()))
			case m.GetCounter() != nil:
				lines = append(lines, fmt.Sprintf("%s %g", mf.GetName(), m.GetCounter().GetValue()))
			case m.GetHistogram() != nil:
				lines = append(lines, fmt.Sprintf("%s_count %d", mf.GetName(), m.GetHistogram().GetSampleCount()))
			}
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func wantMetrics(t *testing.T, reg *prometheus.Registry, want string) {
	t.Helper()
	poll.Eventually(t, 5*time.Second, func() error {
		if got := metricsText(t, reg); got != want {
			return fmt.Errorf("metrics:\n%s\nwant:\n%s", got, want)
		}
		return nil
	})
}

// vcoild's start is no restart: no events, one sync observed, connected.
// VPP dying and coming back with another PID is: the lost connection, the
// new incarnation naming both PIDs and the pods to resync, then the
// resync with its counts; the restart is counted and the second sync
// observed.
func TestAVPPRestartIsReportedAndCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := start(t, testConfig(), withRegistry(reg))
	for _, p := range []dataplane.Pod{podA, podB} {
		if _, err := h.d.SetupPod(ctx(t), p); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.d.Blocks().Sync(ctx(t), []netip.Prefix{netip.MustParsePrefix("10.100.0.0/29")}); err != nil {
		t.Fatal(err)
	}
	wantMetrics(t, reg, `vcoil_vpp_connected 1
vcoil_vpp_restarts_total 0
vcoil_vpp_resync_duration_seconds_count 1`)
	if got := h.events(); len(got) != 0 {
		t.Fatalf("events at vcoild's start: %q, want none", got)
	}

	h.vpp.setDown(true)
	got := h.waitEvents(1)
	wantLines(t, "events of a lost VPP", got, []string{
		"Warning VPPConnectionLost: lost the API connection to VPP (pid 100) at /run/vpp/api.sock: control_ping: VPP API socket closed; CNI calls wait until it is back",
	})
	wantMetrics(t, reg, `vcoil_vpp_connected 0
vcoil_vpp_restarts_total 0
vcoil_vpp_resync_duration_seconds_count 1`)

	h.vpp.restart()
	wantLines(t, "events of VPP's return", h.waitEvents(2), []string{
		"Warning VPPRestarted: VPP restarted (pid 101, was 100; incarnation 2); resyncing 2 pods, then the services and network policies",
		"Normal VPPResynced: resynced VPP (pid 101, incarnation 2) in D: 2 pods, 1 blocks",
	})
	wantMetrics(t, reg, `vcoil_vpp_connected 1
vcoil_vpp_restarts_total 1
vcoil_vpp_resync_duration_seconds_count 2`)
}

// A VPP that restarts between two pings (the connection survives, the PID
// changes) is a restart without a lost connection.
func TestAVPPRestartBetweenPingsIsARestartWithoutALostConnection(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := start(t, testConfig(), withRegistry(reg))
	h.vpp.restart()
	wantLines(t, "events", h.waitEvents(2), []string{
		"Warning VPPRestarted: VPP restarted (pid 101, was 100; incarnation 2); resyncing 0 pods, then the services and network policies",
		"Normal VPPResynced: resynced VPP (pid 101, incarnation 2) in D: 0 pods, 0 blocks",
	})
	if testutil.ToFloat64(h.d.metrics.restarts) != 1 {
		t.Fatalf("restarts_total = %v, want 1", testutil.ToFloat64(h.d.metrics.restarts))
	}
}

// A sync that fails again and again with the same error is reported once,
// not at every retry; the resync that finally works is reported too, and
// only complete syncs are observed.
func TestAFailingResyncIsReportedOncePerError(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := start(t, testConfig(), withRegistry(reg))
	h.kernel.mu.Lock()
	h.kernel.failOn = "SetUpHost"
	h.kernel.mu.Unlock()
	h.vpp.restart()
	// Two attempts (500 ms apart) fail the same way.
	n := 0
	poll.Eventually(t, 5*time.Second, func() error {
		for _, c := range h.kernel.take() {
			if c == "SetUpHost" {
				n++
			}
		}
		if n < 2 {
			return fmt.Errorf("%d failed attempts", n)
		}
		return nil
	})
	h.kernel.mu.Lock()
	h.kernel.failOn = ""
	h.kernel.mu.Unlock()
	wantLines(t, "events", h.waitEvents(3), []string{
		"Warning VPPRestarted: VPP restarted (pid 101, was 100; incarnation 2); resyncing 0 pods, then the services and network policies",
		"Warning VPPResyncFailed: sync with VPP (pid 101, incarnation 2) failed: node set-up: set up the node's end of the host interconnect: kernel says no to SetUpHost; vcoild retries, and CNI calls wait meanwhile",
		"Normal VPPResynced: resynced VPP (pid 101, incarnation 2) in D: 0 pods, 0 blocks",
	})
	wantMetrics(t, reg, `vcoil_vpp_connected 1
vcoil_vpp_restarts_total 1
vcoil_vpp_resync_duration_seconds_count 2`)
}
