package metricnames_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/internal/metricnames"
)

func TestLoadFindsEveryMetricOfAProgramAndTheModulePackagesItImports(t *testing.T) {
	got, err := metricnames.Load(".", "./testdata/good")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]metricnames.Kind{
		"demo_cni_errors_total":       metricnames.Counter,
		"demo_latency_seconds_bucket": metricnames.Histogram,
		"demo_latency_seconds_sum":    metricnames.Histogram,
		"demo_latency_seconds_count":  metricnames.Histogram,
		"demo_size_bytes":             metricnames.Summary,
		"demo_size_bytes_sum":         metricnames.Summary,
		"demo_size_bytes_count":       metricnames.Summary,
		"demo_pool_free":              metricnames.Gauge,
		"demo_node_blocks":            metricnames.Desc,
		"demo_v2_total":               metricnames.Desc,
		"demo_lib_addresses":          metricnames.Desc,
		// lib.NewQueue's, at each of its calls.
		"demo_jobs_sync_failures_total":      metricnames.Counter,
		"demo_jobs_items":                    metricnames.Desc,
		"demo_demo_mail_sync_failures_total": metricnames.Counter,
		"demo_demo_mail_items":               metricnames.Desc,
	}
	if !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want))) {
		t.Fatalf("series = %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	for name, kind := range want {
		if got[name].Kind != kind {
			t.Errorf("%s: kind %s, want %s", name, got[name].Kind, kind)
		}
	}
	// A histogram's bare name is no series.
	if _, ok := got["demo_latency_seconds"]; ok {
		t.Error("the histogram's bare name is listed")
	}
	if p := got["demo_lib_addresses"].Pos; !strings.Contains(p, "lib.go:") {
		t.Errorf("demo_lib_addresses declared at %q, want lib.go", p)
	}
	// A name made of a parameter is declared where the call gives it.
	if p := got["demo_jobs_items"].Pos; !strings.Contains(p, "main.go:") {
		t.Errorf("demo_jobs_items declared at %q, want main.go (the call)", p)
	}
}

func TestLoadRefusesNamesItCannotEvaluate(t *testing.T) {
	_, err := metricnames.Load(".", "./testdata/bad")
	if err == nil {
		t.Fatal("no error for names that are not constants")
	}
	for _, want := range []string{
		"prometheus.CounterOpts literal: Name: name is not a string constant",
		"Name assigned outside an Opts literal",
		"NewDesc: fqName: os.Getenv(\"NAME\") is not a string constant",
		// A name that is a parameter, where a call passes no constant.
		"it is a parameter of counter, and this call passes os.Args[1]",
		// ... or the function changes it, or is called through a value.
		"prometheus.GaugeOpts literal: Name: name is a parameter gauge assigns to",
		"counter is used other than by a call",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
