package routerwatch

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// drops is a Drops that returns n, or err.
type drops struct {
	n   uint64
	err error
}

func (d *drops) UnknownClientDrops(context.Context) (uint64, error) { return d.n, d.err }

// The drop counter is the Router's, read at each scrape; a failed read
// leaves it out of the scrape rather than exporting a false value.
func TestTheDropMetricIsTheRoutersCounterAtEachScrape(t *testing.T) {
	const name = "vcoil_egress_router_unknown_client_drops_total"
	d := &drops{n: 7}
	reg := prometheus.NewRegistry()
	if _, err := NewMetrics(reg, d); err != nil {
		t.Fatal(err)
	}
	value := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name && len(mf.GetMetric()) == 1 {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		t.Fatalf("no counter %s", name)
		return 0
	}
	if got := value(); got != 7 {
		t.Errorf("%s = %v, want 7", name, got)
	}
	d.n = 9
	if got := value(); got != 9 {
		t.Errorf("%s = %v after the router counted 9, want 9", name, got)
	}
	d.err = errors.New("no such table")
	if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 0 {
		t.Errorf("after a failed read: %d series (%v), want none", n, err)
	}
	// Without a Router to read, there is no such metric.
	reg2 := prometheus.NewRegistry()
	if _, err := NewMetrics(reg2, nil); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg2, name); err != nil || n != 0 {
		t.Errorf("without drops: %d series (%v), want none", n, err)
	}
}
