package acl

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the renderer (vcoil_vpp_policy_*), registered with
// Config.Registry.
type metrics struct {
	acls     *prometheus.GaugeVec
	duration *prometheus.HistogramVec
	requests prometheus.Counter
	failures *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		acls: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "vcoil", Subsystem: "vpp_policy", Name: "acls",
			Help: "ACLs the VPP ACL policy renderer holds in VPP, by kind (local: one per local table; global; reflective).",
		}, []string{"kind"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "vcoil", Subsystem: "vpp_policy", Name: "render_duration_seconds",
			Help:    "Time the VPP ACL policy renderer took to apply a transaction (render) or to sync everything (resync).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"kind"}),
		requests: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "vcoil", Subsystem: "vpp_policy", Name: "acl_requests_total",
			Help: "ACL add, replace and delete requests the VPP ACL policy renderer sent to VPP.",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "vcoil", Subsystem: "vpp_policy", Name: "render_failures_total",
			Help: "Transactions (render) and syncs (resync) of the VPP ACL policy renderer that failed.",
		}, []string{"kind"}),
	}
	for _, k := range []string{"local", "global", "reflective"} {
		m.acls.WithLabelValues(k)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.acls, m.duration, m.requests, m.failures} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observe(op string, start time.Time, err error) {
	m.duration.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil {
		m.failures.WithLabelValues(op).Inc()
	}
}

func (m *metrics) sent(n int) { m.requests.Add(float64(n)) }

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
