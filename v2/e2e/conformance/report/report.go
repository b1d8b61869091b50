// Package report turns the ginkgo JSON report of a run of the upstream
// Kubernetes e2e tests into vcoil's conformance summary: the specs in scope
// (those the focus selects and the skip does not) in two groups,
// Conformance and the others, each with passed, failed and skipped counts
// and the reason of every failure and skip; and the specs of the focus left
// out by the skip, counted by the tag that left them out.
//
// It reads the report with its own small types rather than ginkgo's, so
// that vcoil's module does not depend on ginkgo.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"time"
)

// ginkgoReport is the part of a ginkgo types.Report the summary reads.
type ginkgoReport struct {
	SuiteDescription           string
	SuiteSucceeded             bool
	SpecialSuiteFailureReasons []string
	StartTime                  time.Time
	RunTime                    time.Duration
	SpecReports                []ginkgoSpec
}

type ginkgoSpec struct {
	ContainerHierarchyTexts []string
	LeafNodeType            string
	LeafNodeText            string
	State                   string
	RunTime                 time.Duration
	Failure                 *struct {
		Message  string
		Location struct {
			FileName   string
			LineNumber int
		}
		FailureNodeType string
	}
}

// text is the spec's full text, as ginkgo's focus and skip match it.
func (s ginkgoSpec) text() string {
	return strings.Join(append(append([]string{}, s.ContainerHierarchyTexts...), s.LeafNodeText), " ")
}

// Summary is what a run of the e2e tests gave.
type Summary struct {
	Suite       string    `json:"suite"`
	Started     time.Time `json:"started"`
	Duration    string    `json:"duration"`
	Focus       string    `json:"focus"`
	Skip        string    `json:"skip"`
	Succeeded   bool      `json:"suiteSucceeded"`
	SuiteErrors []string  `json:"suiteErrors,omitempty"`
	// Conformance are the specs in scope whose text has [Conformance].
	Conformance Group `json:"conformance"`
	// DualStack are the specs in scope with [Feature:IPv6DualStack] (a
	// dual-stack lab runs them), apart from Conformance and Other.
	DualStack Group `json:"dualStack"`
	// DualStackLeftOut counts the [Feature:IPv6DualStack] specs the focus
	// selects and the skip leaves out (the SCTP one, for one).
	DualStackLeftOut int `json:"dualStackLeftOut"`
	// Other are the other specs in scope.
	Other Group `json:"other"`
	// LeftOut counts the specs the focus selects and the skip leaves out,
	// by the first text the skip matches in theirs ("[Serial]",
	// "[Feature:NetworkPolicy]").
	LeftOut []Count `json:"leftOut"`
}

// Group is a set of specs with their outcome.
type Group struct {
	Passed  int    `json:"passed"`
	Failed  int    `json:"failed"`
	Skipped int    `json:"skipped"`
	Specs   []Spec `json:"specs"`
}

// Spec is one spec's outcome.
type Spec struct {
	Name  string `json:"name"`
	State string `json:"state"` // passed, failed, skipped
	// Reason is the skip message or the failure's first line.
	Reason   string `json:"reason,omitempty"`
	Location string `json:"location,omitempty"`
	Seconds  int    `json:"seconds"`
}

// Count is a number of specs with one reason.
type Count struct {
	Reason string `json:"reason"`
	Specs  int    `json:"specs"`
}

// dualStackTag marks the upstream dual-stack specs.
const dualStackTag = "[Feature:IPv6DualStack]"

