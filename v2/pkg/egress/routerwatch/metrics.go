package routerwatch

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

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

// Drops is what the drop metric reads from package egress's Router, at
// each scrape.
type Drops interface {
	// UnknownClientDrops is the number of tunnel packets the router
	// refused for coming from an address that is no client's.
	UnknownClientDrops(ctx context.Context) (uint64, error)
}

var descUnknownClientDrops = prometheus.NewDesc("vcoil_egress_router_unknown_client_drops_total",
	"Tunnel packets (UDP to the VXLAN or FoU port) the router dropped because their source is no client pod's address: pods that are no client of the Egress, or a client the router has not yet learnt of.",
	nil, nil)

// dropsCollector reads the router's drop counter at each scrape; a failed
// read leaves the metric out of that scrape.
type dropsCollector struct{ d Drops }

func (c dropsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descUnknownClientDrops }

func (c dropsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := c.d.UnknownClientDrops(ctx)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descUnknownClientDrops, prometheus.CounterValue, float64(n))
}

// NewMetrics creates the router's metrics and registers them with reg
// (controller-runtime's metrics.Registry in vcoil-egress); drops, when
// not nil, is read for the drop counter.
func NewMetrics(reg prometheus.Registerer, drops Drops) (*Metrics, error) {
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
	cs := []prometheus.Collector{m.peers, m.destinations, m.errors}
	if drops != nil {
		cs = append(cs, dropsCollector{drops})
	}
	for _, c := range cs {
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
