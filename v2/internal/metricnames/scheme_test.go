package metricnames_test

import (
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/internal/metricnames"
)

// metrics builds what Load returns for the names and kinds given.
func metrics(kinds map[string]metricnames.Kind) map[string]metricnames.Metric {
	out := map[string]metricnames.Metric{}
	for name, k := range kinds {
		m := metricnames.Metric{Name: name, Kind: k, Pos: "x.go:1:1"}
		for _, s := range m.Series() {
			out[s] = m
		}
	}
	return out
}

// renderer is the whole set under prefix.
func renderer(prefix string) map[string]metricnames.Kind {
	return map[string]metricnames.Kind{
		prefix + "_sync_duration_seconds":       metricnames.Histogram,
		prefix + "_sync_failures_total":         metricnames.Counter,
		prefix + "_last_sync_timestamp_seconds": metricnames.Gauge,
	}
}

func with(sets ...map[string]metricnames.Kind) map[string]metricnames.Kind {
	out := map[string]metricnames.Kind{}
	for _, s := range sets {
		for n, k := range s {
			out[n] = k
		}
	}
	return out
}

func TestCheckSyncScheme(t *testing.T) {
	others := map[string]metricnames.Kind{
		// Names of other things, with words alike, pass.
		"demo_cni_errors_total":             metricnames.Counter,
		"demo_cni_request_duration_seconds": metricnames.Histogram,
		"demo_policy_denied_packets_total":  metricnames.Desc,
		"demo_service_nftables_objects":     metricnames.Gauge,
		"demo_x_updates_total":              metricnames.Counter,
	}
	for _, tc := range []struct {
		name   string
		kinds  map[string]metricnames.Kind
		exempt map[string]string
		want   []string // nil: accepted
	}{
		{"renderers with the whole set pass", with(renderer("demo_service"), renderer("demo_vpp_policy"), others), nil, nil},
		{"a set without its timestamp is refused", with(renderer("demo_a"), map[string]metricnames.Kind{
			"demo_b_sync_duration_seconds": metricnames.Histogram, "demo_b_sync_failures_total": metricnames.Counter,
		}), nil, []string{"demo_b_last_sync_timestamp_seconds is missing: demo_b has _sync_duration_seconds, _sync_failures_total"}},
		{"a name of the set of another kind is refused", with(renderer("demo_a"), map[string]metricnames.Kind{
			"demo_a_sync_failures_total": metricnames.Gauge,
		}), nil, []string{"demo_a_sync_failures_total (x.go:1:1) is a gauge: the set's _sync_failures_total is a counter"}},
		// The spellings the set replaced, and others.
		{"render_failures_total is refused", with(renderer("demo_a"), map[string]metricnames.Kind{"demo_b_render_failures_total": metricnames.Counter}),
			nil, []string{"demo_b_render_failures_total (x.go:1:1) counts failures of an operation"}},
		{"render_errors_total is refused", with(renderer("demo_a"), map[string]metricnames.Kind{"demo_b_render_errors_total": metricnames.Counter}),
			nil, []string{"demo_b_render_errors_total (x.go:1:1) counts failures"}},
		{"sync_errors_total is refused", with(renderer("demo_a"), map[string]metricnames.Kind{"demo_b_sync_errors_total": metricnames.Counter}),
			nil, []string{"demo_b_sync_errors_total (x.go:1:1) counts failures"}},
		{"a fifth spelling is refused", with(renderer("demo_a"), map[string]metricnames.Kind{"demo_b_apply_failed_total": metricnames.Counter}),
			nil, []string{"demo_b_apply_failed_total (x.go:1:1) counts failures"}},
		{"render_duration_seconds is refused", with(renderer("demo_a"), map[string]metricnames.Kind{"demo_b_render_duration_seconds": metricnames.Histogram}),
			nil, []string{"demo_b_render_duration_seconds (x.go:1:1) times an operation"}},
		{"last_render_timestamp_seconds is refused", with(renderer("demo_a"), map[string]metricnames.Kind{"demo_b_last_render_timestamp_seconds": metricnames.Gauge}),
			nil, []string{"demo_b_last_render_timestamp_seconds (x.go:1:1) times an operation"}},
		{"an exempt name passes", with(renderer("demo_a"), map[string]metricnames.Kind{"demo_b_resync_duration_seconds": metricnames.Histogram}),
			map[string]string{"demo_b_resync_duration_seconds": "not a renderer"}, nil},
		{"an exempt missing name passes", map[string]metricnames.Kind{
			"demo_b_sync_duration_seconds": metricnames.Histogram, "demo_b_sync_failures_total": metricnames.Counter,
		}, map[string]string{"demo_b_last_sync_timestamp_seconds": "not yet"}, nil},
		{"an exemption no name needs is refused", renderer("demo_a"), map[string]string{"demo_a_sync_failures_total": "once"},
			[]string{"demo_a_sync_failures_total is exempt (once) but follows the scheme, or is gone: remove the exemption"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := metricnames.CheckSyncScheme(metrics(tc.kinds), tc.exempt)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
