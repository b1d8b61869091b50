package cnat

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vcoil/vcoil/v2/pkg/rendermetrics"
)

// metrics of the renderer (vcoil_vpp_cnat_*), registered with
// Config.Registry: the sync metrics every renderer exports
// (package rendermetrics) and its own.
type metrics struct {
	syncs        *rendermetrics.Syncs
	translations *prometheus.GaugeVec
	requests     prometheus.Counter
	// count mirrors translations, by kind.
	count map[kind]int
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	syncs, err := rendermetrics.New(reg, "vpp_cnat", "the cnat service renderer")
	if err != nil {
		return nil, err
	}
	m := &metrics{
		syncs: syncs,
		translations: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "vcoil", Subsystem: "vpp_cnat", Name: "translations",
			Help: "cnat translations the service renderer holds in VPP, by kind (backends, reject, drop).",
		}, []string{"kind"}),
		requests: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "vcoil", Subsystem: "vpp_cnat", Name: "requests_total",
			Help: "Translation requests the cnat service renderer sent to VPP.",
		}),
		count: map[kind]int{},
	}
	for _, k := range kinds {
		m.translations.WithLabelValues(k.String())
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.translations, m.requests} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observe(op string, start time.Time, err error) {
	kind := rendermetrics.Update
	if op == "resync" {
		kind = rendermetrics.Resync
	}
	m.syncs.Observe(kind, start, err)
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
