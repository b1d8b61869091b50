// Package testsummary sums up, at the end of make test, what did not run and
// why: the Go tests that skipped (for want of root, of VCOIL_VPP_BIN, ...)
// grouped by their reason, and the rows of the end-to-end report that were
// listed but not run. A green run must not hide a layer that never ran.
//
// It reads what go test -json (through gotestsum) and the e2e suite wrote;
// it runs nothing.
package testsummary

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

// event is one line of go test -json (cmd/test2json's TestEvent).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// Counts are the tests of one or more go test runs by outcome; every test
// and subtest counts, and a test skipped in one run but run in another
// counts as run only.
type Counts struct{ Passed, Failed, Skipped int }

// Skip is a group of tests skipped for the same reason.
type Skip struct {
	Reason string
	// Tests are "package TestName" (package relative to the module).
	Tests []string
}

// GoTests is what one or more go test -json streams report.
type GoTests struct {
	Counts Counts
	Skips  []Skip
}

// fileLine is the "name_test.go:48: " that t.Log and t.Skip put before a
// message.
var fileLine = regexp.MustCompile(`^\s*[\w.-]+\.go:\d+: `)

// ReadGoTests reads go test -json streams; module is the module path, cut
// from package names.
func ReadGoTests(module string, streams ...io.Reader) (GoTests, error) {
	var out GoTests
	output := map[string][]string{} // package+test -> its message lines
	skipped := map[string]string{}  // package+test -> why
	ran := map[string]bool{}        // package+test that passed or failed in some stream
	for _, r := range streams {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
		for sc.Scan() {
			var e event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Test == "" {
				continue // build output and package lines
			}
			key := e.Package + " " + e.Test
			switch e.Action {
			case "output":
				if msg := message(e.Output); msg != "" {
					output[key] = append(output[key], msg)
				}
			case "pass":
				out.Counts.Passed++
				ran[key] = true
			case "fail":
				out.Counts.Failed++
				ran[key] = true
			case "skip":
				reason := "no reason given"
				if lines := output[key]; len(lines) > 0 {
					reason = lines[len(lines)-1]
				}
				skipped[key] = reason
			}
		}
		if err := sc.Err(); err != nil {
			return GoTests{}, err
		}
	}
	// A test skipped in one run and run in another (the e2e suite skips
	// in go test ./... and runs in make e2e) did run.
	byReason := map[string][]string{}
	for key, reason := range skipped {
		if ran[key] {
			continue
		}
		out.Counts.Skipped++
		pkg, test, _ := strings.Cut(key, " ")
		pkg = strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		byReason[reason] = append(byReason[reason], pkg+" "+test)
	}
	for reason, tests := range byReason {
		slices.Sort(tests)
		out.Skips = append(out.Skips, Skip{Reason: reason, Tests: tests})
	}
	// The largest groups first: they are the layers that did not run.
	slices.SortFunc(out.Skips, func(a, b Skip) int {
		if len(a.Tests) != len(b.Tests) {
			return len(b.Tests) - len(a.Tests)
		}
		return strings.Compare(a.Reason, b.Reason)
	})
	return out, nil
}

// message returns a test's own output line without the file:line prefix,
// or "" for the lines go test writes about the test (=== RUN, --- SKIP).
func message(line string) string {
	line = strings.TrimRight(line, "\n")
	trimmed := strings.TrimSpace(line)
	if strings.HasPrefix(trimmed, "=== ") || strings.HasPrefix(trimmed, "--- ") || trimmed == "" {
		return ""
	}
	return strings.TrimSpace(fileLine.ReplaceAllString(line, ""))
}

// E2ERow is the part of a row of the e2e report (results.json) the summary
// needs.
type E2ERow struct {
	Group  string `json:"group"`
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail"`
}

// NotRun returns the rows that neither passed nor failed, by status.
func NotRun(rows []E2ERow) map[string][]E2ERow {
	out := map[string][]E2ERow{}
	for _, r := range rows {
		if r.Status != "pass" && r.Status != "fail" {
			out[r.Status] = append(out[r.Status], r)
		}
	}
	return out
}

// Write prints the summary. The last line is the plain count of the Go
// tests ("tests: N passed, N failed, N skipped").
func Write(w io.Writer, g GoTests, e2e []E2ERow, e2eRead bool) {
	fmt.Fprintln(w, "==> what did not run, and why")
	if len(g.Skips) == 0 {
		fmt.Fprintln(w, "    every Go test ran (none skipped)")
	}
	for _, s := range g.Skips {
		fmt.Fprintf(w, "    %d skipped: %s\n", len(s.Tests), s.Reason)
		for _, t := range s.Tests {
			fmt.Fprintf(w, "        %s\n", t)
		}
	}
	switch notRun := NotRun(e2e); {
	case !e2eRead:
		fmt.Fprintln(w, "    the end-to-end suite left no report: it did not run (or stopped before writing it)")
	case len(notRun) == 0:
		fmt.Fprintf(w, "    every one of the %d end-to-end rows ran\n", len(e2e))
	default:
		statuses := make([]string, 0, len(notRun))
		for s := range notRun {
			statuses = append(statuses, s)
		}
		slices.Sort(statuses)
		for _, s := range statuses {
			fmt.Fprintf(w, "    %d end-to-end rows %s:\n", len(notRun[s]), s)
			for _, r := range notRun[s] {
				fmt.Fprintf(w, "        %s / %s: %s\n", r.Group, r.Name, r.Detail)
			}
		}
	}
	fmt.Fprintf(w, "tests: %d passed, %d failed, %d skipped\n", g.Counts.Passed, g.Counts.Failed, g.Counts.Skipped)
}
