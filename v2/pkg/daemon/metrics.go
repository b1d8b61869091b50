package daemon

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vcoil/vcoil/v2/pkg/ipam"
)

// Metrics are vcoild's per-node metrics.
type Metrics struct {
	duration *prometheus.HistogramVec
	phases   *prometheus.HistogramVec
	errors   *prometheus.CounterVec
}

// The phases of an ADD that vcoild times (vcoil_cni_add_phase_duration_seconds):
// where an ADD that is slow spent its time.
const (
	// PhaseRead reads the pod's namespace (its pool) and the pod (its
	// annotations).
	PhaseRead = "read"
	// PhaseAllocate takes an address, maybe waiting for a new block, and
	// writes the checkpoint.
	PhaseAllocate = "allocate"
	// PhaseWire wires the pod into the dataplane.
	PhaseWire = "wire"
	// PhasePolicies puts the pod's NetworkPolicy rules in.
	PhasePolicies = "policies"
	// PhaseEgress sets up the pod's Egress tunnels.
	PhaseEgress = "egress"
)

// BlockLister gives the node's blocks and their use (nodeipam.NodeIPAM).
type BlockLister interface {
	Blocks() []ipam.BlockUsage
}

// NewMetrics registers vcoild's metrics with reg. The address and block
// gauges are read from blocks at every scrape, so they cannot drift.
func NewMetrics(reg prometheus.Registerer, blocks BlockLister) (*Metrics, error) {
	m := &Metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "vcoil", Subsystem: "cni", Name: "request_duration_seconds",
			Help:    "Time vcoild took to answer a CNI request, by verb.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"verb"}),
		phases: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "vcoil", Subsystem: "cni", Name: "add_phase_duration_seconds",
			Help:    "Time the phases of a CNI ADD took in vcoild (read, allocate, wire, policies, egress); an ADD that ends early skips the rest.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"phase"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "vcoil", Subsystem: "cni", Name: "errors_total",
			Help: "CNI requests answered with an error, by verb and CNI error code.",
		}, []string{"verb", "code"}),
	}
	for _, c := range []prometheus.Collector{m.duration, m.phases, m.errors, &blockCollector{blocks: blocks}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe records a request's duration and, when *err is set, its code.
func (m *Metrics) observe(verb string, start time.Time, err *error) {
	if m == nil {
		return
	}
	m.duration.WithLabelValues(verb).Observe(time.Since(start).Seconds())
	if *err != nil {
		m.errors.WithLabelValues(verb, strconv.Itoa(int(errorCode(*err)))).Inc()
	}
}

// phase records that an ADD's phase, begun at *since, ended now, and
// moves *since to now for the next phase.
func (m *Metrics) phase(name string, since *time.Time) {
	now := time.Now()
	if m != nil {
		m.phases.WithLabelValues(name).Observe(now.Sub(*since).Seconds())
	}
	*since = now
}

var (
	addressesDesc = prometheus.NewDesc("vcoil_node_addresses_in_use", "Addresses of the pool given to pods on this node.", []string{"pool"}, nil)
	blocksDesc    = prometheus.NewDesc("vcoil_node_blocks", "Address blocks of the pool this node owns.", []string{"pool"}, nil)
	freeDesc      = prometheus.NewDesc("vcoil_node_addresses_free", "Addresses of the pool still free in this node's blocks.", []string{"pool"}, nil)
)

type blockCollector struct{ blocks BlockLister }

func (c *blockCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- addressesDesc
	ch <- blocksDesc
	ch <- freeDesc
}

func (c *blockCollector) Collect(ch chan<- prometheus.Metric) {
	type sums struct{ inUse, blocks, free int }
	by := map[string]*sums{}
	for _, b := range c.blocks.Blocks() {
		s := by[b.Pool]
		if s == nil {
			s = &sums{}
			by[b.Pool] = s
		}
		s.inUse += b.InUse
		s.blocks++
		s.free += b.Free
	}
	for pool, s := range by {
		ch <- prometheus.MustNewConstMetric(addressesDesc, prometheus.GaugeValue, float64(s.inUse), pool)
		ch <- prometheus.MustNewConstMetric(blocksDesc, prometheus.GaugeValue, float64(s.blocks), pool)
		ch <- prometheus.MustNewConstMetric(freeDesc, prometheus.GaugeValue, float64(s.free), pool)
	}
}
