package monitoring_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"

	"github.com/vcoil/vcoil/v2/config/monitoring"
	"github.com/vcoil/vcoil/v2/internal/metricnames"
	"github.com/vcoil/vcoil/v2/internal/testenv"
)

// programs serve the /metrics that Prometheus scrapes: vcoild (:9388),
// vcoil-controller (:9386) and the Egress routers (vcoil-egress, :8080).
// The CNI plugin (vcoil) serves none.
var programs = []string{"./v2/cmd/vcoild", "./v2/cmd/vcoil-controller", "./v2/cmd/vcoil-egress"}

// frameworkMetrics are the names a query may use that vcoil's code does not
// declare, each with where it comes from. Nothing else outside the code's
// declarations is accepted.
var frameworkMetrics = map[string]string{
	"up": "Prometheus sets it for every target it scrapes: 1 when the scrape succeeded",
	"process_resident_memory_bytes": "client_golang's process collector, which controller-runtime registers " +
		"in the registry every manager of vcoil serves",
	"process_cpu_seconds_total": "client_golang's process collector (see process_resident_memory_bytes)",
	"controller_runtime_reconcile_errors_total": "controller-runtime counts the failed reconciles of every " +
		"controller of vcoil-controller, by controller",
}

// declaredMetrics are the metrics the programs declare, by series, read
// once per test binary.
var declaredMetrics = sync.OnceValues(func() (map[string]metricnames.Metric, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	return metricnames.Load(root, programs...)
})

// exported computes the series the programs export, once per test binary.
var exported = sync.OnceValues(func() (map[string]bool, error) {
	declared, err := declaredMetrics()
	if err != nil {
		return nil, err
	}
	names := map[string]bool{}
	for n := range declared {
		names[n] = true
	}
	for n := range frameworkMetrics {
		if declared[n].Name != "" {
			return nil, fmt.Errorf("%s is declared by vcoil (%s): remove it from frameworkMetrics", n, declared[n].Pos)
		}
		names[n] = true
	}
	return names, nil
})

func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	names, err := exported()
	if err != nil {
		t.Fatalf("the metrics the programs export: %v", err)
	}
	return names
}

var promql = parser.NewParser(parser.Options{})

// grafanaInterval matches Grafana's interval variables ($__rate_interval,
// ${__interval}, ...), which stand where PromQL wants a duration.
var grafanaInterval = regexp.MustCompile(`\$(__[a-z_]+|\{__[a-z_]+\})`)

// checkExpr parses a PromQL expression with Prometheus' parser and returns
// an error unless every metric it selects is in known. Grafana's interval
// variables are replaced by a duration first; other variables ($node) may
// only stand inside label values, where the parser takes them as text.
func checkExpr(expr string, known map[string]bool) error {
	e, err := promql.ParseExpr(grafanaInterval.ReplaceAllString(expr, "5m"))
	if err != nil {
		return fmt.Errorf("parse %q: %w", expr, err)
	}
	var errs []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
				name = m.Value
			}
		}
		switch {
		case name == "":
			errs = append(errs, fmt.Sprintf("selector %s names no metric", vs))
		case !known[name]:
			errs = append(errs, fmt.Sprintf("metric %s is exported by no vcoil program", name))
		}
		return nil
	})
	if len(errs) > 0 {
		return fmt.Errorf("%q: %s", expr, strings.Join(errs, "; "))
	}
	return nil
}

