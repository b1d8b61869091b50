package report

import (
	"os/exec"
	"strings"
	"testing"
)

const (
	testFocus = `\[sig-network\]`
	testSkip  = `\[(Serial|Disruptive|Flaky|Alpha|Beta)\]|\[(Feature|FeatureGate):[^\]]*\]`
)

// A ginkgo JSON report as e2e.test writes it, cut down to what Build reads.
const sampleReport = `[{
  "SuiteDescription": "Kubernetes e2e suite",
  "SuiteSucceeded": false,
  "StartTime": "2026-11-22T06:40:00Z",
  "RunTime": 300000000000,
  "SpecReports": [
    {"LeafNodeType": "SynchronizedBeforeSuite", "LeafNodeText": "", "State": "passed"},
    {"ContainerHierarchyTexts": ["[sig-network] DNS"], "LeafNodeType": "It",
     "LeafNodeText": "should provide DNS for the cluster [Conformance]", "State": "passed", "RunTime": 12400000000},
    {"ContainerHierarchyTexts": ["[sig-network] Services"], "LeafNodeType": "It",
     "LeafNodeText": "should serve a basic endpoint from pods [Conformance]", "State": "failed", "RunTime": 61000000000,
     "Failure": {"Message": "timed out waiting for the condition\nmore detail", "Location": {"FileName": "/root/go/pkg/mod/k8s.io/kubernetes@v1.37.1/test/e2e/network/service.go", "LineNumber": 812}}},
    {"ContainerHierarchyTexts": ["[sig-network] Services"], "LeafNodeType": "It",
     "LeafNodeText": "should be able to up and down services", "State": "passed"},
    {"ContainerHierarchyTexts": ["[sig-network] DNS"], "LeafNodeType": "It",
     "LeafNodeText": "should provide DNS for the cluster [Provider:gce]", "State": "skipped",
     "Failure": {"Message": "Only supported for providers [gce gke] (not skeleton)"}},
    {"ContainerHierarchyTexts": ["[sig-network] Conntrack"], "LeafNodeType": "It",
     "LeafNodeText": "should be able to preserve UDP traffic", "State": "timedout",
     "Failure": {"Message": "A spec timeout occurred"}},
    {"ContainerHierarchyTexts": ["[sig-network] Services"], "LeafNodeType": "It",
     "LeafNodeText": "should be rejected when no endpoints exist", "State": "skipped"},
    {"ContainerHierarchyTexts": ["[sig-network] Netpol", "NetworkPolicy between server and client"], "LeafNodeType": "It",
     "LeafNodeText": "should enforce policy [Feature:NetworkPolicy]", "State": "skipped"},
    {"ContainerHierarchyTexts": ["[sig-network] Netpol", "NetworkPolicy between server and client"], "LeafNodeType": "It",
     "LeafNodeText": "should enforce egress [Feature:NetworkPolicy]", "State": "skipped"},
    {"ContainerHierarchyTexts": ["[sig-network] Services"], "LeafNodeType": "It",
     "LeafNodeText": "should survive a restart [Serial] [Disruptive]", "State": "skipped"},
    {"ContainerHierarchyTexts": ["[sig-node] Pods"], "LeafNodeType": "It",
     "LeafNodeText": "should be submitted and removed [Conformance]", "State": "skipped"},
    {"LeafNodeType": "ReportAfterSuite", "LeafNodeText": "Kubernetes e2e suite report", "State": "passed"}
  ]
}]`

