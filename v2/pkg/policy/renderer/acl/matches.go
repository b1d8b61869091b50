package acl

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
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
	"go.fd.io/govpp/binapi/acl_types"

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

// statsReader reads the ACL counters of VPP's stats segment, for the
// metrics and for Denied; the stats client follows VPP's restarts (it
// watches the socket).
type statsReader struct {
	mu        sync.Mutex
	stats     statsSource
	connected bool
}

// newStatsReader reads the stats segment at socket. A read waits at most a
// second for a missing socket.
func newStatsReader(socket string) *statsReader {
	return &statsReader{stats: statsclient.NewStatsClient(socket, statsclient.SetSocketRetryTimeout(time.Second))}
}

// matches returns the per-thread, per-rule counters of every ACL, by ACL
// index.
func (s *statsReader) matches() (map[uint32]adapter.CombinedCounterStat, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.connected {
		if err := s.stats.Connect(); err != nil {
			return nil, fmt.Errorf("connect to VPP's stats segment: %w", err)
		}
		s.connected = true
	}
	entries, err := s.stats.DumpStats(matchesPattern)
	if err != nil {
		return nil, fmt.Errorf("read the ACL counters in VPP's stats segment: %w", err)
	}
	out := map[uint32]adapter.CombinedCounterStat{}
	for _, e := range entries {
		index, ok := aclIndexOf(string(e.Name))
		if !ok {
			continue
		}
		if counters, ok := e.Data.(adapter.CombinedCounterStat); ok {
			out[index] = counters
		}
	}
	return out, nil
}

var (
	clusterDeniedDesc = prometheus.NewDesc("vcoil_policy_cluster_network_policy_denied_packets_total",
		"Packets the rules of a ClusterNetworkPolicy denied, by policy, tier and direction, summed over the VPP ACLs holding them; "+
			"VPP starts an ACL's counts again from 0 when the ACL is replaced.",
		[]string{"policy", "tier", "direction"}, nil)
	npDeniedDesc = prometheus.NewDesc("vcoil_policy_network_policy_denied_packets_total",
		"Packets to (ingress) or from (egress) local pods a NetworkPolicy isolates that no NetworkPolicy of theirs permitted, by policy and direction, "+
			"counted by the VPP ACLs of pods with ClusterNetworkPolicy tiers (a packet of a pod two policies isolate counts for both).",
		[]string{"namespace", "policy", "direction"}, nil)
)

// matchCollector exports the hit counters of the renderer's ACLs, and the
// packets denied per policy (Denied), read from VPP's stats segment at
// each scrape.
type matchCollector struct {
	r     *Renderer
	log   logr.Logger
	stats *statsReader
}

func (c *matchCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- matchedPacketsDesc
	ch <- matchedBytesDesc
	ch <- clusterDeniedDesc
	ch <- npDeniedDesc
}

// Collect sums each of the renderer's ACLs' counters over threads and
// rules, and the denied packets per policy. A scrape while VPP is away
// exports nothing.
func (c *matchCollector) Collect(ch chan<- prometheus.Metric) {
	tables, origins := c.r.aclTables()
	counters, err := c.stats.matches()
	if err != nil {
		c.log.V(1).Info("cannot read the ACL hit counters", "error", err.Error())
		return
	}
	for index, perThread := range counters {
		table, ok := tables[index]
		if !ok {
			continue
		}
		var packets, bytes uint64
		for _, rules := range perThread {
			for _, rule := range rules {
				packets += rule.Packets()
				bytes += rule.Bytes()
			}
		}
		ch <- prometheus.MustNewConstMetric(matchedPacketsDesc, prometheus.CounterValue, float64(packets), table)
		ch <- prometheus.MustNewConstMetric(matchedBytesDesc, prometheus.CounterValue, float64(bytes), table)
	}
	for _, d := range deniedOf(origins, counters) {
		if d.Tier == "networkpolicy" {
			ns, name, _ := strings.Cut(d.Policy, "/")
			ch <- prometheus.MustNewConstMetric(npDeniedDesc, prometheus.CounterValue, float64(d.Packets), ns, name, d.Direction.String())
		} else {
			ch <- prometheus.MustNewConstMetric(clusterDeniedDesc, prometheus.CounterValue, float64(d.Packets), d.Policy, d.Tier, d.Direction.String())
		}
	}
}

