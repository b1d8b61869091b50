package resultsdoc_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/internal/resultsdoc"
)

func TestParseReadsTheSuitesReport(t *testing.T) {
	data, err := os.ReadFile("testdata/results.md")
	if err != nil {
		t.Fatal(err)
	}
	r, err := resultsdoc.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 11, 26, 9, 41, 7, 0, time.UTC); !r.When.Equal(want) {
		t.Errorf("when = %v, want %v", r.When, want)
	}
	wantCounts := []resultsdoc.Count{{"not applicable", 1}, {"pass", 3}, {"fail", 1}}
	if len(r.Counts) != len(wantCounts) {
		t.Fatalf("counts = %v, want %v", r.Counts, wantCounts)
	}
	for i := range wantCounts {
		if r.Counts[i] != wantCounts[i] {
			t.Errorf("count %d = %v, want %v", i, r.Counts[i], wantCounts[i])
		}
	}
	if len(r.Groups) != 2 || r.Groups[0].Title != "IP address management" || len(r.Groups[0].Rows) != 2 || len(r.Groups[1].Rows) != 3 {
		t.Fatalf("groups = %+v", r.Groups)
	}
	// Cells keep the report's escaping: a detail with a pipe stays one cell.
	if row := r.Groups[1].Rows[2]; !strings.HasSuffix(row, `a \| b |`) {
		t.Errorf("row = %q", row)
	}
}

func TestParseRefusesWhatIsNoReport(t *testing.T) {
	for name, text := range map[string]string{
		"no title":      "# something else\n\n2026-11-26T09:41:07Z\n",
		"no time":       "# vcoil end-to-end results\n\n- pass: 1\n",
		"bad count":     "# vcoil end-to-end results\n\n2026-11-26T09:41:07Z\n\n- pass: many\n",
		"stray line":    "# vcoil end-to-end results\n\n2026-11-26T09:41:07Z\n\n## g\n\nprose\n",
		"row, no table": "# vcoil end-to-end results\n\n2026-11-26T09:41:07Z\n\n## g\n\n| a | pass | vcoil |  |\n",
	} {
		if _, err := resultsdoc.Parse([]byte(text)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestRewriteReplacesOnlyTheBlockWithTheDateTheCommandAndTheTables(t *testing.T) {
	data, err := os.ReadFile("testdata/results.md")
	if err != nil {
		t.Fatal(err)
	}
	r, err := resultsdoc.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	doc := "# Doc\n\n## Suite\n\n```\n# not a heading\n```\n\n### Results\n\nbefore\n\n" +
		resultsdoc.BeginMarker + "\nRun `make e2e-docs` after the suite.\n" + resultsdoc.EndMarker +
		"\n\nafter\n"
	render := func(level int) string { return resultsdoc.Block(r, level, "_out/lab/e2e/results.md", "make test") }
	out, err := resultsdoc.Rewrite([]byte(doc), render)
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	prefix := doc[:strings.Index(doc, resultsdoc.BeginMarker)+len(resultsdoc.BeginMarker)]
	if !strings.HasPrefix(got, prefix) || !strings.HasSuffix(got, resultsdoc.EndMarker+"\n\nafter\n") {
		t.Errorf("text outside the markers changed:\n%s", got)
	}
	for _, want := range []string{
		"from _out/lab/e2e/results.md",
		"`make test`, finished 2026-11-26 09:41 (UTC), 5 rows",
		"| not applicable | 1 |\n| pass | 3 |\n| fail | 1 |\n",
		// One level below "### Results", the last heading outside the code block.
		"\n#### IP address management\n\n| case | result | by | detail |\n| --- | --- | --- | --- |\n| every node has one node subnet",
		"#### Connectivity matrix (kube-proxy IPVS proposal, \"Test validation\")",
		`| public -> nodeport, policy=local | fail | vcoil | dial 10.0.0.1:30080: a \| b |` + "\n" + resultsdoc.EndMarker,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("block lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "Run `make e2e-docs` after the suite.") {
		t.Error("the placeholder is still there")
	}
	// Running it again on its own output changes nothing.
	again, err := resultsdoc.Rewrite(out, render)
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != got {
		t.Errorf("a second rewrite changed the document:\n%s", again)
	}
}

func TestRewriteNeedsEachMarkerOnceInOrder(t *testing.T) {
	b, e := resultsdoc.BeginMarker, resultsdoc.EndMarker
	for name, doc := range map[string]string{
		"none":     "text\n",
		"no end":   b + "\n",
		"reversed": e + "\n" + b + "\n",
		"twice":    b + e + b + e,
	} {
		if _, err := resultsdoc.Rewrite([]byte(doc), func(int) string { return "x" }); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
