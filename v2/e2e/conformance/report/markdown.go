package report

import (
	"fmt"
	"io"
	"sort"
	"strings"
)

// WriteMarkdown writes the summary for people: the counts, every failure
// with its reason and location, the skips grouped by reason, and what the
// skip left out.
func (s Summary) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Upstream network e2e tests against the lab\n\n")
	fmt.Fprintf(&b, "Started %s, took %s. Focus `%s`, skip `%s`.\n\n",
		s.Started.UTC().Format("2006-01-02 15:04 UTC"), s.Duration, s.Focus, s.Skip)
	fmt.Fprintf(&b, "| specs | passed | failed | skipped |\n| --- | ---: | ---: | ---: |\n")
	fmt.Fprintf(&b, "| `[sig-network] ... [Conformance]` | %d | %d | %d |\n", s.Conformance.Passed, s.Conformance.Failed, s.Conformance.Skipped)
	if n := len(s.DualStack.Specs); n > 0 {
		fmt.Fprintf(&b, "| `[Feature:IPv6DualStack]` (%d in scope, %d left out by the skip) | %d | %d | %d |\n", n, s.DualStackLeftOut, s.DualStack.Passed, s.DualStack.Failed, s.DualStack.Skipped)
	}
	fmt.Fprintf(&b, "| other sig-network specs in scope | %d | %d | %d |\n\n", s.Other.Passed, s.Other.Failed, s.Other.Skipped)
	if len(s.SuiteErrors) > 0 {
		fmt.Fprintf(&b, "## Suite errors\n\n")
		for _, e := range s.SuiteErrors {
			fmt.Fprintf(&b, "- %s\n", oneLine(e))
		}
		b.WriteString("\n")
	}
	for _, g := range []struct {
		title string
		group Group
	}{{"Conformance", s.Conformance}, {"IPv6DualStack", s.DualStack}, {"Other sig-network specs", s.Other}} {
		var failed []Spec
		skipped := map[string][]string{}
		for _, sp := range g.group.Specs {
			switch sp.State {
			case "failed":
				failed = append(failed, sp)
			case "skipped":
				skipped[sp.Reason] = append(skipped[sp.Reason], sp.Name)
			}
		}
		if len(failed) > 0 {
			fmt.Fprintf(&b, "## %s: failed\n\n", g.title)
			for _, sp := range failed {
				fmt.Fprintf(&b, "- %s (%s, %ds): %s\n", sp.Name, sp.Location, sp.Seconds, oneLine(sp.Reason))
			}
			b.WriteString("\n")
		}
		if len(skipped) > 0 {
			fmt.Fprintf(&b, "## %s: skipped, by reason\n\n", g.title)
			reasons := make([]string, 0, len(skipped))
			for r := range skipped {
				reasons = append(reasons, r)
			}
			sort.Strings(reasons)
			for _, r := range reasons {
				fmt.Fprintf(&b, "- %s (%d):\n", oneLine(r), len(skipped[r]))
				for _, name := range skipped[r] {
					fmt.Fprintf(&b, "  - %s\n", name)
				}
			}
			b.WriteString("\n")
		}
	}
	if len(s.LeftOut) > 0 {
		fmt.Fprintf(&b, "## Left out by the skip\n\nsig-network specs not run, by the first tag the skip matched:\n\n| tag | specs |\n| --- | ---: |\n")
		total := 0
		for _, c := range s.LeftOut {
			fmt.Fprintf(&b, "| `%s` | %d |\n", c.Reason, c.Specs)
			total += c.Specs
		}
		fmt.Fprintf(&b, "| all | %d |\n", total)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// oneLine keeps a reason on one line of a Markdown list.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