func TestBuildSortsSpecsInScopeAndCountsWhatTheSkipLeftOut(t *testing.T) {
	sum, err := Build(strings.NewReader(sampleReport), testFocus, testSkip)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name                    string
		group                   Group
		passed, failed, skipped int
	}{
		{"Conformance", sum.Conformance, 1, 1, 0},
		{"other", sum.Other, 1, 1, 2},
	} {
		if c.group.Passed != c.passed || c.group.Failed != c.failed || c.group.Skipped != c.skipped {
			t.Errorf("%s: %d passed, %d failed, %d skipped; want %d, %d, %d", c.name,
				c.group.Passed, c.group.Failed, c.group.Skipped, c.passed, c.failed, c.skipped)
		}
	}
	failed := sum.Conformance.Specs[1]
	if failed.State != "failed" || failed.Reason != "timed out waiting for the condition" ||
		failed.Location != "test/e2e/network/service.go:812" || failed.Seconds != 61 {
		t.Errorf("failed spec %+v", failed)
	}
	reasons := map[string]string{}
	for _, s := range sum.Other.Specs {
		reasons[s.Name] = s.Reason
	}
	for name, want := range map[string]string{
		"[sig-network] DNS should provide DNS for the cluster [Provider:gce]": "Only supported for providers [gce gke] (not skeleton)",
		"[sig-network] Conntrack should be able to preserve UDP traffic":      "timedout: A spec timeout occurred",
		"[sig-network] Services should be rejected when no endpoints exist":   "not run (the run ended before it)",
		"[sig-network] Services should be able to up and down services":       "",
	} {
		if got, ok := reasons[name]; !ok || got != want {
			t.Errorf("%s: reason %q (listed: %v), want %q", name, got, ok, want)
		}
	}
	want := []Count{{Reason: "[Feature:NetworkPolicy]", Specs: 2}, {Reason: "[Serial]", Specs: 1}}
	if len(sum.LeftOut) != len(want) || sum.LeftOut[0] != want[0] || sum.LeftOut[1] != want[1] {
		t.Errorf("left out %v, want %v", sum.LeftOut, want)
	}
	if sum.ConformancePassed() || sum.AllPassed() {
		t.Error("a Conformance spec failed: want neither ConformancePassed nor AllPassed")
	}
}

func TestConformancePassedNeedsEveryConformanceSpecToPass(t *testing.T) {
	for _, c := range []struct {
		name      string
		sum       Summary
		conf, all bool
	}{
		{"all passed", Summary{Conformance: Group{Passed: 47}, Other: Group{Passed: 80, Skipped: 6}}, true, true},
		{"another spec failed", Summary{Conformance: Group{Passed: 47}, Other: Group{Passed: 79, Failed: 1}}, true, false},
		{"a Conformance spec skipped", Summary{Conformance: Group{Passed: 46, Skipped: 1}}, false, false},
		{"no spec ran", Summary{}, false, false},
		{"the suite failed around the specs", Summary{Conformance: Group{Passed: 47}, SuiteErrors: []string{"BeforeSuite: boom"}}, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.sum.ConformancePassed(); got != c.conf {
				t.Errorf("ConformancePassed = %v, want %v", got, c.conf)
			}
			if got := c.sum.AllPassed(); got != c.all {
				t.Errorf("AllPassed = %v, want %v", got, c.all)
			}
		})
	}
}

func TestBuildReportsAFailedSuiteNode(t *testing.T) {
	in := `[{"SpecReports": [{"LeafNodeType": "SynchronizedBeforeSuite", "State": "failed",
	  "Failure": {"Message": "there are not-ready nodes\nnode1"}}]}]`
	sum, err := Build(strings.NewReader(in), testFocus, testSkip)
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.SuiteErrors) != 1 || sum.SuiteErrors[0] != "SynchronizedBeforeSuite: there are not-ready nodes" {
		t.Errorf("suite errors %q", sum.SuiteErrors)
	}
}

func TestBuildRefusesWhatIsNotOneSuiteReport(t *testing.T) {
	for name, in := range map[string]string{
		"not JSON":    "Ran 3 of 5 specs",
		"no suite":    "[]",
		"two suites":  "[{}, {}]",
		"a bad focus": sampleReport,
	} {
		t.Run(name, func(t *testing.T) {
			focus := testFocus
			if name == "a bad focus" {
				focus = "[sig-network"
			}
			if _, err := Build(strings.NewReader(in), focus, testSkip); err == nil {
				t.Error("want an error")
			}
		})
	}
}

func TestMarkdownListsFailuresSkipsAndLeftOut(t *testing.T) {
	sum, err := Build(strings.NewReader(sampleReport), testFocus, testSkip)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := sum.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"| `[sig-network] ... [Conformance]` | 1 | 1 | 0 |",
		"| other sig-network specs in scope | 1 | 1 | 2 |",
		"- [sig-network] Services should serve a basic endpoint from pods [Conformance] (test/e2e/network/service.go:812, 61s): timed out waiting for the condition",
		"- Only supported for providers [gce gke] (not skeleton) (1):",
		"| `[Feature:NetworkPolicy]` | 2 |",
		"| all | 3 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

// makeSkip is the skip expression mk/conformance.mk gives a lab of the
// family: the test checks the expressions make really passes to ginkgo.
func makeSkip(t *testing.T, family string) string {
	t.Helper()
	cmd := exec.Command("make", "-s", "--no-print-directory", "-C", "../../../..",
		"--eval", `vcoil-print-skip: ; @echo '$(CONFORMANCE_SKIP)'`, "vcoil-print-skip", "LAB_IP_FAMILY="+family, "LAB_STATE_DIR=/nonexistent")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make: %v", err)
	}
	return strings.TrimSpace(string(out))
}

