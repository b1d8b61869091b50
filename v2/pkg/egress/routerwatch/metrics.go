package routerwatch

import "github.com/prometheus/client_golang/prometheus"

// Operations counted by the errors metric.
const (
	opParse           = "parse_destinations"
	opSetDestinations = "set_destinations"
	opAddPeer         = "add_peer"
	opRemovePeer      = "remove_peer"
)

// Metrics of a router pod. A router serves one Egress, so they carry no
// Egress label: the pod's own labels say which.
type Metrics struct {
	peers        prometheus.Gauge
	destinations prometheus.Gauge
	errors       *prometheus.CounterVec
}

// NewMetrics creates the router's metrics and registers them with reg
// (controller-runtime's metrics.Registry in vcoil-egress).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		peers: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "vcoil", Subsystem: "egress_router", Name: "peers",
			Help: "The number of client pods the router serves.",
		}),
		destinations: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "vcoil", Subsystem: "egress_router", Name: "destinations",
			Help: "The number of destination networks the router forwards to.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "vcoil", Subsystem: "egress_router", Name: "errors_total",
			Help: "Failures to apply the Egress or its client pods to the router, by operation.",
		}, []string{"operation"}),
	}
	for _, op := range []string{opParse, opSetDestinations, opAddPeer, opRemovePeer} {
		m.errors.WithLabelValues(op) // exported as 0 from the start
	}
	for _, c := range []prometheus.Collector{m.peers, m.destinations, m.errors} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) setPeers(n int) {
	if m != nil {
		m.peers.Set(float64(n))
	}
}

func (m *Metrics) setDestinations(n int) {
	if m != nil {
		m.destinations.Set(float64(n))
	}
}

func (m *Metrics) failed(op string) {
	if m != nil {
		m.errors.WithLabelValues(op).Inc()
	}
}
