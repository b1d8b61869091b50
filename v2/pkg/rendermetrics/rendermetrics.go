// Package rendermetrics makes the metrics every renderer exports about its
// syncs (a renderer makes a dataplane hold a desired state: the nftables
// service and policy renderers, the VPP ACL policy renderer), so that all
// spell them alike, under the renderer's own prefix:
//
//	vcoil_<subsystem>_sync_duration_seconds{kind}   histogram
//	vcoil_<subsystem>_sync_failures_total{kind}     counter
//	vcoil_<subsystem>_last_sync_timestamp_seconds   gauge
//
// kind is resync (the renderer made the dataplane hold everything it wants)
// or update (it applied one transaction's changes).
//
// Why these names:
//   - sync is what every renderer does, whether it applies a transaction or
//     everything; "render" is the name of one renderer's method, not of
//     what the metrics measure. The service renderers (nftables and NAT44)
//     already said sync.
//   - failures, not errors: the counter counts syncs that failed, one each,
//     however many errors one met; the NAT44 renderer already said so.
//   - last_sync_timestamp_seconds, a gauge of Unix time set by each sync
//     that succeeded: time() minus it is how long the dataplane has gone
//     without a good sync, which a failure counter alone cannot tell once
//     the failures stop (or the syncs do).
//   - one name per renderer, not one family with a renderer label: the
//     subsystem is the prefix of the renderer's other metrics too
//     (vcoil_service_nftables_objects, vcoil_vpp_policy_acls), so a
//     renderer's metrics read together, and renderers that never run on
//     the same node (nftables on Linux nodes, VPP's on VPP nodes) are not
//     mixed in one series set.
//
// Each call of New passes its subsystem as a constant: the metric name check
// (v2/internal/metricnames) reads the names at the calls, and checks that
// every renderer exports the whole set and no other spelling of it.
package rendermetrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Kind is what one sync did: the label kind's value.
type Kind string

const (
	// Resync made the dataplane hold everything the renderer wants.
	Resync Kind = "resync"
	// Update applied one transaction's changes.
	Update Kind = "update"
)

// Buckets of the duration histogram: from an element-only transaction
// (well under a millisecond) to a resync of thousands of objects.
var buckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// Syncs are the sync metrics of one renderer.
type Syncs struct {
	duration *prometheus.HistogramVec
	failures *prometheus.CounterVec
	last     prometheus.Gauge
}

// New makes the sync metrics of a renderer, named vcoil_<subsystem>_..., and
// registers them with reg (not when reg is nil: the renderer was given no
// registry). renderer names it in their help ("the nftables service
// renderer"). subsystem must be a constant for the name check to read it.
func New(reg prometheus.Registerer, subsystem, renderer string) (*Syncs, error) {
	s := &Syncs{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "vcoil", Subsystem: subsystem, Name: "sync_duration_seconds",
			Help:    fmt.Sprintf("Time %s took to sync the dataplane, by kind (resync: everything; update: one transaction's changes).", renderer),
			Buckets: buckets,
		}, []string{"kind"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "vcoil", Subsystem: subsystem, Name: "sync_failures_total",
			Help: fmt.Sprintf("Syncs of %s that failed, by kind (resync, update).", renderer),
		}, []string{"kind"}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "vcoil", Subsystem: subsystem, Name: "last_sync_timestamp_seconds",
			Help: fmt.Sprintf("Unix time of the last sync of %s that succeeded, of either kind.", renderer),
		}),
	}
	// Exported as 0 from the start, so that the first failure is an
	// increase.
	for _, k := range []Kind{Resync, Update} {
		s.failures.WithLabelValues(string(k))
	}
	if reg == nil {
		return s, nil
	}
	for _, c := range []prometheus.Collector{s.duration, s.failures, s.last} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register the sync metrics of %s: %w", renderer, err)
		}
	}
	return s, nil
}

// Observe records one sync of kind that started at start and ended now
// with err.
func (s *Syncs) Observe(kind Kind, start time.Time, err error) {
	s.duration.WithLabelValues(string(kind)).Observe(time.Since(start).Seconds())
	if err != nil {
		s.failures.WithLabelValues(string(kind)).Inc()
		return
	}
	s.last.SetToCurrentTime()
}
