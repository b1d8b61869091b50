package vpp

import (
	"github.com/prometheus/client_golang/prometheus"
)

// connectionMetrics tell how vcoild's connection to VPP fares. The
// dashboard and the alert rules (docs/operations.md) use these names.
type connectionMetrics struct {
	connected      prometheus.Gauge
	restarts       prometheus.Counter
	resyncDuration prometheus.Histogram
}

func newConnectionMetrics() connectionMetrics {
	return connectionMetrics{
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "vcoil", Subsystem: "vpp", Name: "connected",
			Help: "1 while vcoild holds an API connection to VPP that answers its control ping, else 0.",
		}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "vcoil", Subsystem: "vpp", Name: "restarts_total",
			Help: "New VPP incarnations after the first since vcoild started: VPP restarted, or vcoild connected to it again.",
		}),
		resyncDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "vcoil", Subsystem: "vpp", Name: "resync_duration_seconds",
			Help: "Time of each complete sync of vcoild's desired state (node, pods, blocks, NAT roles) into a new VPP incarnation, the first one included.",
			// From a node with no pods to one with hundreds of TAPs.
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}),
	}
}

func (m connectionMetrics) register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.connected, m.restarts, m.resyncDuration} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
