package nftables

import (
	"cmp"
	"context"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
	"github.com/vcoil/vcoil/v2/pkg/rendermetrics"
)

// metrics of the renderer (vcoil_policy_*), registered with
// Config.Registry: the sync metrics every renderer exports, and the
// table's state read at each scrape.
type metrics struct {
	syncs *rendermetrics.Syncs
	r     *Renderer
}

var (
	descGroups = prometheus.NewDesc("vcoil_policy_nftables_groups",
		"Groups (a chain and its sets) in the nftables policy table, by direction, of all tiers: pods whose rules of a tier and direction are equal share one.",
		[]string{"direction"}, nil)
	descPods = prometheus.NewDesc("vcoil_policy_nftables_isolated_addresses",
		"Local pod addresses that NetworkPolicies isolate in the nftables policy table, by direction.",
		[]string{"direction"}, nil)
	descRules = prometheus.NewDesc("vcoil_policy_rules",
		"Rules the policy configurator generated for this node's pods (both directions, all pods), as the nftables renderer last received them.",
		nil, nil)
	descClusterDenied = prometheus.NewDesc("vcoil_policy_cluster_network_policy_denied_packets_total",
		"Packets the nftables policy table denied by the rules of a ClusterNetworkPolicy, by policy, tier and direction (policy \"\": the rules vcoild adds), summed over the groups holding them.",
		[]string{"policy", "tier", "direction"}, nil)
	descNetworkPolicyDenied = prometheus.NewDesc("vcoil_policy_network_policy_denied_packets_total",
		"Packets the nftables policy table denied to or from local pods a NetworkPolicy isolates, that no NetworkPolicy of theirs permitted, by policy and direction: a packet of a pod isolated by two policies counts for both. It counts the pods the policy isolates now: a pod leaving takes its count with it.",
		[]string{"namespace", "policy", "direction"}, nil)
	descDenied = prometheus.NewDesc("vcoil_policy_denied_packets_total",
		"Packets the nftables policy table denied, by group and direction (the group's pods: kubectl vcoil / docs/policy.md); group unknown-source: out of local pods' interfaces with a source no local pod may use.",
		[]string{"group", "direction"}, nil)
)

func newMetrics(reg prometheus.Registerer, r *Renderer) (*metrics, error) {
	syncs, err := rendermetrics.New(reg, "policy", "the nftables policy renderer")
	if err != nil {
		return nil, err
	}
	m := &metrics{syncs: syncs, r: r}
	if reg == nil {
		return m, nil
	}
	if err := reg.Register(m); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) observe(start time.Time, resync bool, err error) {
	kind := rendermetrics.Update
	if resync {
		kind = rendermetrics.Resync
	}
	m.syncs.Observe(kind, start, err)
}

// Describe and Collect make the table's state a collector: it is read at
// each scrape, the counters from the kernel.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descGroups, descPods, descRules, descDenied, descNetworkPolicyDenied, descClusterDenied} {
		ch <- d
	}
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	r := m.r
	r.mu.Lock()
	var groups, addrs [2]int
	for _, g := range r.groups {
		groups[g.dir]++
	}
	for _, d := range []renderer.Direction{renderer.Ingress, renderer.Egress} {
		addrs[d] = len(r.elems[slotOf(kindNetworkPolicy, d)])
	}
	rules := 0
	for _, w := range r.pods {
		rules += w.rules
	}
	r.mu.Unlock()
	for d := range groups {
		dir := []string{"ingress", "egress"}[d]
		ch <- prometheus.MustNewConstMetric(descGroups, prometheus.GaugeValue, float64(groups[d]), dir)
		ch <- prometheus.MustNewConstMetric(descPods, prometheus.GaugeValue, float64(addrs[d]), dir)
	}
	ch <- prometheus.MustNewConstMetric(descRules, prometheus.GaugeValue, float64(rules))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// A failed read leaves only the denied packets out of this scrape:
	// the gauges above are the renderer's own state.
	denied, err := r.Denied(ctx)
	if err != nil {
		return
	}
	for _, d := range denied {
		switch {
		case d.Tier == kindNetworkPolicy.String() && d.Group != "":
			ch <- prometheus.MustNewConstMetric(descDenied, prometheus.CounterValue, float64(d.Packets), d.Group, d.Direction.String())
		case d.Tier == kindNetworkPolicy.String():
			ns, name, _ := strings.Cut(d.Policy, "/")
			ch <- prometheus.MustNewConstMetric(descNetworkPolicyDenied, prometheus.CounterValue, float64(d.Packets), ns, name, d.Direction.String())
		default:
			ch <- prometheus.MustNewConstMetric(descClusterDenied, prometheus.CounterValue, float64(d.Packets), d.Policy, d.Tier, d.Direction.String())
		}
	}
}

// Denied reads the table's drop counters: per NetworkPolicy group (and the
// counter of forged sources, as group unknown-source); per NetworkPolicy
// and direction, the denied counts of the local pod addresses it isolates
// (deniedSets); and per ClusterNetworkPolicy, tier and direction, summed
// over the tier groups holding its rules.
func (r *Renderer) Denied(ctx context.Context) ([]renderer.Denied, error) {
	type origin struct {
		tier, policy string
		dir          renderer.Direction
	}
	r.mu.Lock()
	// The policies each address's denied count is for.
	var isolating [2]map[netip.Addr][]string
	for d := range isolating {
		isolating[d] = map[netip.Addr][]string{}
	}
	for a, id := range r.owners {
		if w := r.pods[id]; w != nil {
			for d := range isolating {
				if len(w.isolating[d]) > 0 {
					isolating[d][a] = w.isolating[d]
				}
			}
		}
	}
	groups := map[string]renderer.Direction{counterUnknownSource: renderer.Egress}
	runs := map[string]origin{}
	for name, g := range r.groups {
		if g.kind == kindNetworkPolicy {
			groups[name] = g.dir
			continue
		}
		for c, policy := range dropCounters(g.kind, g.name, g.cc) {
			runs[c] = origin{g.kind.String(), policy, g.dir}
		}
	}
	r.mu.Unlock()
	counters, err := r.k.t.Counters(ctx)
	if err != nil {
		return nil, err
	}
	var out []renderer.Denied
	sums := map[origin]uint64{}
	for _, c := range counters {
		if dir, ok := groups[c.Name]; ok {
			out = append(out, renderer.Denied{Tier: kindNetworkPolicy.String(), Group: c.Name, Direction: dir, Packets: c.Packets})
		}
		if o, ok := runs[c.Name]; ok {
			sums[o] += c.Packets
		}
	}
	for d, names := range deniedSets {
		for _, name := range names {
			elems, err := r.k.t.ElementCounters(ctx, name)
			if err != nil {
				return nil, err
			}
			for _, e := range elems {
				a, err := netip.ParseAddr(e.Key[0])
				if err != nil {
					continue
				}
				for _, policy := range isolating[d][a] {
					sums[origin{kindNetworkPolicy.String(), policy, renderer.Direction(d)}] += e.Packets
				}
			}
		}
	}
	for o, n := range sums {
		out = append(out, renderer.Denied{Tier: o.tier, Policy: o.policy, Direction: o.dir, Packets: n})
	}
	slices.SortFunc(out, func(a, b renderer.Denied) int {
		return cmp.Or(cmp.Compare(a.Tier, b.Tier), cmp.Compare(a.Policy, b.Policy), cmp.Compare(a.Group, b.Group), cmp.Compare(a.Direction, b.Direction))
	})
	return out, nil
}
