package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Record is one figure: one proxy, one size, one metric.
type Record struct {
	Proxy    string  `json:"proxy"`
	Services int     `json:"services"`
	Metric   string  `json:"metric"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit,omitempty"`
	Status   string  `json:"status"`
	Detail   string  `json:"detail,omitempty"`
	// Reached and Wanted are the endpoint addresses in the kernel when a
	// full sync timed out, and how many there were to write.
	Reached int `json:"reached,omitempty"`
	Wanted  int `json:"wanted,omitempty"`
	// Samples are the endpoint changes' latencies in milliseconds, in the
	// order of the changes (on the endpoint_changes record).
	Samples []float64 `json:"samples_ms,omitempty"`
}

// Statuses of a record.
const (
	StatusOK      = "ok"
	StatusTimeout = "timeout"
	StatusError   = "error"
	// StatusPartial: some endpoint changes never showed in time.
	StatusPartial = "partial"
)

// Metrics.
const (
	MetricFullSync      = "full_sync_seconds"
	MetricChangeP50     = "endpoint_change_p50_ms"
	MetricChangeP99     = "endpoint_change_p99_ms"
	MetricChangeSamples = "endpoint_changes"
	MetricRSS           = "rss_mb"
	MetricHWM           = "rss_peak_mb"
	MetricCPU           = "cpu_seconds"
	MetricChildCPU      = "nft_cpu_seconds"
)

// targets are the goals for vcoil at 10,000 Services.
var targets = map[string]string{
	MetricFullSync:  "≤ 2 s",
	MetricChangeP99: "≤ 40 ms",
	MetricRSS:       "≤ 150 MB",
}

// WriteJSONLines writes one JSON object per record.
func WriteJSONLines(w io.Writer, recs []Record) error {
	enc := json.NewEncoder(w)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// Markdown is the table of a run: a row per size and metric, vcoil beside
// kube-proxy.
func Markdown(recs []Record) string {
	var b strings.Builder
	b.WriteString("| services × 10 endpoints | metric | target (10,000) | vcoil | kube-proxy (nftables) |\n|---:|---|---|---:|---:|\n")
	var sizes []int
	for _, r := range recs {
		if !slices.Contains(sizes, r.Services) {
			sizes = append(sizes, r.Services)
		}
	}
	slices.Sort(sizes)
	metrics := []struct{ key, name string }{
		{MetricFullSync, "full sync"},
		{MetricChangeP50, "endpoint change, p50"},
		{MetricChangeP99, "endpoint change, p99"},
		{MetricRSS, "RSS 3 s after the full sync"},
		{MetricHWM, "peak RSS"},
		{MetricCPU, "CPU time until synced"},
		{MetricChildCPU, "CPU time of its nft runs"},
	}
	for _, n := range sizes {
		for _, m := range metrics {
			cell := func(proxy string) string { return cellOf(recs, proxy, n, m.key) }
			target := ""
			if n == 10000 {
				target = targets[m.key]
			}
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s |\n", n, m.name, target, cell("vcoil"), cell("kube-proxy"))
		}
	}
	return b.String()
}

func number(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// cellOf is the figure of one proxy, size and metric; where the full sync
// failed, its status stands for what was to be measured after it.
func cellOf(recs []Record, proxy string, n int, metric string) string {
	var syncFailed *Record
	for i, r := range recs {
		if r.Proxy != proxy || r.Services != n {
			continue
		}
		if r.Metric == MetricFullSync && r.Status != StatusOK {
			syncFailed = &recs[i]
		}
		if r.Metric != metric {
			continue
		}
		switch r.Status {
		case StatusOK:
			return number(r.Value) + " " + r.Unit
		case StatusPartial:
			// The detail's first clause: how many changes showed.
			seen, _, _ := strings.Cut(r.Detail, ";")
			return number(r.Value) + " " + r.Unit + " (" + seen + ")"
		}
		if r.Wanted > 0 {
			return fmt.Sprintf("%s (%d of %d addresses)", r.Status, r.Reached, r.Wanted)
		}
		return r.Status
	}
	if syncFailed != nil {
		return "not measured (full sync: " + syncFailed.Status + ")"
	}
	return "–"
}
