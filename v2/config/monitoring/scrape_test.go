package monitoring_test

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/relabel"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	yamlv2 "go.yaml.in/yaml/v2"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/vcoil/vcoil/v2/config"
	"github.com/vcoil/vcoil/v2/config/monitoring"
	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/constants"
)

// scrapePod is a pod as Kubernetes service discovery sees it.
type scrapePod struct {
	namespace, name string
	labels          map[string]string
	ports           []corev1.ContainerPort
}

// vcoilPods are the pods of the rendered default installation, and an
// Egress router as vcoil-controller makes it (v2/controllers/egress_objects.go:
// label app.kubernetes.io/name=vcoil-egress, port "metrics").
func vcoilPods(t *testing.T) []scrapePod {
	t.Helper()
	objs, err := testenv.Render("default")
	if err != nil {
		t.Fatal(err)
	}
	var pods []scrapePod
	add := func(ns, name string, tpl corev1.PodTemplateSpec) {
		var ports []corev1.ContainerPort
		for _, c := range tpl.Spec.Containers {
			ports = append(ports, c.Ports...)
		}
		pods = append(pods, scrapePod{ns, name + "-x1", tpl.Labels, ports})
	}
	ds := &appsv1.DaemonSet{}
	if err := testenv.Find(objs, "DaemonSet", "vcoil-daemon", ds); err != nil {
		t.Fatal(err)
	}
	add(ds.Namespace, ds.Name, ds.Spec.Template)
	dep := &appsv1.Deployment{}
	if err := testenv.Find(objs, "Deployment", "vcoil-controller", dep); err != nil {
		t.Fatal(err)
	}
	add(dep.Namespace, dep.Name, dep.Spec.Template)
	pods = append(pods, scrapePod{"app", "egress-nat-x1", map[string]string{"app.kubernetes.io/name": "vcoil-egress"},
		[]corev1.ContainerPort{{Name: "metrics", ContainerPort: constants.EgressMetricsPort}, {Name: "health", ContainerPort: constants.EgressHealthPort}}})
	return pods
}

var invalidLabelChar = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// discovered returns the targets Kubernetes service discovery (role pod)
// gives for the pod: one per container port, with its __meta labels.
func (p scrapePod) discovered(job string) []labels.Labels {
	var out []labels.Labels
	for _, port := range p.ports {
		b := labels.NewBuilder(labels.EmptyLabels())
		b.Set("job", job)
		b.Set("__address__", "198.18.0.11:"+strconv.Itoa(int(port.ContainerPort)))
		b.Set("__meta_kubernetes_namespace", p.namespace)
		b.Set("__meta_kubernetes_pod_name", p.name)
		b.Set("__meta_kubernetes_pod_node_name", "node1")
		b.Set("__meta_kubernetes_pod_container_port_name", port.Name)
		for k, v := range p.labels {
			b.Set("__meta_kubernetes_pod_label_"+invalidLabelChar.ReplaceAllString(k, "_"), v)
		}
		out = append(out, b.Labels())
	}
	return out
}

// scrapeConfig is the part of prometheus.yml the test reads.
type scrapeConfig struct {
	ScrapeConfigs []struct {
		JobName        string            `yaml:"job_name"`
		KubernetesSD   []map[string]any  `yaml:"kubernetes_sd_configs"`
		RelabelConfigs []*relabel.Config `yaml:"relabel_configs"`
	} `yaml:"scrape_configs"`
}

// scrapeTargets runs the pods through the scrape config's relabeling as
// Prometheus does and returns the targets' labels, meta labels dropped.
func scrapeTargets(t *testing.T, pods []scrapePod) []labels.Labels {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "v2/config/monitoring/prometheus-scrape.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var sc scrapeConfig
	if err := yamlv2.UnmarshalStrict(b, &sc); err != nil {
		t.Fatalf("prometheus-scrape.yaml: %v", err)
	}
	if len(sc.ScrapeConfigs) != 1 || len(sc.ScrapeConfigs[0].KubernetesSD) != 1 || sc.ScrapeConfigs[0].KubernetesSD[0]["role"] != "pod" {
		t.Fatalf("prometheus-scrape.yaml: want one job with Kubernetes service discovery of pods, got %+v", sc)
	}
	job := sc.ScrapeConfigs[0]
	for i, c := range job.RelabelConfigs {
		c.NameValidationScheme = model.LegacyValidation
		if err := c.Validate(model.LegacyValidation); err != nil {
			t.Fatalf("relabel_configs[%d]: %v", i, err)
		}
	}
	var out []labels.Labels
	for _, p := range pods {
		for _, l := range p.discovered(job.JobName) {
			lb := labels.NewBuilder(l)
			if !relabel.ProcessBuilder(lb, job.RelabelConfigs...) {
				continue
			}
			// Prometheus drops the labels starting with __ after relabeling.
			res := lb.Labels()
			lb = labels.NewBuilder(res)
			res.Range(func(l labels.Label) {
				if strings.HasPrefix(l.Name, "__") && l.Name != "__address__" {
					lb.Del(l.Name)
				}
			})
			out = append(out, lb.Labels())
		}
	}
	return out
}