const dualStackReport = `[{
  "SuiteDescription": "Kubernetes e2e suite", "SuiteSucceeded": true, "StartTime": "2026-11-26T06:00:00Z", "RunTime": 1000000000,
  "SpecReports": [
    {"ContainerHierarchyTexts": ["[sig-network] [Feature:IPv6DualStack]"], "LeafNodeType": "It",
     "LeafNodeText": "should create service with ipv6 cluster ip", "State": "passed"},
    {"ContainerHierarchyTexts": ["[sig-network] [Feature:IPv6DualStack]", "Granular Checks: Services Secondary IP Family [LinuxOnly]"], "LeafNodeType": "It",
     "LeafNodeText": "should function for pod-Service: udp", "State": "failed", "Failure": {"Message": "no answer"}},
    {"ContainerHierarchyTexts": ["[sig-network] [Feature:IPv6DualStack]", "Granular Checks: Services Secondary IP Family [LinuxOnly]"], "LeafNodeType": "It",
     "LeafNodeText": "should function for pod-Service: sctp [Feature:SCTPConnectivity]", "State": "skipped"},
    {"ContainerHierarchyTexts": ["[sig-network] Netpol"], "LeafNodeType": "It",
     "LeafNodeText": "should enforce policy [Feature:NetworkPolicy]", "State": "passed"},
    {"ContainerHierarchyTexts": ["[sig-network] Ingress"], "LeafNodeType": "It",
     "LeafNodeText": "should conform to Ingress spec [Feature:Ingress]", "State": "skipped"},
    {"ContainerHierarchyTexts": ["[sig-network] DNS"], "LeafNodeType": "It",
     "LeafNodeText": "should provide DNS for the cluster [Conformance]", "State": "passed"}
  ]
}]`

// A dual-stack lab's skip lets [Feature:IPv6DualStack] through (but not its
// SCTP spec), and the summary counts those specs apart; an IPv4 lab's skip
// leaves them out.
func TestDualStackSpecsAreInScopeOfADualStackLabOnly(t *testing.T) {
	sum, err := Build(strings.NewReader(dualStackReport), testFocus, makeSkip(t, "dual"))
	if err != nil {
		t.Fatal(err)
	}
	if g := sum.DualStack; g.Passed != 1 || g.Failed != 1 || g.Skipped != 0 || sum.DualStackLeftOut != 1 {
		t.Errorf("dual-stack specs: %d passed, %d failed, %d skipped, %d left out; want 1, 1, 0, 1", g.Passed, g.Failed, g.Skipped, sum.DualStackLeftOut)
	}
	if sum.Conformance.Passed != 1 || sum.Other.Passed != 1 || len(sum.Other.Specs) != 1 {
		t.Errorf("Conformance %+v, other %+v: want the DNS and NetworkPolicy specs", sum.Conformance, sum.Other)
	}
	if sum.AllPassed() {
		t.Error("a dual-stack spec failed: want not AllPassed")
	}
	var md strings.Builder
	if err := sum.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| `[Feature:IPv6DualStack]` (2 in scope, 1 left out by the skip) | 1 | 1 | 0 |") {
		t.Errorf("markdown lacks the dual-stack row:\n%s", md.String())
	}

	v4, err := Build(strings.NewReader(dualStackReport), testFocus, makeSkip(t, "ipv4"))
	if err != nil {
		t.Fatal(err)
	}
	if len(v4.DualStack.Specs) != 0 || v4.DualStackLeftOut != 3 || v4.Other.Passed != 1 {
		t.Errorf("IPv4 lab: dual-stack specs %+v, %d left out, other %+v; want none in scope, 3 left out", v4.DualStack, v4.DualStackLeftOut, v4.Other)
	}
}
