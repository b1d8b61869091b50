package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
)

// PoolMetrics are the gauges vcoil-controller exports per AddressPool.
type PoolMetrics struct {
	blocksMax       *prometheus.GaugeVec
	blocksAllocated *prometheus.GaugeVec
	// LoadBalancer pools.
	addressesMax       *prometheus.GaugeVec
	addressesAllocated *prometheus.GaugeVec
}

// NewPoolMetrics creates the pool gauges and registers them with reg
// (controller-runtime's metrics.Registry in vcoil-controller).
func NewPoolMetrics(reg prometheus.Registerer) (*PoolMetrics, error) {
	m := &PoolMetrics{
		blocksMax: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "vcoil",
			Subsystem: "pool",
			Name:      "blocks_max",
			Help:      "The number of address blocks the pool's subnets can hold.",
		}, []string{"pool"}),
		blocksAllocated: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "vcoil",
			Subsystem: "pool",
			Name:      "blocks_allocated",
			Help:      "The number of address blocks carved from the pool.",
		}, []string{"pool"}),
		addressesMax: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "vcoil",
			Subsystem: "pool",
			Name:      "addresses_max",
			Help:      "The number of addresses a LoadBalancer pool can give to Services.",
		}, []string{"pool"}),
		addressesAllocated: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "vcoil",
			Subsystem: "pool",
			Name:      "addresses_allocated",
			Help:      "The number of a LoadBalancer pool's addresses held by Services.",
		}, []string{"pool"}),
	}
	for _, c := range []prometheus.Collector{m.blocksMax, m.blocksAllocated, m.addressesMax, m.addressesAllocated} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *PoolMetrics) set(pool string, blocksMax, allocated int64) {
	m.blocksMax.WithLabelValues(pool).Set(float64(blocksMax))
	m.blocksAllocated.WithLabelValues(pool).Set(float64(allocated))
}

func (m *PoolMetrics) forget(pool string) {
	m.blocksMax.DeleteLabelValues(pool)
	m.blocksAllocated.DeleteLabelValues(pool)
}

func (m *PoolMetrics) setAddresses(pool string, addressesMax, allocated int64) {
	m.addressesMax.WithLabelValues(pool).Set(float64(addressesMax))
	m.addressesAllocated.WithLabelValues(pool).Set(float64(allocated))
}

func (m *PoolMetrics) forgetAddresses(pool string) {
	m.addressesMax.DeleteLabelValues(pool)
	m.addressesAllocated.DeleteLabelValues(pool)
}