// Denied reads the packets the deny rules of the renderer's ACLs denied,
// per policy: those of ClusterNetworkPolicies per policy, tier and
// direction, and, for pods with tiers (tables.Ordered), those no
// NetworkPolicy permitted, per NetworkPolicy isolating the pod. It needs
// the ACL counters (Config.StatsSocket and Registry).
func (r *Renderer) Denied(ctx context.Context) ([]renderer.Denied, error) {
	if r.stats == nil {
		return nil, errors.New("VPP ACL policy renderer: the ACL counters are off (no stats socket or metrics registry)")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	_, origins := r.aclTables()
	counters, err := r.stats.matches()
	if err != nil {
		return nil, fmt.Errorf("VPP ACL policy renderer: %w", err)
	}
	return deniedOf(origins, counters), nil
}

// ruleOrigins are the origins of an ACL's rules, one per ACL rule, with
// whether the rule denies.
type ruleOrigins struct {
	from []*renderer.Origin
	deny []bool
}

// deniedOf sums the counts of the deny rules by origin, per policy.
func deniedOf(origins map[uint32]ruleOrigins, counters map[uint32]adapter.CombinedCounterStat) []renderer.Denied {
	type key struct {
		tier, policy string
		dir          renderer.Direction
	}
	sums := map[key]uint64{}
	for index, perThread := range counters {
		o, ok := origins[index]
		if !ok {
			continue
		}
		for _, rules := range perThread {
			for i, rule := range rules {
				if i >= len(o.from) || !o.deny[i] || o.from[i] == nil || rule.Packets() == 0 {
					continue
				}
				x := o.from[i]
				for _, p := range x.Policies {
					sums[key{x.Tier, p, x.Direction}] += rule.Packets()
				}
			}
		}
	}
	out := make([]renderer.Denied, 0, len(sums))
	for k, n := range sums {
		out = append(out, renderer.Denied{Tier: k.tier, Policy: k.policy, Direction: k.dir, Packets: n})
	}
	slices.SortFunc(out, func(a, b renderer.Denied) int {
		return cmp.Or(cmp.Compare(a.Tier, b.Tier), cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Direction, b.Direction))
	})
	return out
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

// aclTables names the renderer's ACLs by index, and gives the origins of
// the rules of those whose table has them, while VPP's content is known.
func (r *Renderer) aclTables() (map[uint32]string, map[uint32]ruleOrigins) {
	r.mu.Lock()
	defer r.mu.Unlock()
	names, origins := map[uint32]string{}, map[uint32]ruleOrigins{}
	if !r.synced {
		return names, origins
	}
	for id, a := range r.local {
		names[a.index] = string(id)
	}
	if r.global != nil {
		names[r.global.index] = string(renderer.GlobalTableID)
	}
	if r.reflect != nil {
		names[r.reflect.index] = "reflect"
	}
	tables := r.cache.LocalTables()
	if g := r.cache.GlobalTable(); len(g.Rules) > 0 {
		tables = append(tables, g)
	}
	for _, t := range tables {
		if t.Origins == nil {
			continue
		}
		var a *aclState
		if t.ID == renderer.GlobalTableID {
			a = r.global
		} else if l, ok := r.local[t.ID]; ok {
			a = &l
		}
		if a == nil {
			continue
		}
		o := ruleOrigins{from: make([]*renderer.Origin, 0, len(a.rules)), deny: make([]bool, 0, len(a.rules))}
		for i := range t.Rules {
			for range aclRuleCount(&t.Rules[i]) {
				o.from = append(o.from, t.Origins[i])
			}
		}
		if len(o.from) != len(a.rules) {
			// Not the table VPP holds: count nothing rather than wrongly.
			continue
		}
		for _, rule := range a.rules {
			o.deny = append(o.deny, rule.IsPermit == acl_types.ACL_ACTION_API_DENY)
		}
		origins[a.index] = o
	}
	return names, origins
}

// enableCounters turns on the ACL plugin's counters (once per
// incarnation, with Config.StatsSocket): without them VPP counts nothing.
// VPP 25.10 answers acl_stats_intf_counters_enable with the message ID of
// acl_del_reply (its handler uses the wrong reply ID; both replies hold
// just a retval), so the reply is read as that.
func enableCounters(ch api.Channel) error {
	return vppapi.Call(ch, &acl.ACLStatsIntfCountersEnable{Enable: true}, &acl.ACLDelReply{})
}
