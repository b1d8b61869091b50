package monitoring_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	prompromql "github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/vcoil/vcoil/v2/config/monitoring"
)

// An alert scenario: series (one a line, in the series notation of
// Prometheus' rule tests: "name{labels} 0+1x40", one sample a minute from
// time 0), and the alerts the expression gives at 30m, each as the
// labels named in want. The rules' "for" is not simulated: this is what
// the expression says at one instant.
type alertScenario struct {
	name   string
	alert  string
	series string
	want   []map[string]string // nil: the alert does not fire
}

var alertScenarios = []alertScenario{
	{"a pool whose blocks are all carved out is exhausted, one with blocks left is not", "VcoilPoolExhausted", `
vcoil_pool_blocks_max{pool="default", pod="c1"} 16x40
vcoil_pool_blocks_allocated{pool="default", pod="c1"} 10+1x6 16x40
vcoil_pool_blocks_max{pool="other", pod="c1"} 16x40
vcoil_pool_blocks_allocated{pool="other", pod="c1"} 15x40
vcoil_pool_blocks_max{pool="empty", pod="c1"} 0x40
vcoil_pool_blocks_allocated{pool="empty", pod="c1"} 0x40`,
		[]map[string]string{{"pool": "default"}}},
	{"a pool past 90% of its blocks is nearly exhausted, one of no size is not", "VcoilPoolNearlyExhausted", `
vcoil_pool_blocks_max{pool="default", pod="c1"} 16x40
vcoil_pool_blocks_allocated{pool="default", pod="c1"} 15x40
vcoil_pool_blocks_max{pool="other", pod="c1"} 16x40
vcoil_pool_blocks_allocated{pool="other", pod="c1"} 14x40
vcoil_pool_blocks_max{pool="empty", pod="c1"} 0x40
vcoil_pool_blocks_allocated{pool="empty", pod="c1"} 0x40`,
		[]map[string]string{{"pool": "default"}}},
	{"a LoadBalancer pool whose addresses are all held is exhausted", "VcoilLoadBalancerPoolExhausted", `
vcoil_pool_addresses_max{pool="lb", pod="c1"} 8x40
vcoil_pool_addresses_allocated{pool="lb", pod="c1"} 8x40
vcoil_pool_addresses_max{pool="lb2", pod="c1"} 8x40
vcoil_pool_addresses_allocated{pool="lb2", pod="c1"} 7x40`,
		[]map[string]string{{"pool": "lb"}}},
	{"ADDs failing with pool exhausted (101) alert, other codes do not", "VcoilPodsOutOfAddresses", `
vcoil_cni_errors_total{node="n1", verb="ADD", code="101"} 0+1x40
vcoil_cni_errors_total{node="n2", verb="ADD", code="11"} 0+1x40
vcoil_cni_errors_total{node="n3", verb="ADD", code="101"} 5x40`,
		[]map[string]string{{"node": "n1"}}},
	{"CNI errors increasing alert by node and verb, errors of the past do not", "VcoilCNIErrors", `
vcoil_cni_errors_total{node="n1", verb="ADD", code="11"} 0+1x40
vcoil_cni_errors_total{node="n1", verb="DEL", code="100"} 3x40
vcoil_cni_errors_total{node="n2", verb="DEL", code="100"} 0+2x40`,
		[]map[string]string{{"node": "n1", "verb": "ADD"}, {"node": "n2", "verb": "DEL"}}},
	{"ADDs slower than 5 s at the 99th percentile alert", "VcoilCNISlow", `
vcoil_cni_request_duration_seconds_bucket{node="n1", verb="ADD", le="1"} 0+90x40
vcoil_cni_request_duration_seconds_bucket{node="n1", verb="ADD", le="5"} 0+90x40
vcoil_cni_request_duration_seconds_bucket{node="n1", verb="ADD", le="10"} 0+100x40
vcoil_cni_request_duration_seconds_bucket{node="n1", verb="ADD", le="+Inf"} 0+100x40
vcoil_cni_request_duration_seconds_bucket{node="n2", verb="ADD", le="1"} 0+100x40
vcoil_cni_request_duration_seconds_bucket{node="n2", verb="ADD", le="5"} 0+100x40
vcoil_cni_request_duration_seconds_bucket{node="n2", verb="ADD", le="10"} 0+100x40
vcoil_cni_request_duration_seconds_bucket{node="n2", verb="ADD", le="+Inf"} 0+100x40`,
		[]map[string]string{{"node": "n1"}}},
	{"failing service syncs alert on Linux and VPP nodes", "VcoilServiceSyncFailing", `
vcoil_service_sync_failures_total{node="n1", kind="update"} 0+1x40
vcoil_vpp_services_sync_failures_total{node="n2", kind="resync"} 0+1x40
vcoil_service_sync_failures_total{node="n3", kind="update"} 2x40`,
		[]map[string]string{{"node": "n1"}, {"node": "n2"}}},
	{"failing policy renders alert on Linux and VPP nodes", "VcoilPolicyRenderFailing", `
vcoil_policy_sync_failures_total{node="n1", kind="update"} 0+1x40
vcoil_vpp_policy_sync_failures_total{node="n2", kind="update"} 0+1x40
vcoil_vpp_policy_sync_failures_total{node="n3", kind="update"} 4x40`,
		[]map[string]string{{"node": "n1"}, {"node": "n2"}}},
	{"a vcoild without VPP alerts", "VcoilVPPLost", `
vcoil_vpp_connected{node="n1"} 1x20 0x20
vcoil_vpp_connected{node="n2"} 1x40`,
		[]map[string]string{{"node": "n1"}}},
	{"a VPP restart in the last 15 minutes alerts, an older one does not", "VcoilVPPRestarted", `
vcoil_vpp_restarts_total{node="n1"} 0x20 1x20
vcoil_vpp_restarts_total{node="n2"} 0x5 1x35`,
		[]map[string]string{{"node": "n1"}}},
	{"an Egress router failing to apply alerts", "VcoilEgressRouterErrors", `
vcoil_egress_router_errors_total{namespace="app", pod="router-0", operation="add_peer"} 0+1x40
vcoil_egress_router_errors_total{namespace="app", pod="router-1", operation="add_peer"} 0x40`,
		[]map[string]string{{"namespace": "app", "pod": "router-0", "operation": "add_peer"}}},
	{"a vcoild Prometheus cannot scrape alerts", "VcoildDown", `
up{job="vcoild", node="n1"} 0x40
up{job="vcoild", node="n2"} 1x40
up{job="vcoil-controller", pod="c1"} 0x40`,
		[]map[string]string{{"job": "vcoild", "node": "n1"}}},
	{"no vcoil-controller replica up alerts", "VcoilControllerDown", `
up{job="vcoil-controller", pod="c1"} 0x40
up{job="vcoil-controller", pod="c2"} 0x40`,
		[]map[string]string{{"job": "vcoil-controller"}}},
	{"one vcoil-controller replica up is enough", "VcoilControllerDown", `
up{job="vcoil-controller", pod="c1"} 0x40
up{job="vcoil-controller", pod="c2"} 1x40`,
		nil},
	{"no vcoil-controller scraped at all alerts", "VcoilControllerDown", `
up{job="vcoild", node="n1"} 1x40`,
		[]map[string]string{{"job": "vcoil-controller"}}},
	{"a controller of vcoil-controller failing alerts", "VcoilControllerReconcileErrors", `
controller_runtime_reconcile_errors_total{job="vcoil-controller", controller="blockrequest", pod="c1"} 0+1x40
controller_runtime_reconcile_errors_total{job="vcoil-controller", controller="addresspool", pod="c1"} 1x40
controller_runtime_reconcile_errors_total{job="vcoild", controller="pod", node="n1"} 0+1x40`,
		[]map[string]string{{"controller": "blockrequest"}}},
}