// Grafana's Prometheus variable queries.
var (
	labelValues = regexp.MustCompile(`^\s*label_values\((.+),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)
	queryResult = regexp.MustCompile(`^\s*query_result\((.+)\)\s*$`)
)

// checkVariableQuery checks a template variable's query: label_values with a
// series selector, or query_result. The forms that name no metric
// (label_values(label), metrics(...)) are refused: they check nothing.
func checkVariableQuery(q string, known map[string]bool) error {
	if m := labelValues.FindStringSubmatch(q); m != nil {
		return checkExpr(m[1], known)
	}
	if m := queryResult.FindStringSubmatch(q); m != nil {
		return checkExpr(m[1], known)
	}
	return fmt.Errorf("variable query %q is neither label_values(SELECTOR, LABEL) nor query_result(EXPR)", q)
}

func TestTheCheckerRefusesMisspeltAndUndeclaredMetrics(t *testing.T) {
	known := exportedNames(t)
	for _, tc := range []struct {
		name, expr, want string // want "" = accepted
	}{
		{"a counter of vcoild is accepted", `sum by (verb) (rate(vcoil_cni_errors_total{node=~"$node"}[$__rate_interval]))`, ""},
		{"a histogram's buckets are accepted", `histogram_quantile(0.99, sum by (le) (rate(vcoil_cni_request_duration_seconds_bucket[5m])))`, ""},
		{"a NewDesc gauge is accepted", `vcoil_node_blocks`, ""},
		{"a name given as __name__ is checked", `{__name__="vcoil_pool_blocks_max"}`, ""},
		{"a framework metric on the list is accepted", `up{job="vcoild"} == 0`, ""},
		{"a misspelt metric is refused", `rate(vcoil_cni_error_total[5m])`, "metric vcoil_cni_error_total is exported by no vcoil program"},
		{"a misspelt metric in a binary expression is refused", `vcoil_pool_blocks_allocated / vcoil_pool_block_max`, "metric vcoil_pool_block_max is exported"},
		{"a misspelt name in __name__ is refused", `{__name__="vcoil_pool_blocks_maxx"}`, "metric vcoil_pool_blocks_maxx"},
		{"a histogram's bare name is refused (it exports _bucket, _sum, _count)", `vcoil_cni_request_duration_seconds`, "metric vcoil_cni_request_duration_seconds is exported"},
		{"a framework metric off the list is refused", `go_goroutines`, "metric go_goroutines is exported by no vcoil program"},
		{"a selector by regular expression is refused", `{__name__=~"vcoil_.*"}`, "names no metric"},
		{"invalid PromQL is refused", `sum by (verb (rate(vcoil_cni_errors_total[5m]))`, "parse"},
		{"a variable outside a label value is refused", `rate(vcoil_cni_errors_total[$window])`, "parse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkExpr(tc.expr, known)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Errorf("accepted, want an error with %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("error %q lacks %q", err, tc.want)
			}
		})
	}
	if err := checkVariableQuery(`label_values(up{job="vcoild"}, node)`, known); err != nil {
		t.Errorf("label_values of a selector: %v", err)
	}
	if err := checkVariableQuery(`label_values(vcoil_nodes_blocks, node)`, known); err == nil {
		t.Error("label_values of a misspelt metric accepted")
	}
	if err := checkVariableQuery(`label_values(node)`, known); err == nil {
		t.Error("label_values without a metric accepted")
	}
}

func TestEveryMetricTheProgramsExportIsAVcoilName(t *testing.T) {
	for name := range exportedNames(t) {
		if _, framework := frameworkMetrics[name]; framework {
			continue
		}
		if !strings.HasPrefix(name, "vcoil_") {
			t.Errorf("metric %s lacks the vcoil_ prefix", name)
		}
	}
}

// syncSchemeExemptions are the metrics that may break the one set of sync
// names every renderer exports (metricnames.CheckSyncScheme), each with
// why. The check fails when one is no longer needed.
var syncSchemeExemptions = map[string]string{
	"vcoil_vpp_services_last_sync_timestamp_seconds": "the NAT44 service renderer (VPP nodes) does not export it yet; " +
		"VcoilServiceSyncFailing reads its vcoil_vpp_services_sync_failures_total",
	"vcoil_vpp_resync_duration_seconds": "the VPP dataplane's sync of vcoild's whole state into a new VPP incarnation, " +
		"not a renderer's: one kind, no failures counter (VcoilVPPLost watches the connection)",
}

func TestRenderersSpellTheirSyncMetricsAlike(t *testing.T) {
	declared, err := declaredMetrics()
	if err != nil {
		t.Fatalf("the metrics the programs export: %v", err)
	}
	if err := metricnames.CheckSyncScheme(declared, syncSchemeExemptions); err != nil {
		t.Errorf("the renderers' sync metrics:\n%v", err)
	}
}

// panel is the part of a Grafana panel the test reads.
type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	Targets    []target    `json:"targets"`
	Panels     []panel     `json:"panels"` // a collapsed row's
	GridPos    struct {
		X, Y, W, H int
	} `json:"gridPos"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type target struct {
	Expr       string      `json:"expr"`
	RefID      string      `json:"refId"`
	Datasource *datasource `json:"datasource"`
}

type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Datasource *datasource     `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

// The data source of every query is the dashboard's variable, so that an
// imported dashboard works with whatever Prometheus the user picks.
const dsVariable = "${datasource}"

func TestDashboard(t *testing.T) {
	known := exportedNames(t)
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(monitoring.Dashboard))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("vcoil-dashboard.json is not valid JSON: %v", err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("dashboard title %q uid %q", d.Title, d.UID)
	}

	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		switch v.Type {
		case "datasource":
			var q string
			if err := json.Unmarshal(v.Query, &q); err != nil || q != "prometheus" {
				t.Errorf("variable %s: query %s, want \"prometheus\"", v.Name, v.Query)
			}
		case "query":
			if v.Datasource == nil || v.Datasource.UID != dsVariable {
				t.Errorf("variable %s: data source %+v, want uid %s", v.Name, v.Datasource, dsVariable)
			}
			// Grafana stores a query as a string or, since 10, as an object.
			var q string
			if json.Unmarshal(v.Query, &q) != nil {
				var obj struct{ Query string }
				if err := json.Unmarshal(v.Query, &obj); err != nil {
					t.Errorf("variable %s: query %s: %v", v.Name, v.Query, err)
				}
				q = obj.Query
			}
			if err := checkVariableQuery(q, known); err != nil {
				t.Errorf("variable %s: %v", v.Name, err)
			}
		default:
			t.Errorf("variable %s of type %s: the test knows datasource and query only", v.Name, v.Type)
		}
	}
	for _, want := range []string{"datasource", "node"} {
		if !vars[want] {
			t.Errorf("no template variable %s", want)
		}
	}

	ids := map[int]string{}
	cells := map[[2]int]string{} // grid cell: the panel there
	var walk func([]panel)
	n := 0
	walk = func(ps []panel) {
		for _, p := range ps {
			n++
			if p.Title == "" {
				t.Errorf("panel %d has no title", p.ID)
			}
			g := p.GridPos
			if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
				t.Errorf("panel %q: grid position %+v outside Grafana's 24 columns", p.Title, g)
			}
		grid:
			for x := g.X; x < g.X+g.W; x++ {
				for y := g.Y; y < g.Y+g.H; y++ {
					if other, taken := cells[[2]int{x, y}]; taken {
						t.Errorf("panel %q overlaps panel %q", p.Title, other)
						break grid
					}
					cells[[2]int{x, y}] = p.Title
				}
			}
			if other, dup := ids[p.ID]; dup {
				t.Errorf("panels %q and %q have the id %d", other, p.Title, p.ID)
			}
			ids[p.ID] = p.Title
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != dsVariable {
				t.Errorf("panel %q: data source %+v, want uid %s", p.Title, p.Datasource, dsVariable)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no target", p.Title)
			}
			for _, tg := range p.Targets {
				if tg.Datasource != nil && tg.Datasource.UID != dsVariable {
					t.Errorf("panel %q target %s: data source %+v, want uid %s", p.Title, tg.RefID, tg.Datasource, dsVariable)
				}
				if err := checkExpr(tg.Expr, known); err != nil {
					t.Errorf("panel %q target %s: %v", p.Title, tg.RefID, err)
				}
			}
		}
	}
	walk(d.Panels)
	t.Logf("%d panels, %d template variables checked", n, len(d.Templating.List))
}

// The severities the rules use, as Alertmanager routes usually expect.
var severities = []string{"critical", "warning", "info"}

func TestAlertRules(t *testing.T) {
	known := exportedNames(t)
	// Prometheus' own validation (as promtool check rules): the YAML, every
	// expression, the templates of labels and annotations.
	groups, errs := rulefmt.Parse(monitoring.Rules, false, model.LegacyValidation, promql, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Errorf("vcoil-rules.yaml: %v", err)
	}
	if groups == nil {
		t.FailNow()
	}
	// Recording rules (none yet) would add the names they record.
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				known[r.Record] = true
			}
		}
	}
	alerts := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			name := r.Record
			if r.Alert != "" {
				name = r.Alert
				alerts++
				if !slices.Contains(severities, r.Labels["severity"]) {
					t.Errorf("alert %s: severity %q, want one of %v", name, r.Labels["severity"], severities)
				}
				for _, a := range []string{"summary", "description"} {
					if strings.TrimSpace(r.Annotations[a]) == "" {
						t.Errorf("alert %s has no %s", name, a)
					}
				}
			}
			if err := checkExpr(r.Expr, known); err != nil {
				t.Errorf("group %s rule %s: %v", g.Name, name, err)
			}
		}
	}
	t.Logf("%d groups, %d alerts checked", len(groups.Groups), alerts)
	// What the issue asks of the rules, by name: the rule may change, its
	// subject may not disappear.
	for _, want := range []string{"VcoilPoolExhausted", "VcoilPoolNearlyExhausted", "VcoilServiceSyncFailing",
		"VcoilPolicyRenderFailing", "VcoilVPPLost", "VcoilVPPRestarted", "VcoilCNIErrors", "VcoildDown"} {
		found := false
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				found = found || r.Alert == want
			}
		}
		if !found {
			t.Errorf("no alert %s", want)
		}
	}
}

func TestPrometheusRuleIsTheRulesFile(t *testing.T) {
	want, err := monitoring.PrometheusRule(monitoring.Rules)
	if err != nil {
		t.Fatal(err)
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, monitoring.PrometheusRuleFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not generated from vcoil-rules.yaml: run make generate", monitoring.PrometheusRuleFile)
	}
	// The same groups, read as YAML.
	var pr struct {
		Kind string
		Spec json.RawMessage
	}
	if err := yaml.Unmarshal(got, &pr); err != nil {
		t.Fatal(err)
	}
	rules, err := yaml.YAMLToJSON(monitoring.Rules)
	if err != nil {
		t.Fatal(err)
	}
	if pr.Kind != "PrometheusRule" || !jsonEqual(t, pr.Spec, rules) {
		t.Errorf("PrometheusRule kind %s, spec %s; want the rules file's groups %s", pr.Kind, pr.Spec, rules)
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	xs, _ := json.Marshal(x)
	ys, _ := json.Marshal(y)
	return bytes.Equal(xs, ys)
}