// Build reads a ginkgo JSON report (a list of suite reports) and summarises
// the specs that focus and skip (the regular expressions of the run) select.
func Build(r io.Reader, focus, skip string) (Summary, error) {
	var reports []ginkgoReport
	if err := json.NewDecoder(r).Decode(&reports); err != nil {
		return Summary{}, fmt.Errorf("read ginkgo JSON report: %w", err)
	}
	if len(reports) != 1 {
		return Summary{}, fmt.Errorf("ginkgo JSON report: want one suite, found %d", len(reports))
	}
	focusRE, err := regexp.Compile(focus)
	if err != nil {
		return Summary{}, fmt.Errorf("focus: %w", err)
	}
	skipRE, err := regexp.Compile(skip)
	if err != nil {
		return Summary{}, fmt.Errorf("skip: %w", err)
	}
	rep := reports[0]
	sum := Summary{
		Suite: rep.SuiteDescription, Started: rep.StartTime, Duration: rep.RunTime.Round(time.Second).String(),
		Focus: focus, Skip: skip, Succeeded: rep.SuiteSucceeded, SuiteErrors: rep.SpecialSuiteFailureReasons,
	}
	leftOut := map[string]int{}
	for _, s := range rep.SpecReports {
		if s.LeafNodeType != "It" {
			// Suite-level nodes (BeforeSuite, ReportAfterSuite...) count
			// only when they fail: then no spec may have run.
			if st := outcome(s.State); st == "failed" {
				sum.SuiteErrors = append(sum.SuiteErrors, fmt.Sprintf("%s: %s", s.LeafNodeType, reason(s)))
			}
			continue
		}
		text := s.text()
		if !focusRE.MatchString(text) {
			continue
		}
		if tag := skipRE.FindString(text); tag != "" {
			leftOut[tag]++
			if strings.Contains(text, dualStackTag) {
				sum.DualStackLeftOut++
			}
			continue
		}
		spec := Spec{Name: text, State: outcome(s.State), Seconds: int(s.RunTime.Round(time.Second) / time.Second)}
		if spec.State != "passed" {
			spec.Reason = reason(s)
			if s.Failure != nil && spec.State == "failed" {
				spec.Location = fmt.Sprintf("%s:%d", trimModulePath(s.Failure.Location.FileName), s.Failure.Location.LineNumber)
			}
		}
		g := &sum.Other
		switch {
		case strings.Contains(text, "[Conformance]"):
			g = &sum.Conformance
		case strings.Contains(text, dualStackTag):
			g = &sum.DualStack
		}
		g.add(spec)
	}
	for reason, n := range leftOut {
		sum.LeftOut = append(sum.LeftOut, Count{Reason: reason, Specs: n})
	}
	sort.Slice(sum.LeftOut, func(i, j int) bool {
		if sum.LeftOut[i].Specs != sum.LeftOut[j].Specs {
			return sum.LeftOut[i].Specs > sum.LeftOut[j].Specs
		}
		return sum.LeftOut[i].Reason < sum.LeftOut[j].Reason
	})
	for _, g := range []*Group{&sum.Conformance, &sum.DualStack, &sum.Other} {
		sort.Slice(g.Specs, func(i, j int) bool { return g.Specs[i].Name < g.Specs[j].Name })
	}
	return sum, nil
}

func (g *Group) add(s Spec) {
	switch s.State {
	case "passed":
		g.Passed++
	case "failed":
		g.Failed++
	default:
		g.Skipped++
	}
	g.Specs = append(g.Specs, s)
}

// outcome folds ginkgo's spec states into passed, failed and skipped.
func outcome(state string) string {
	switch state {
	case "passed":
		return "passed"
	case "skipped", "pending":
		return "skipped"
	}
	// failed, panicked, timedout, interrupted, aborted.
	return "failed"
}

// reason is the first line of a spec's failure or skip message (the state
// itself when it has none: a spec the run never reached).
func reason(s ginkgoSpec) string {
	if s.Failure == nil || strings.TrimSpace(s.Failure.Message) == "" {
		if s.State == "skipped" {
			return "not run (the run ended before it)"
		}
		return s.State
	}
	msg := strings.TrimSpace(s.Failure.Message)
	first, _, _ := strings.Cut(msg, "\n")
	if s.State != "skipped" && s.State != "failed" {
		first = s.State + ": " + first
	}
	const max = 300
	if len(first) > max {
		first = first[:max] + "..."
	}
	return first
}

// trimModulePath shortens a file name in the module cache to its path in
// the Kubernetes tree ("test/e2e/network/service.go").
func trimModulePath(file string) string {
	if i := strings.Index(file, "/test/e2e/"); i >= 0 {
		return file[i+1:]
	}
	return file
}

// ConformancePassed tells whether every Conformance spec passed (and there was at
// least one) and the suite itself did not fail before or after the specs.
func (s Summary) ConformancePassed() bool {
	return s.Conformance.Passed > 0 && s.Conformance.Failed == 0 && s.Conformance.Skipped == 0 && len(s.SuiteErrors) == 0
}

// AllPassed tells whether no spec in scope failed and the suite did not fail.
func (s Summary) AllPassed() bool {
	return s.ConformancePassed() && s.Other.Failed == 0 && s.DualStack.Failed == 0
}