func TestAlertsFireOnTheirConditionOnly(t *testing.T) {
	groups, errs := rulefmt.Parse(monitoring.Rules, false, model.LegacyValidation, promql, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	exprs := map[string]string{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				exprs[r.Alert] = r.Expr
			}
		}
	}
	// Every alert fires in at least one scenario.
	fires := map[string]bool{}
	for _, s := range alertScenarios {
		fires[s.alert] = fires[s.alert] || len(s.want) > 0
	}
	for a := range exprs {
		if !fires[a] {
			t.Errorf("alert %s fires in no scenario of alertScenarios", a)
		}
	}

	engine := prompromql.NewEngine(prompromql.EngineOpts{MaxSamples: 100000, Timeout: time.Minute})
	for _, s := range alertScenarios {
		t.Run(s.name, func(t *testing.T) {
			expr, ok := exprs[s.alert]
			if !ok {
				t.Fatalf("no alert %s in vcoil-rules.yaml", s.alert)
			}
			storage, err := loadSeries(s.series)
			if err != nil {
				t.Fatal(err)
			}
			q, err := engine.NewInstantQuery(context.Background(), storage, nil, expr, time.Unix(0, 0).Add(30*time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			res := q.Exec(context.Background())
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			vec, err := res.Vector()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, sample := range vec {
				l := map[string]string{}
				if len(s.want) > 0 {
					for k := range s.want[0] {
						l[k] = sample.Metric.Get(k)
					}
				} else {
					l["series"] = sample.Metric.String()
				}
				got = append(got, fmt.Sprint(l))
			}
			var want []string
			for _, w := range s.want {
				want = append(want, fmt.Sprint(w))
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("%s = [%s], want [%s]", s.alert, strings.Join(got, " "), strings.Join(want, " "))
			}
		})
	}
}

// loadSeries reads series in the notation of Prometheus' rule tests into
// a queryable that holds them in memory.
func loadSeries(text string) (storage.Queryable, error) {
	var series []storage.Series
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		lset, values, err := promql.ParseSeriesDesc(line)
		if err != nil {
			return nil, fmt.Errorf("series %q: %w", line, err)
		}
		var samples []chunks.Sample
		for i, v := range values {
			if !v.Omitted {
				samples = append(samples, fSample{t: int64(i) * time.Minute.Milliseconds(), f: v.Value})
			}
		}
		series = append(series, storage.NewListSeries(lset, samples))
	}
	return &storage.MockQueryable{MockQuerier: &storage.MockQuerier{
		SelectMockFunction: func(_ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
			var out []storage.Series
			for _, s := range series {
				match := true
				for _, m := range ms {
					match = match && m.Matches(s.Labels().Get(m.Name))
				}
				if match {
					out = append(out, s)
				}
			}
			slices.SortFunc(out, func(a, b storage.Series) int { return labels.Compare(a.Labels(), b.Labels()) })
			return &seriesSet{series: out, i: -1}
		},
	}}, nil
}

type seriesSet struct {
	series []storage.Series
	i      int
}

func (s *seriesSet) Next() bool                        { s.i++; return s.i < len(s.series) }
func (s *seriesSet) At() storage.Series                { return s.series[s.i] }
func (s *seriesSet) Err() error                        { return nil }
func (s *seriesSet) Warnings() annotations.Annotations { return nil }

// fSample is a float sample.
type fSample struct {
	t int64
	f float64
}

func (s fSample) T() int64                      { return s.t }
func (s fSample) ST() int64                     { return 0 }
func (s fSample) F() float64                    { return s.f }
func (s fSample) H() *histogram.Histogram       { return nil }
func (s fSample) FH() *histogram.FloatHistogram { return nil }
func (s fSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s fSample) Copy() chunks.Sample           { return s }
