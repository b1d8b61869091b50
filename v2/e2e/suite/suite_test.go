// Package suite is vcoil's end-to-end suite. It runs against any cluster
// with vcoil installed, through a kubeconfig (VCOIL_E2E_KUBECONFIG): the
// local cluster of network namespaces (make e2e), kind (make kind-e2e) or a
// real one. Without the variable every test skips with a message naming it.
//
// It deploys its own pods (the network test agent) into a namespace of its
// own, runs the connectivity matrix of the kube-proxy IPVS proposal ("Test
// validation") and vcoil's IPAM and failure scenarios, and writes the
// results as JSON and a markdown table (VCOIL_E2E_REPORT_DIR).
package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/vcoil/vcoil/v2/internal/testenv"
)

// Settings from the environment.
type settings struct {
	kubeconfig string
	// agentImage runs `agent serve` and `agent connect` (v2/e2e/images/agent).
	agentImage string
	// pullPolicy of the agent image: Never where images are imported by
	// hand (the local cluster, kind), IfNotPresent elsewhere.
	pullPolicy string
	// external is HOST:PORT of a TCP echo server outside the cluster, for
	// "pod -> internet"; empty when the cluster has none.
	external string
	// external6 is the same for IPv6 (VCOIL_E2E_EXTERNAL6), in a
	// dual-stack cluster whose external host has an IPv6 address too.
	external6 string
	// externalAgent is the command that runs the network test agent on
	// external's host, a client outside the cluster ("public -> nodeport");
	// empty when there is none.
	externalAgent []string
	// kubectl is the kubectl binary for the rows that test what users type
	// (kubectl scale); empty when there is none.
	kubectl string
	// reportDir receives results.json and results.md.
	reportDir string
	// spare is an IPv4 /24 no pool of the cluster uses, for the suite's own
	// small pools (two /26 of it).
	spare netip.Prefix
}

func loadSettings() settings {
	s := settings{
		kubeconfig: os.Getenv("VCOIL_E2E_KUBECONFIG"),
		agentImage: envOr("VCOIL_E2E_AGENT_IMAGE", "vcoil-e2e-agent:lab"),
		pullPolicy: envOr("VCOIL_E2E_PULL_POLICY", "Never"),
		external:   os.Getenv("VCOIL_E2E_EXTERNAL"),
		external6:  os.Getenv("VCOIL_E2E_EXTERNAL6"),
		// Words, as the lab writes it: nsenter --net=NS -- AGENT.
		externalAgent: strings.Fields(os.Getenv("VCOIL_E2E_EXTERNAL_AGENT")),
		reportDir:     os.Getenv("VCOIL_E2E_REPORT_DIR"),
		kubectl:       os.Getenv("VCOIL_E2E_KUBECTL"),
		spare:         netip.MustParsePrefix("198.18.64.0/24"),
	}
	if v := os.Getenv("VCOIL_E2E_SPARE_CIDR"); v != "" {
		p, err := netip.ParsePrefix(v)
		if err != nil || !p.Addr().Is4() || p.Bits() > 24 {
			fmt.Fprintf(os.Stderr, "e2e: VCOIL_E2E_SPARE_CIDR=%q: want an IPv4 prefix of /24 or larger\n", v)
			os.Exit(2)
		}
		s.spare = p.Masked()
	}
	return s
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// cluster is what every test uses.
type cluster struct {
	cfg      *rest.Config
	c        client.Client
	cs       *kubernetes.Clientset
	settings settings
}

var (
	e2e     *cluster
	results = &report{}
)

func TestMain(m *testing.M) {
	// controller-runtime's clients log through its global logger (the API
	// server's warnings, errors): without one set before they are made, it
	// complains with a stack trace 30 s into the run and drops their lines.
	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.ConsoleEncoder()))
	s := loadSettings()
	if s.kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e: kubeconfig:", err)
			os.Exit(1)
		}
		cfg.QPS, cfg.Burst = 50, 100
		c, err := client.New(cfg, client.Options{Scheme: testenv.NewScheme()})
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			os.Exit(1)
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			os.Exit(1)
		}
		e2e = &cluster{cfg: cfg, c: c, cs: cs, settings: s}
	}
	code := m.Run()
	if e2e != nil {
		if err := removeWorld(e2e); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: remove the suite's namespace:", err)
			code = 1
		}
	}
	if e2e != nil && s.reportDir != "" {
		if err := results.write(s.reportDir); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: write report:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// need skips t unless a cluster is configured.
func need(t *testing.T) *cluster {
	t.Helper()
	if e2e == nil {
		t.Skip("skipped: set VCOIL_E2E_KUBECONFIG to the kubeconfig of a cluster with vcoil installed (make e2e runs the local cluster)")
	}
	return e2e
}

// Status of a row.
const (
	statusPass           = "pass"
	statusFail           = "fail"
	statusNotImplemented = "not implemented yet"
	statusNotApplicable  = "not applicable"
)

// row is one line of the report.
type row struct {
	Group  string `json:"group"`
	Name   string `json:"name"`
	Status string `json:"status"`
	// By says what provides the behaviour: vcoil, or kube-proxy where
	// vcoil's own service renderer does not exist yet.
	By      string  `json:"by,omitempty"`
	Detail  string  `json:"detail,omitempty"`
	Seconds float64 `json:"seconds,omitempty"`
}

type report struct {
	mu   sync.Mutex
	rows []row
}

func (r *report) add(x row) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rows = append(r.rows, x)
}

