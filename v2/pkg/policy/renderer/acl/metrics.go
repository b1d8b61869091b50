package acl

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vcoil/vcoil/v2/pkg/rendermetrics"
)

// metrics of the renderer (vcoil_vpp_policy_*), registered with
// Config.Registry: the sync metrics every renderer exports, the ACLs held
// and the requests sent.
type metrics struct {
	syncs    *rendermetrics.Syncs
	acls     *prometheus.GaugeVec
	rules    prometheus.Gauge
	budget   prometheus.Gauge
	requests prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	syncs, err := rendermetrics.New(reg, "vpp_policy", "the VPP ACL policy renderer")
	if err != nil {
		return nil, err
	}
	m := &metrics{
		syncs: syncs,
		acls: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "vcoil", Subsystem: "vpp_policy", Name: "acls",
			Help: "ACLs the VPP ACL policy renderer holds in VPP, by kind (local: one per local table; global; reflective).",
		}, []string{"kind"}),
		rules: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "vcoil", Subsystem: "vpp_policy", Name: "acl_rules",
			Help: "ACL rules the policy tables need in VPP, at the last transaction (checked against vcoil_vpp_policy_acl_rule_budget before VPP is touched).",
		}),
		budget: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "vcoil", Subsystem: "vpp_policy", Name: "acl_rule_budget",
			Help: "The most ACL rules the VPP ACL policy renderer gives VPP (--vpp-acl-max-rules): a transaction needing more is refused.",
		}),
		requests: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "vcoil", Subsystem: "vpp_policy", Name: "acl_requests_total",
			Help: "ACL add, replace and delete requests the VPP ACL policy renderer sent to VPP.",
		}),
	}
	for _, k := range []string{"local", "global", "reflective"} {
		m.acls.WithLabelValues(k)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.acls, m.rules, m.budget, m.requests} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe records a transaction (Render: update) or a sync of everything
// (Resync: resync).
func (m *metrics) observe(kind rendermetrics.Kind, start time.Time, err error) {
	m.syncs.Observe(kind, start, err)
}

func (m *metrics) sent(n int) { m.requests.Add(float64(n)) }

func (m *metrics) setRules(n, budget int) {
	m.rules.Set(float64(n))
	m.budget.Set(float64(budget))
}

func (m *metrics) setACLs(local int, global, reflective bool) {
	b := func(x bool) float64 {
		if x {
			return 1
		}
		return 0
	}
	m.acls.WithLabelValues("local").Set(float64(local))
	m.acls.WithLabelValues("global").Set(b(global))
	m.acls.WithLabelValues("reflective").Set(b(reflective))
}
