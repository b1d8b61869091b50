package nftables

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vcoil/vcoil/v2/pkg/rendermetrics"
)

// metrics of the renderer (vcoil_service_*), registered with
// Config.Registry: the sync metrics every renderer exports, and the
// table's objects.
type metrics struct {
	syncs   *rendermetrics.Syncs
	objects *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	syncs, err := rendermetrics.New(reg, "service", "the nftables service renderer")
	if err != nil {
		return nil, err
	}
	m := &metrics{
		syncs: syncs,
		objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "vcoil", Subsystem: "service", Name: "nftables_objects",
			Help: "Objects in the renderer's nftables table, by kind (elements, rules, chains).",
		}, []string{"kind"}),
	}
	if reg == nil {
		return m, nil
	}
	if err := reg.Register(m.objects); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) observe(kind rendermetrics.Kind, start time.Time, err error) {
	m.syncs.Observe(kind, start, err)
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
