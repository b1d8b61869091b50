package cnat

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the renderer (vcoil_vpp_cnat_*), registered with
// Config.Registry.
type metrics struct {
	translations *prometheus.GaugeVec
	duration     *prometheus.HistogramVec
	requests     prometheus.Counter
	failures     *prometheus.CounterVec
	// count mirrors translations, by kind.
	count map[kind]int
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		translations: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "vcoil", Subsystem: "vpp_cnat", Name: "translations",
			Help: "cnat translations the service renderer holds in VPP, by kind (backends, reject, drop).",
		}, []string{"kind"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "vcoil", Subsystem: "vpp_cnat", Name: "sync_duration_seconds",
			Help:    "Time the cnat service renderer took to apply a Resync or an Update, by kind (resync, update).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"kind"}),
		requests: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "vcoil", Subsystem: "vpp_cnat", Name: "requests_total",
			Help: "Translation requests the cnat service renderer sent to VPP.",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "vcoil", Subsystem: "vpp_cnat", Name: "sync_failures_total",
			Help: "Resyncs and Updates of the cnat service renderer that failed, by kind.",
		}, []string{"kind"}),
		count: map[kind]int{},
	}
	for _, k := range kinds {
		m.translations.WithLabelValues(k.String())
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.translations, m.duration, m.requests, m.failures} {
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

func (m *metrics) translation(k kind, delta int) {
	if k == kindMarker {
		return
	}
	m.count[k] += delta
	m.translations.WithLabelValues(k.String()).Set(float64(m.count[k]))
}

// reset counts held afresh (after a dump).
func (m *metrics) reset(held map[key]*translation) {
	clear(m.count)
	for _, t := range held {
		if t.Kind != kindMarker {
			m.count[t.Kind]++
		}
	}
	for _, k := range kinds {
		m.translations.WithLabelValues(k.String()).Set(float64(m.count[k]))
	}
}
