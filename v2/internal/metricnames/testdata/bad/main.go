// A program whose metric names metricnames cannot evaluate.
package main

import (
	"os"

	"github.com/prometheus/client_golang/prometheus"
)

func counter(name string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "demo", Name: name, Help: "h"})
}

func gauge(name string) prometheus.Gauge {
	name += "_total"
	return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "demo", Name: name, Help: "h"})
}

func main() {
	_ = counter(os.Args[1])
	makeCounter := counter
	_ = makeCounter("hidden_total")
	_ = gauge("g")
	opts := prometheus.GaugeOpts{Name: "demo_ok", Help: "h"}
	opts.Name = os.Args[0]
	_ = prometheus.NewGauge(opts)
	_ = prometheus.NewDesc(os.Getenv("NAME"), "h", nil, nil)
}
