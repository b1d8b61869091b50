// Package lib declares metrics in another package of the module.
package lib

import "github.com/prometheus/client_golang/prometheus"

// Subsystem is used by main's GaugeOpts.
const Subsystem = "pool"

var desc = prometheus.NewDesc("demo_lib_addresses", "h", []string{"pool"}, nil)

// Register registers nothing; desc is found in the source.
func Register(prometheus.Registerer) { _ = desc }

// Queue is the set of metrics NewQueue makes for one queue.
type Queue struct {
	failures prometheus.Counter
	items    *prometheus.Desc
}

// NewQueue makes the metrics of a queue: their names are made of the
// subsystem each call passes.
func NewQueue(subsystem, help string) Queue {
	return Queue{
		failures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "demo", Subsystem: subsystem, Name: "sync_failures_total", Help: help}),
		items:    prometheus.NewDesc(prometheus.BuildFQName("demo", subsystem, "items"), help, nil, nil),
	}
}
