package testsummary_test

import (
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/internal/testsummary"
)

// A go test -json stream as go 1.26 writes it: a root-only test skipped in
// two packages, a VPP test skipped, one passing and one failing test.
const stream = `{"Action":"start","Package":"github.com/vcoil/vcoil/v2/pkg/routes"}
{"Action":"run","Package":"github.com/vcoil/vcoil/v2/pkg/routes","Test":"TestExport"}
{"Action":"output","Package":"github.com/vcoil/vcoil/v2/pkg/routes","Test":"TestExport","Output":"=== RUN   TestExport\n"}
{"Action":"output","Package":"github.com/vcoil/vcoil/v2/pkg/routes","Test":"TestExport","Output":"    netnstest.go:48: skipped: needs root\n"}
{"Action":"output","Package":"github.com/vcoil/vcoil/v2/pkg/routes","Test":"TestExport","Output":"--- SKIP: TestExport (0.00s)\n"}
{"Action":"skip","Package":"github.com/vcoil/vcoil/v2/pkg/routes","Test":"TestExport","Elapsed":0}
{"Action":"output","Package":"github.com/vcoil/vcoil/v2/pkg/dataplane/linux","Test":"TestSetup/ipv4","Output":"    netnstest.go:48: skipped: needs root\n"}
{"Action":"skip","Package":"github.com/vcoil/vcoil/v2/pkg/dataplane/linux","Test":"TestSetup/ipv4","Elapsed":0}
{"Action":"output","Package":"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp","Test":"TestRealVPP","Output":"    vpptest.go:42: skipped: set VCOIL_VPP_BIN\n"}
{"Action":"skip","Package":"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp","Test":"TestRealVPP","Elapsed":0}
{"Action":"pass","Package":"github.com/vcoil/vcoil/v2/pkg/ipam","Test":"TestAllocate","Elapsed":0.1}
{"Action":"fail","Package":"github.com/vcoil/vcoil/v2/pkg/ipam","Test":"TestFree","Elapsed":0.1}
{"Action":"pass","Package":"github.com/vcoil/vcoil/v2/pkg/ipam","Elapsed":0.2}
`

func TestSummaryGroupsSkipsByReasonAndCountsEveryTest(t *testing.T) {
	g, err := testsummary.ReadGoTests("github.com/vcoil/vcoil", strings.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	if want := (testsummary.Counts{Passed: 1, Failed: 1, Skipped: 3}); g.Counts != want {
		t.Errorf("counts %+v, want %+v", g.Counts, want)
	}
	if len(g.Skips) != 2 || g.Skips[0].Reason != "skipped: needs root" || len(g.Skips[0].Tests) != 2 ||
		g.Skips[0].Tests[0] != "v2/pkg/dataplane/linux TestSetup/ipv4" || g.Skips[1].Reason != "skipped: set VCOIL_VPP_BIN" {
		t.Errorf("skips %+v, want the two root tests first, then the VPP one", g.Skips)
	}

	var b strings.Builder
	testsummary.Write(&b, g, []testsummary.E2ERow{
		{Group: "matrix", Name: "pod to pod", Status: "pass"},
		{Group: "matrix", Name: "public to LB", Status: "not implemented yet", Detail: "no LoadBalancer"},
	}, true)
	out := b.String()
	for _, want := range []string{
		"    2 skipped: skipped: needs root\n        v2/pkg/dataplane/linux TestSetup/ipv4\n        v2/pkg/routes TestExport\n",
		"    1 skipped: skipped: set VCOIL_VPP_BIN\n",
		"    1 end-to-end rows not implemented yet:\n        matrix / public to LB: no LoadBalancer\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if !strings.HasSuffix(out, "\ntests: 1 passed, 1 failed, 3 skipped\n") {
		t.Errorf("summary should end with the plain count line:\n%s", out)
	}
}

// The e2e suite skips in go test ./... (no cluster) and runs in make e2e:
// it ran.
func TestATestSkippedInOneRunAndRunInAnotherRan(t *testing.T) {
	const unit = `{"Action":"output","Package":"github.com/vcoil/vcoil/v2/e2e/suite","Test":"TestIPAM","Output":"    suite_test.go:132: skipped: set VCOIL_E2E_KUBECONFIG\n"}
{"Action":"skip","Package":"github.com/vcoil/vcoil/v2/e2e/suite","Test":"TestIPAM"}
`
	const e2e = `{"Action":"pass","Package":"github.com/vcoil/vcoil/v2/e2e/suite","Test":"TestIPAM"}
`
	g, err := testsummary.ReadGoTests("github.com/vcoil/vcoil", strings.NewReader(unit), strings.NewReader(e2e))
	if err != nil {
		t.Fatal(err)
	}
	if want := (testsummary.Counts{Passed: 1}); g.Counts != want || len(g.Skips) != 0 {
		t.Errorf("counts %+v, skips %+v; want %+v and no skips", g.Counts, g.Skips, want)
	}
	g, _ = testsummary.ReadGoTests("github.com/vcoil/vcoil", strings.NewReader(unit))
	if g.Counts.Skipped != 1 || len(g.Skips) != 1 {
		t.Errorf("without the e2e run: counts %+v, skips %+v; want the skip", g.Counts, g.Skips)
	}
}

func TestSummarySaysWhenTheE2ESuiteLeftNoReport(t *testing.T) {
	var b strings.Builder
	testsummary.Write(&b, testsummary.GoTests{}, nil, false)
	if !strings.Contains(b.String(), "the end-to-end suite left no report") || !strings.Contains(b.String(), "every Go test ran") {
		t.Errorf("summary:\n%s", b.String())
	}
}
