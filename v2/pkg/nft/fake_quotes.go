package nft

import (
	"context"
	"errors"
	"strings"

	"sigs.k8s.io/knftables"
)

// QuotingFake is a Fake that also takes rules holding quoted strings
// (`counter name "g0" drop`, `log prefix "x: " level info`), which
// knftables' Fake, under the Fake, cannot parse: it reads a rule's text up
// to its first double quote, the start of its comment. The quotes of a
// rule's text (not of its comment) are kept as quoteMark inside, and given
// back by Dump and Text; Read is unchanged, as it gives rules' comments
// only. KnftTable's rules hold the mark.
type QuotingFake struct {
	*Fake
}

var _ Table = (*QuotingFake)(nil)

// NewQuotingFake is NewFake for rules with quoted strings.
func NewQuotingFake(family knftables.Family, name string, layouts Layouts) *QuotingFake {
	return &QuotingFake{NewFake(family, name, layouts)}
}

// quoteMark stands for a double quote in a rule's text: a private-use
// character, which no nft statement holds.
const quoteMark = "\uE000"

// markQuotes replaces the double quotes of the rules' texts in script by
// quoteMark, leaving their comments (` comment "..."` at the end) alone.
func markQuotes(script string) string {
	if !strings.Contains(script, `"`) {
		return script
	}
	lines := strings.Split(script, "\n")
	for i, line := range lines {
		words := strings.Fields(line)
		if len(words) < 2 || words[1] != "rule" {
			continue
		}
		body, comment := line, ""
		if j := strings.LastIndex(line, ` comment "`); j >= 0 {
			rest := line[j+len(` comment "`):]
			if k := strings.IndexByte(rest, '"'); k == len(strings.TrimRight(rest, " \t"))-1 {
				body, comment = line[:j], line[j:]
			}
		}
		lines[i] = strings.ReplaceAll(body, `"`, quoteMark) + comment
	}
	return strings.Join(lines, "\n")
}

func unmarkQuotes(s string) string { return strings.ReplaceAll(s, quoteMark, `"`) }

// unmarkError gives an error's statement and message their quotes back.
func unmarkError(err error) error {
	var e *Error
	if errors.As(err, &e) {
		e.Statement, e.Message = unmarkQuotes(e.Statement), unmarkQuotes(e.Message)
	}
	return err
}

func (q *QuotingFake) Run(ctx context.Context, tx *knftables.Transaction) error {
	if text := tx.String(); !strings.Contains(text, "# ERROR: ") {
		return unmarkError(q.Fake.RunScript(ctx, markQuotes(text)))
	}
	return q.Fake.Run(ctx, tx)
}

func (q *QuotingFake) Check(ctx context.Context, tx *knftables.Transaction) error {
	if text := tx.String(); !strings.Contains(text, "# ERROR: ") {
		return unmarkError(q.Fake.CheckScript(ctx, markQuotes(text)))
	}
	return q.Fake.Check(ctx, tx)
}

func (q *QuotingFake) RunScript(ctx context.Context, script string) error {
	return unmarkError(q.Fake.RunScript(ctx, markQuotes(script)))
}

func (q *QuotingFake) CheckScript(ctx context.Context, script string) error {
	return unmarkError(q.Fake.CheckScript(ctx, markQuotes(script)))
}

// Dump is Fake.Dump with the rules' quotes.
func (q *QuotingFake) Dump() string { return unmarkQuotes(q.Fake.Dump()) }

func (q *QuotingFake) Text(ctx context.Context) (string, error) {
	s, err := q.Fake.Text(ctx)
	return unmarkQuotes(s), err
}
