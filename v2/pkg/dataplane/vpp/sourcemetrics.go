package vpp

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.fd.io/govpp/adapter"
	"go.fd.io/govpp/adapter/statsclient"
	"go.fd.io/govpp/binapi/ip_types"
	"go.fd.io/govpp/binapi/vlib"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
)

// The uRPF plugin's nodes of the strict input check, as VPP names them
// (show errors, show interface features), and the reason it counts a
// dropped packet under.
const (
	URPFNodeIPv4   = "ip4-rx-urpf-strict"
	URPFNodeIPv6   = "ip6-rx-urpf-strict"
	urpfDropReason = "uRPF Drop"
)

// showErrors is the CLI command whose output holds VPP's error counters.
const showErrors = "show errors"

// sourceDropCollector exports the packets VPP's source validation dropped,
// read from VPP's error counters at each scrape through a channel of its
// own (the driver's is serialised with syncs that may take long), and,
// with Config.StatsSocket, those the pod guard dropped, read from the
// guard ACL's rule counters in VPP's stats segment. The counters start
// again at zero with each VPP process, as Prometheus counters may (and
// the guard's when its ACL is made again).
type sourceDropCollector struct {
	d    *driver
	desc *prometheus.Desc

	mu        sync.Mutex
	stats     statsSource // nil without Config.StatsSocket
	connected bool
}

// statsSource is the part of GoVPP's stats client the collector uses.
type statsSource interface {
	Connect() error
	DumpStats(patterns ...string) ([]adapter.StatEntry, error)
}

func newSourceDropCollector(d *driver) *sourceDropCollector {
	c := &sourceDropCollector{d: d, desc: prometheus.NewDesc(
		"vcoil_source_validation_drops_total",
		"Packets from pod interfaces that VPP dropped because their source address is not the pod's (nor one of its allowed source prefixes), or because they are router advertisements or redirects (counted with --vpp-stats-socket), by address family, since VPP started.",
		[]string{"family"}, nil)}
	if d.cfg.StatsSocket != "" {
		// A scrape waits at most a second for a missing socket; the client
		// follows VPP's restarts.
		c.stats = statsclient.NewStatsClient(d.cfg.StatsSocket, statsclient.SetSocketRetryTimeout(time.Second))
	}
	return c
}

func (c *sourceDropCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect exports nothing while VPP is not connected: a scrape then
// shows the series missing rather than a false zero.
func (c *sourceDropCollector) Collect(out chan<- prometheus.Metric) {
	v4, v6, ok := c.d.sourceDrops()
	if !ok {
		return
	}
	if c.stats != nil {
		g4, g6, err := c.guardDrops()
		if err != nil {
			c.d.log.V(1).Info("cannot read the pod guard's counters in VPP's stats segment", "error", err.Error())
			return
		}
		v4, v6 = v4+g4, v6+g6
	}
	out <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(v4), "ipv4")
	out <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(v6), "ipv6")
}

// sourceDrops reads the uRPF nodes' drop counters; ok is false when VPP
// cannot be asked.
func (d *driver) sourceDrops() (v4, v6 uint64, ok bool) {
	d.mu.Lock()
	open := d.open
	d.mu.Unlock()
	if open == nil {
		return 0, 0, false
	}
	ch, err := open(1)
	if err != nil {
		return 0, 0, false
	}
	defer ch.Close()
	reply := &vlib.CliInbandReply{}
	if err := vppapi.Call(ch, &vlib.CliInband{Cmd: showErrors}, reply); err != nil {
		d.log.V(1).Info("cannot read VPP's error counters", "error", err.Error())
		return 0, 0, false
	}
	v4, v6 = parseURPFDrops(reply.Reply)
	return v4, v6, true
}

// parseURPFDrops sums the uRPF drop counters of "show errors" (a line per
// node, reason and thread: count, node, reason, severity).
func parseURPFDrops(out string) (v4, v6 uint64) {
	s := bufio.NewScanner(strings.NewReader(out))
	for s.Scan() {
		line := s.Text()
		f := strings.Fields(line)
		if len(f) < 3 || !strings.Contains(line, urpfDropReason) {
			continue
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		switch f[1] {
		case URPFNodeIPv4:
			v4 += n
		case URPFNodeIPv6:
			v6 += n
		}
	}
	return v4, v6
}

// guardDrops sums the pod guard's deny rules' counters over VPP's threads,
// by the family of each rule.
func (c *sourceDropCollector) guardDrops() (v4, v6 uint64, err error) {
	c.d.mu.Lock()
	g := c.d.guard
	c.d.mu.Unlock()
	if !g.ok {
		return 0, 0, fmt.Errorf("the pod guard is not in VPP yet")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.connected {
		if err := c.stats.Connect(); err != nil {
			return 0, 0, err
		}
		c.connected = true
	}
	name := fmt.Sprintf("/acl/%d/matches", g.deny)
	entries, err := c.stats.DumpStats("^" + name + "$")
	if err != nil {
		return 0, 0, err
	}
	rules := GuardDenyRules()
	for _, e := range entries {
		if strings.TrimRight(string(e.Name), "\x00") != name {
			continue
		}
		counters, ok := e.Data.(adapter.CombinedCounterStat)
		if !ok {
			return 0, 0, fmt.Errorf("%s is a %T, not a combined counter", name, e.Data)
		}
		for _, perThread := range counters {
			for i, rule := range perThread {
				if i >= len(rules) {
					break
				}
				if rules[i].SrcPrefix.Address.Af == ip_types.ADDRESS_IP6 {
					v6 += rule.Packets()
				} else {
					v4 += rule.Packets()
				}
			}
		}
	}
	return v4, v6, nil
}
