package nftables

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the renderer, registered with Config.Registry.
type metrics struct {
	duration *prometheus.HistogramVec
	errors   *prometheus.CounterVec
	last     prometheus.Gauge
	objects  *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "vcoil", Subsystem: "service", Name: "sync_duration_seconds",
			Help:    "Time the nftables service renderer took to apply a Resync or an Update, by kind (resync, update).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"kind"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "vcoil", Subsystem: "service", Name: "sync_errors_total",
			Help: "Resyncs and Updates of the nftables service renderer that failed, by kind.",
		}, []string{"kind"}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "vcoil", Subsystem: "service", Name: "last_sync_timestamp_seconds",
			Help: "Unix time of the last successful Resync or Update of the nftables service renderer.",
		}),
		objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "vcoil", Subsystem: "service", Name: "nftables_objects",
			Help: "Objects in the renderer's nftables table, by kind (elements, rules, chains).",
		}, []string{"kind"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.duration, m.errors, m.last, m.objects} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observe(kind string, start time.Time, err error) {
	m.duration.WithLabelValues(kind).Observe(time.Since(start).Seconds())
	if err != nil {
		m.errors.WithLabelValues(kind).Inc()
		return
	}
	m.last.SetToCurrentTime()
}

func (m *metrics) table(elements int, o objects) {
	rules := 0
	for _, c := range o.Chains {
		rules += len(c.Rules)
	}
	m.objects.WithLabelValues("elements").Set(float64(elements))
	m.objects.WithLabelValues("rules").Set(float64(rules))
	m.objects.WithLabelValues("chains").Set(float64(len(o.Chains)))
}
