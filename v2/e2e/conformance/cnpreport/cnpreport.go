// Package cnpreport summarizes a run of the ClusterNetworkPolicy
// conformance profile (make e2e-cnp): the upstream report as the suite
// wrote it, and, for each failed test, the protocols of the probes that
// failed, read from the test's log, so that the tests that fail only for
// want of SCTP in the kernel are told from real failures.
package cnpreport

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	confv1a1 "sigs.k8s.io/network-policy-api/conformance/apis/v1alpha1"
	"sigs.k8s.io/yaml"
)

// Summary is what a run gave.
type Summary struct {
	Report confv1a1.ConformanceReport
	// Failed maps each failed test of the report to the protocols of its
	// failed probes (sorted; empty when its log names none: it failed for
	// another reason).
	Failed map[string][]string
}

// SCTPOnly lists the failed tests whose failed probes were all SCTP ones.
func (s *Summary) SCTPOnly() []string {
	var out []string
	for name, protos := range s.Failed {
		if len(protos) == 1 && protos[0] == "sctp" {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Other lists the failed tests that failed otherwise.
func (s *Summary) Other() []string {
	var out []string
	for name, protos := range s.Failed {
		if !(len(protos) == 1 && protos[0] == "sctp") {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

var (
	// runLine starts a test of the profile in go test -v output.
	runLine = regexp.MustCompile(`^=== RUN   \S+?/(CNP[A-Za-z]+)(/|$)`)
	// failedProbe is the suite's log line of a probe that failed.
	failedProbe = regexp.MustCompile(`FAILED Command was \[?/agnhost connect .*--protocol=([a-z]+)`)
)

// Read reads the upstream report (YAML) and the go test -v log of a run.
func Read(report, log io.Reader) (*Summary, error) {
	raw, err := io.ReadAll(report)
	if err != nil {
		return nil, err
	}
	s := &Summary{Failed: map[string][]string{}}
	if err := yaml.Unmarshal(raw, &s.Report); err != nil {
		return nil, fmt.Errorf("the conformance report: %w", err)
	}
	protos := map[string]map[string]bool{}
	current := ""
	sc := bufio.NewScanner(log)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := runLine.FindStringSubmatch(line); m != nil {
			current = m[1]
			continue
		}
		if m := failedProbe.FindStringSubmatch(line); m != nil && current != "" {
			if protos[current] == nil {
				protos[current] = map[string]bool{}
			}
			protos[current][m[1]] = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("the test log: %w", err)
	}
	for _, p := range s.Report.ProfileReports {
		failed := slices.Clone(p.Standard.FailedTests)
		if p.Experimental != nil {
			failed = append(failed, p.Experimental.FailedTests...)
		}
		for _, name := range failed {
			var ps []string
			for proto := range protos[name] {
				ps = append(ps, proto)
			}
			slices.Sort(ps)
			s.Failed[name] = ps
		}
	}
	return s, nil
}

// Markdown is the summary as docs/ shows it.
func (s *Summary) Markdown() string {
	var b strings.Builder
	r := &s.Report
	fmt.Fprintf(&b, "Implementation %s/%s %s, network-policy-api %s, %s.\n\n",
		r.Organization, r.Project, r.Version, r.NetworkPolicyBundleVersion, r.Date)
	b.WriteString("| profile | channel | result | passed | failed | skipped |\n|---|---|---|---|---|---|\n")
	for _, p := range r.ProfileReports {
		row := func(channel string, st confv1a1.Status) {
			fmt.Fprintf(&b, "| %s | %s | %s | %d | %d | %d |\n", p.Name, channel, st.Result,
				st.Statistics.Passed, st.Statistics.Failed, st.Statistics.Skipped)
		}
		row("standard", p.Standard)
		if p.Experimental != nil {
			row("experimental", p.Experimental.Status)
		}
	}
	if names := s.SCTPOnly(); len(names) > 0 {
		fmt.Fprintf(&b, "\nFailed at SCTP probes only (this kernel has no SCTP; not runnable here): %s.\n", strings.Join(names, ", "))
	}
	if names := s.Other(); len(names) > 0 {
		b.WriteString("\nFailed otherwise:\n\n")
		for _, n := range names {
			what := "no failed probe in its log"
			if ps := s.Failed[n]; len(ps) > 0 {
				what = "failed probes of " + strings.Join(ps, ", ")
			}
			fmt.Fprintf(&b, "- %s (%s)\n", n, what)
		}
	}
	return b.String()
}