func TestTheScrapeConfigKeepsTheMetricsPortOfEachProgramWithTheLabelsTheQueriesUse(t *testing.T) {
	pods := append(vcoilPods(t),
		// Somebody else's pod with a port named metrics.
		scrapePod{"app", "web-x1", map[string]string{"app.kubernetes.io/name": "web"}, []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9100}}})
	var got []string
	for _, l := range scrapeTargets(t, pods) {
		got = append(got, l.String())
	}
	want := []string{
		`{__address__="198.18.0.11:9386", job="vcoil-controller", namespace="kube-system", node="node1", pod="vcoil-controller-x1"}`,
		`{__address__="198.18.0.11:9388", job="vcoild", namespace="kube-system", node="node1", pod="vcoil-daemon-x1"}`,
		fmt.Sprintf(`{__address__="198.18.0.11:%d", job="vcoil-egress", namespace="app", node="node1", pod="egress-nat-x1"}`, constants.EgressMetricsPort),
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("targets:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The programs' metrics addresses are those the manifests publish.
	for _, addr := range []string{constants.DaemonMetricsAddr, constants.ControllerMetricsAddr} {
		if !strings.Contains(strings.Join(got, " "), addr+`"`) {
			t.Errorf("no target on the programs' metrics address %s", addr)
		}
	}
}

// jobsQueried returns the values of every job="..." matcher of expr.
func jobsQueried(t *testing.T, expr string) []string {
	t.Helper()
	e, err := promql.ParseExpr(grafanaInterval.ReplaceAllString(expr, "5m"))
	if err != nil {
		t.Fatal(err)
	}
	var jobs []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			for _, m := range vs.LabelMatchers {
				if m.Name == "job" {
					jobs = append(jobs, m.Value)
				}
			}
		}
		return nil
	})
	return jobs
}

func TestEveryJobTheQueriesNameIsAJobOfTheScrapeConfig(t *testing.T) {
	jobs := map[string]bool{}
	for _, l := range scrapeTargets(t, vcoilPods(t)) {
		jobs[l.Get("job")] = true
	}
	var exprs []string
	groups, errs := rulefmt.Parse(monitoring.Rules, false, model.LegacyValidation, promql, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	var d struct {
		Panels []struct {
			Targets []struct{ Expr string }
		}
	}
	if err := yaml.Unmarshal(monitoring.Dashboard, &d); err != nil {
		t.Fatal(err)
	}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	n := 0
	for _, e := range exprs {
		for _, j := range jobsQueried(t, e) {
			n++
			if !jobs[j] {
				t.Errorf("%q queries job %q, which the scrape config does not make (it makes %v)", e, j, jobs)
			}
		}
	}
	if n == 0 {
		t.Error("no query names a job: the test checks nothing")
	}
}

func TestThePodMonitorSelectsTheProgramsAsTheScrapeConfigDoes(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := config.Build(filepath.Join(root, "v2/config/monitoring"))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName())
	}
	if want := []string{"PodMonitor/kube-system/vcoil", "PrometheusRule/kube-system/vcoil"}; !slices.Equal(slices.Sorted(slices.Values(kinds)), want) {
		t.Errorf("v2/config/monitoring renders %v, want %v", kinds, want)
	}
	var pm struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       struct {
			JobLabel          string `json:"jobLabel"`
			NamespaceSelector struct {
				Any bool `json:"any"`
			} `json:"namespaceSelector"`
			Selector struct {
				MatchExpressions []struct {
					Key, Operator string
					Values        []string
				} `json:"matchExpressions"`
			} `json:"selector"`
			PodMetricsEndpoints []struct {
				Port        string `json:"port"`
				Relabelings []struct {
					SourceLabels []string `json:"sourceLabels"`
					TargetLabel  string   `json:"targetLabel"`
				} `json:"relabelings"`
			} `json:"podMetricsEndpoints"`
		} `json:"spec"`
	}
	b, err := os.ReadFile(filepath.Join(root, "v2/config/monitoring/podmonitor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &pm); err != nil {
		t.Fatalf("podmonitor.yaml: %v", err)
	}
	s := pm.Spec
	if len(s.Selector.MatchExpressions) != 1 || len(s.PodMetricsEndpoints) != 1 || !s.NamespaceSelector.Any {
		t.Fatalf("PodMonitor spec %+v: want one selector expression, one endpoint, any namespace", s)
	}
	sel, ep := s.Selector.MatchExpressions[0], s.PodMetricsEndpoints[0]
	jobs := map[string]bool{}
	for _, l := range scrapeTargets(t, vcoilPods(t)) {
		jobs[l.Get("job")] = true
	}
	for _, p := range vcoilPods(t) {
		if sel.Operator != "In" || !slices.Contains(sel.Values, p.labels[sel.Key]) {
			t.Errorf("the PodMonitor does not select pod %s/%s (labels %v)", p.namespace, p.name, p.labels)
		}
		if !slices.ContainsFunc(p.ports, func(cp corev1.ContainerPort) bool { return cp.Name == ep.Port }) {
			t.Errorf("pod %s/%s has no port %q", p.namespace, p.name, ep.Port)
		}
		if job := p.labels[s.JobLabel]; !jobs[job] {
			t.Errorf("pod %s/%s gets job %q from label %s, which the scrape config does not make", p.namespace, p.name, job, s.JobLabel)
		}
	}
	node := false
	for _, r := range ep.Relabelings {
		node = node || slices.Equal(r.SourceLabels, []string{"__meta_kubernetes_pod_node_name"}) && r.TargetLabel == "node"
	}
	if !node {
		t.Errorf("the PodMonitor sets no node label: relabelings %+v", ep.Relabelings)
	}
}
