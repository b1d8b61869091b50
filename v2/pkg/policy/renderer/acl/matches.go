package acl

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.fd.io/govpp/adapter"
	"go.fd.io/govpp/adapter/statsclient"
	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/acl"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// matchesPattern selects the ACL plugin's per-ACL counters in VPP's stats
// segment: /acl/<index>/matches, a combined counter (packets, bytes) per
// worker thread and rule, counted while the plugin's interface-ACL
// counters are enabled (ACLStatsIntfCountersEnable). VPP resets an ACL's
// counters when the ACL is made or replaced.
const matchesPattern = `^/acl/[0-9]+/matches`

// statsSource is the part of GoVPP's stats client the collector uses.
type statsSource interface {
	Connect() error
	DumpStats(patterns ...string) ([]adapter.StatEntry, error)
}

var (
	matchedPacketsDesc = prometheus.NewDesc("vcoil_vpp_policy_acl_matched_packets_total",
		"Packets that matched a rule of one of the VPP ACL policy renderer's ACLs, by table (local-N, global, reflect), "+
			"from VPP's stats segment; VPP starts again from 0 when the ACL is replaced.", []string{"table"}, nil)
	matchedBytesDesc = prometheus.NewDesc("vcoil_vpp_policy_acl_matched_bytes_total",
		"Bytes of the packets counted by vcoil_vpp_policy_acl_matched_packets_total.", []string{"table"}, nil)
)

// matchCollector exports the hit counters of the renderer's ACLs, read
// from VPP's stats segment at each scrape.
type matchCollector struct {
	r   *Renderer
	log logr.Logger

	mu        sync.Mutex
	stats     statsSource
	connected bool
}

// newMatchCollector reads the stats segment at socket; the stats client
// follows VPP's restarts (it watches the socket). A scrape waits at most a
// second for a missing socket.
func newMatchCollector(r *Renderer, socket string, log logr.Logger) *matchCollector {
	return &matchCollector{r: r, log: log, stats: statsclient.NewStatsClient(socket, statsclient.SetSocketRetryTimeout(time.Second))}
}

func (c *matchCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- matchedPacketsDesc
	ch <- matchedBytesDesc
}

// Collect sums each of the renderer's ACLs' counters over threads and
// rules. A scrape while VPP is away exports nothing.
func (c *matchCollector) Collect(ch chan<- prometheus.Metric) {
	tables := c.r.aclTables()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.connected {
		if err := c.stats.Connect(); err != nil {
			c.log.V(1).Info("cannot read VPP's stats segment for the ACL hit counters", "error", err.Error())
			return
		}
		c.connected = true
	}
	entries, err := c.stats.DumpStats(matchesPattern)
	if err != nil {
		c.log.V(1).Info("cannot read the ACL hit counters in VPP's stats segment", "error", err.Error())
		return
	}
	for _, e := range entries {
		index, ok := aclIndexOf(string(e.Name))
		if !ok {
			continue
		}
		table, ok := tables[index]
		if !ok {
			continue
		}
		counters, ok := e.Data.(adapter.CombinedCounterStat)
		if !ok {
			continue
		}
		var packets, bytes uint64
		for _, perThread := range counters {
			for _, rule := range perThread {
				packets += rule.Packets()
				bytes += rule.Bytes()
			}
		}
		ch <- prometheus.MustNewConstMetric(matchedPacketsDesc, prometheus.CounterValue, float64(packets), table)
		ch <- prometheus.MustNewConstMetric(matchedBytesDesc, prometheus.CounterValue, float64(bytes), table)
	}
}

// aclIndexOf parses "/acl/<index>/matches".
func aclIndexOf(name string) (uint32, bool) {
	name = strings.TrimRight(name, "\x00")
	rest, ok := strings.CutPrefix(name, "/acl/")
	if !ok {
		return 0, false
	}
	n, ok := strings.CutSuffix(rest, "/matches")
	if !ok {
		return 0, false
	}
	x, err := strconv.ParseUint(n, 10, 32)
	return uint32(x), err == nil
}

// aclTables names the renderer's ACLs by index, while VPP's content is
// known.
func (r *Renderer) aclTables() map[uint32]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[uint32]string{}
	if !r.synced {
		return out
	}
	for id, a := range r.local {
		out[a.index] = string(id)
	}
	if r.global != nil {
		out[r.global.index] = string(renderer.GlobalTableID)
	}
	if r.reflect != nil {
		out[r.reflect.index] = "reflect"
	}
	return out
}

// enableCounters turns on the ACL plugin's counters (once per
// incarnation, with Config.StatsSocket): without them VPP counts nothing.
// VPP 25.10 answers acl_stats_intf_counters_enable with the message ID of
// acl_del_reply (its handler uses the wrong reply ID; both replies hold
// just a retval), so the reply is read as that.
func enableCounters(ch api.Channel) error {
	return vppapi.Call(ch, &acl.ACLStatsIntfCountersEnable{Enable: true}, &acl.ACLDelReply{})
}
