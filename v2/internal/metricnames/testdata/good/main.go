// A program whose metrics metricnames must find, each way a name is given.
package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/vcoil/vcoil/v2/internal/metricnames/testdata/good/lib"
)

const namespace = "demo"

func main() {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Subsystem: "cni", Name: "errors_total", Help: "h"}),
		prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "latency_seconds", Help: "h"}, []string{"verb"}),
		prometheus.NewSummary(prometheus.SummaryOpts{Name: "demo_size_bytes", Help: "h"}),
		prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: lib.Subsystem, Name: "free", Help: "h"}, nil),
	)
	_ = prometheus.NewDesc(prometheus.BuildFQName(namespace, "node", "blocks"), "h", nil, nil)
	_ = prometheus.V2.NewDesc("demo_v2_total", "h", nil, nil)
	lib.Register(reg)
	_ = lib.NewQueue("jobs", "h")
	_ = lib.NewQueue(namespace+"_mail", "h"+namespace)
}
