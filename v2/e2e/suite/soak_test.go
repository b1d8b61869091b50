package suite

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vcoil/vcoil/v2/e2e/netbench"
)

// The dataplane soak (make soak-dataplane): bulk TCP for a long time on
// the paths that stalled VPP nodes, with no stall, no lost connection and
// no VPP restart allowed. It runs only when VCOIL_SOAK_DATAPLANE gives its
// duration.
const (
	soakEnv = "VCOIL_SOAK_DATAPLANE"
	// soakMaxStall is the longest a stream's write may wait: TCP's first
	// retransmission timeout is 200 ms, and a path that recovers only
	// after several backed-off retransmissions has stalled.
	soakMaxStall = 2 * time.Second
	soakHostPort = benchPort + 1
)

// TestSoakDataplane runs, for the duration VCOIL_SOAK_DATAPLANE gives, 4
// TCP streams from a pod on node A to a pod on node B and 4 from the same
// pod to a server on node A's own network, at once. It fails when a
// stream's write waited longer than soakMaxStall, when a connection broke,
// and when a node's VPP was restarted meanwhile (its PID changed).
func TestSoakDataplane(t *testing.T) {
	v := os.Getenv(soakEnv)
	if v == "" {
		t.Skipf("skipped: set %s to the soak's duration (make soak-dataplane)", soakEnv)
	}
	duration, err := time.ParseDuration(v)
	if err != nil || duration <= 0 {
		t.Fatalf("%s=%q: want a duration", soakEnv, v)
	}
	k := need(t)
	c := ctx(t, duration+10*time.Minute)
	a, b, ns := k.benchSetUp(c, t, "vcoil-soak-")
	srvB := k.createAgentPod(t, ns.Name, "srv-b", b.Name, false, nil, []string{"bench-serve", "--port", strconv.Itoa(benchPort)})
	hostA := k.createAgentPod(t, ns.Name, "host-a", a.Name, true, nil, []string{"bench-serve", "--port", strconv.Itoa(soakHostPort)})
	cli := k.createAgentPod(t, ns.Name, "client", a.Name, false, nil, []string{"serve"})
	for _, p := range []*corev1.Pod{srvB, hostA, cli} {
		k.waitRunning(t, p)
	}
	flows := []struct{ name, addr string }{
		{"pod → pod, other node", net.JoinHostPort(podIP(srvB).String(), strconv.Itoa(benchPort))},
		{"pod → its node", net.JoinHostPort(ipv4.nodeIP(a).String(), strconv.Itoa(soakHostPort))},
	}
	for _, f := range flows {
		if err := k.benchReachable(c, cli, f.addr); err != nil {
			t.Fatalf("%s (%s) before the soak: %v", f.name, f.addr, err)
		}
	}

	before, err := vppPIDs()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("soak of %s: 4 streams on each of %d paths at once; VPPs %v", duration, len(flows), before)
	results := make([]netbench.Throughput, len(flows))
	errs := make([]error, len(flows))
	var wg sync.WaitGroup
	for i, f := range flows {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = k.benchRun(c, cli, &results[i], "stream", f.addr, "--streams", "4", "--duration", duration.String())
		}()
	}
	wg.Wait()
	after, err := vppPIDs()
	if err != nil {
		t.Fatal(err)
	}

	var failed []string
	for i, f := range flows {
		switch {
		case errs[i] != nil:
			failed = append(failed, fmt.Sprintf("%s: %v", f.name, errs[i]))
		case results[i].MaxStall > soakMaxStall:
			failed = append(failed, fmt.Sprintf("%s: a stream stalled for %s (%.2f Gbit/s over %s)", f.name, results[i].MaxStall, results[i].Gbps, results[i].Duration))
		default:
			t.Logf("%s: %.2f Gbit/s over %s, longest stall %s", f.name, results[i].Gbps, results[i].Duration.Round(time.Second), results[i].MaxStall.Round(time.Millisecond))
		}
	}
	for node, pid := range before {
		if after[node] != pid {
			failed = append(failed, fmt.Sprintf("VPP of %s was restarted during the soak (PID %s, then %s)", node, pid, after[node]))
		}
	}
	if len(failed) > 0 {
		t.Fatal(strings.Join(failed, "\n"))
	}
}

// vppPIDs reads the PID of each VPP node's VPP (lab.env's pidfile); none
// on a cluster without VPP nodes.
func vppPIDs() (map[string]string, error) {
	nodes, pidfile := vppNodes()
	pids := map[string]string{}
	if pidfile == "" {
		return pids, nil
	}
	var errs []error
	for _, n := range nodes {
		b, err := os.ReadFile(strings.ReplaceAll(pidfile, "{node}", n))
		if err != nil {
			errs = append(errs, fmt.Errorf("PID of node %s's VPP: %w", n, err))
			continue
		}
		pids[n] = strings.TrimSpace(string(b))
	}
	return pids, errors.Join(errs...)
}
