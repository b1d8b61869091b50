// A program whose metric names metricnames cannot evaluate.
package main

import (
	"os"

	"github.com/prometheus/client_golang/prometheus"
)

func counter(name string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "demo", Name: name, Help: "h"})
}

func main() {
	_ = counter("errors_total")
	opts := prometheus.GaugeOpts{Name: "demo_ok", Help: "h"}
	opts.Name = os.Args[0]
	_ = prometheus.NewGauge(opts)
	_ = prometheus.NewDesc(os.Getenv("NAME"), "h", nil, nil)
}
