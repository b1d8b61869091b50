package nodeipam

import (
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics count how allocations met the pool's blocks: those that had to
// wait for a block (an ADD waiting on vcoil-controller), and the blocks
// asked for ahead by the low watermark.
type metrics struct {
	waits      *prometheus.CounterVec
	prefetches *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, log logr.Logger) *metrics {
	m := &metrics{
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vcoil_node_allocation_waits_total",
			Help: "Allocations that found the pool's blocks full and waited for a block from vcoil-controller, by pool and by what they waited for (request: a request they started or joined; prefetch: the watermark's request already under way).",
		}, []string{"pool", "waited_for"}),
		prefetches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vcoil_node_block_prefetches_total",
			Help: "Blocks asked for ahead because a pool's free addresses fell to the low watermark, by pool and result (ok, failed).",
		}, []string{"pool", "result"}),
	}
	if reg == nil {
		return m
	}
	for _, c := range []prometheus.Collector{m.waits, m.prefetches} {
		if err := reg.Register(c); err != nil {
			// A second NodeIPAM of one registry (tests) counts on its own.
			log.V(1).Info("node IPAM metrics not registered", "error", err.Error())
		}
	}
	return m
}

func (m *metrics) waited(pool string, prefetch bool) {
	what := "request"
	if prefetch {
		what = "prefetch"
	}
	m.waits.WithLabelValues(pool, what).Inc()
}

func (m *metrics) prefetched(pool string, err error) {
	result := "ok"
	if err != nil {
		result = "failed"
	}
	m.prefetches.WithLabelValues(pool, result).Inc()
}
