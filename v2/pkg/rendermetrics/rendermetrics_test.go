package rendermetrics_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/vcoil/vcoil/v2/pkg/rendermetrics"
)

func TestSyncsCountDurationsFailuresAndTheLastSuccess(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := rendermetrics.New(reg, "demo", "the demo renderer")
	if err != nil {
		t.Fatal(err)
	}
	// Before any sync: the failures are exported as 0, the last success
	// as 0 (never).
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP vcoil_demo_sync_failures_total Syncs of the demo renderer that failed, by kind (resync, update).
# TYPE vcoil_demo_sync_failures_total counter
vcoil_demo_sync_failures_total{kind="resync"} 0
vcoil_demo_sync_failures_total{kind="update"} 0
# HELP vcoil_demo_last_sync_timestamp_seconds Unix time of the last sync of the demo renderer that succeeded, of either kind.
# TYPE vcoil_demo_last_sync_timestamp_seconds gauge
vcoil_demo_last_sync_timestamp_seconds 0
`)); err != nil {
		t.Fatal(err)
	}

	before := time.Now()
	s.Observe(rendermetrics.Resync, before, nil)
	s.Observe(rendermetrics.Update, time.Now(), errors.New("boom"))
	s.Observe(rendermetrics.Update, time.Now(), errors.New("boom"))
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP vcoil_demo_sync_failures_total Syncs of the demo renderer that failed, by kind (resync, update).
# TYPE vcoil_demo_sync_failures_total counter
vcoil_demo_sync_failures_total{kind="resync"} 0
vcoil_demo_sync_failures_total{kind="update"} 2
`), "vcoil_demo_sync_failures_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "vcoil_demo_sync_duration_seconds"); n != 2 {
		t.Errorf("duration series: %d, want 2 (resync, update)", n)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	var last float64
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "vcoil_demo_sync_duration_seconds":
				counts[m.GetLabel()[0].GetValue()] = m.GetHistogram().GetSampleCount()
			case "vcoil_demo_last_sync_timestamp_seconds":
				last = m.GetGauge().GetValue()
			}
		}
	}
	if counts["resync"] != 1 || counts["update"] != 2 {
		t.Errorf("durations observed by kind: %v, want resync 1, update 2 (failed syncs take time too)", counts)
	}
	// The failed updates after the resync leave its time.
	if last < float64(before.Unix()) || last > float64(time.Now().Unix()+1) {
		t.Errorf("last sync at %v, want the resync's (%v)", last, before.Unix())
	}
}

func TestRenderersShareARegistryUnderTheirSubsystems(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := rendermetrics.New(reg, "a", "renderer a"); err != nil {
		t.Fatal(err)
	}
	if _, err := rendermetrics.New(reg, "b", "renderer b"); err != nil {
		t.Fatal(err)
	}
	// The same subsystem twice is a second renderer of the same names.
	_, err := rendermetrics.New(reg, "a", "renderer a again")
	if err == nil || !strings.Contains(err.Error(), "renderer a again") {
		t.Errorf("the same subsystem twice: %v, want an error naming the renderer", err)
	}
}

func TestWithoutARegistryTheMetricsWorkUnregistered(t *testing.T) {
	s, err := rendermetrics.New(nil, "demo", "the demo renderer")
	if err != nil {
		t.Fatal(err)
	}
	s.Observe(rendermetrics.Update, time.Now(), nil)
}
