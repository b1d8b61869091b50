package nat44

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the renderer (vcoil_vpp_services_*), registered with
// Config.Registry.
type metrics struct {
	mappings *prometheus.GaugeVec
	duration *prometheus.HistogramVec
	requests prometheus.Counter
	failures *prometheus.CounterVec
	// count mirrors mappings, by kind.
	count map[kind]int
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		mappings: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "vcoil", Subsystem: "vpp_services", Name: "mappings",
			Help: "Static mappings the NAT44 service renderer holds in VPP, by kind (lb, static, reject, drop).",
		}, []string{"kind"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "vcoil", Subsystem: "vpp_services", Name: "sync_duration_seconds",
			Help:    "Time the NAT44 service renderer took to apply a Resync or an Update, by kind (resync, update).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"kind"}),
		requests: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "vcoil", Subsystem: "vpp_services", Name: "mapping_requests_total",
			Help: "Static mapping requests the NAT44 service renderer sent to VPP.",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "vcoil", Subsystem: "vpp_services", Name: "sync_failures_total",
			Help: "Resyncs and Updates of the NAT44 service renderer that failed, by kind.",
		}, []string{"kind"}),
		count: map[kind]int{},
	}
	for _, k := range kinds {
		m.mappings.WithLabelValues(k.String())
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.mappings, m.duration, m.requests, m.failures} {
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

func (m *metrics) mapping(k kind, delta int) {
	m.count[k] += delta
	m.mappings.WithLabelValues(k.String()).Set(float64(m.count[k]))
}

// resetMappings counts held afresh (after a dump).
func (m *metrics) resetMappings(held map[mappingKey]*mapping) {
	clear(m.count)
	for _, x := range held {
		m.count[x.Kind]++
	}
	for _, k := range kinds {
		m.mappings.WithLabelValues(k.String()).Set(float64(m.count[k]))
	}
}