func (r *report) write(dir string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(r.rows, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(data, '\n'), 0o644); err != nil {
		return err
	}
	var b strings.Builder
	counts := map[string]int{}
	groups := []string{}
	seen := map[string]bool{}
	for _, x := range r.rows {
		counts[x.Status]++
		if !seen[x.Group] {
			seen[x.Group] = true
			groups = append(groups, x.Group)
		}
	}
	statuses := make([]string, 0, len(counts))
	for s := range counts {
		statuses = append(statuses, s)
	}
	sort.Strings(statuses)
	fmt.Fprintf(&b, "# vcoil end-to-end results\n\n%s\n\n", time.Now().UTC().Format(time.RFC3339))
	for _, s := range statuses {
		fmt.Fprintf(&b, "- %s: %d\n", s, counts[s])
	}
	for _, g := range groups {
		fmt.Fprintf(&b, "\n## %s\n\n| case | result | by | detail |\n|---|---|---|---|\n", g)
		for _, x := range r.rows {
			if x.Group == g {
				fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", x.Name, x.Status, x.By, strings.ReplaceAll(x.Detail, "|", "\\|"))
			}
		}
	}
	return os.WriteFile(filepath.Join(dir, "results.md"), []byte(b.String()), 0o644)
}

// record runs one case as a subtest and reports it.
func record(t *testing.T, group, name, by string, f func(t *testing.T) error) {
	t.Helper()
	recordDetail(t, group, name, by, func(t *testing.T) (string, error) { return "", f(t) })
}

// recordDetail is record for a case whose passing row has a detail too
// (what it measured); a failing row's detail is its error.
func recordDetail(t *testing.T, group, name, by string, f func(t *testing.T) (string, error)) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		start := time.Now()
		x := row{Group: group, Name: name, By: by, Status: statusPass}
		// The row is reported also when a helper stops the test with Fatal.
		defer func() {
			x.Seconds = time.Since(start).Seconds()
			if t.Failed() && x.Status == statusPass {
				x.Status, x.Detail = statusFail, "stopped early; see the test log"
			}
			results.add(x)
		}()
		detail, err := f(t)
		x.Detail = detail
		if err != nil {
			x.Status, x.Detail = statusFail, err.Error()
			t.Error(err)
		}
	})
}

// pollInterval is the pause between two looks at the cluster while a step
// waits for it.
const pollInterval = 500 * time.Millisecond

// listed reports a case that is not run, with the reason: never a silent
// skip.
func listed(group, name, status, reason string) {
	results.add(row{Group: group, Name: name, Status: status, Detail: reason})
}

// ctx returns a context bounded for one step.
func ctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}
