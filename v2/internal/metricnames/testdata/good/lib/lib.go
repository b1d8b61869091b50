// Package lib declares a metric in another package of the module.
package lib

import "github.com/prometheus/client_golang/prometheus"

// Subsystem is used by main's GaugeOpts.
const Subsystem = "pool"

var desc = prometheus.NewDesc("demo_lib_addresses", "h", []string{"pool"}, nil)

// Register registers nothing; desc is found in the source.
func Register(prometheus.Registerer) { _ = desc }
