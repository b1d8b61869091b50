package nft

import (
	"context"
	"errors"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"
)

// quotedRules is a table whose rules hold quoted strings, as the policy
// renderer's do (a named counter, a log prefix).
const quotedRules = `add table inet t
add counter inet t g0
add chain inet t g0 { comment "ingress" ; }
add rule inet t g0 limit rate 10/second burst 20 packets log prefix "vcoil-policy g0 ingress drop: " level info comment "c1"
add rule inet t g0 counter name "g0" drop comment "c2"
add rule inet t g0 counter name "g0" drop
`

func TestQuotingFakeTakesRulesWithQuotedStrings(t *testing.T) {
	ctx := context.Background()
	if err := NewFake(knftables.InetFamily, "t", nil).RunScript(ctx, quotedRules); err == nil {
		t.Log("the plain Fake takes quoted strings in rules now: QuotingFake may go")
	}
	f := NewQuotingFake(knftables.InetFamily, "t", nil)
	if err := f.RunScript(ctx, quotedRules); err != nil {
		t.Fatal(err)
	}
	// A transaction too, and a later script over what is held (the Fake
	// copies its table for each write).
	tx := f.NewTransaction()
	tx.Add(&knftables.Chain{Name: "g1"})
	tx.Add(&knftables.Rule{Chain: "g1", Rule: `counter name "g0" accept`, Comment: knftables.PtrTo("c3")})
	if err := f.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if err := f.RunScript(ctx, "add rule inet t g1 drop comment \"c4\"\n"); err != nil {
		t.Fatal(err)
	}
	dump := f.Dump()
	for _, want := range []string{
		`log prefix "vcoil-policy g0 ingress drop: " level info comment "c1"`,
		`counter name "g0" drop comment "c2"`,
		`add rule inet t g0 counter name "g0" drop` + "\n",
		`add rule inet t g1 counter name "g0" accept comment "c3"`,
	} {
		if !strings.Contains(dump, want) {
			t.Errorf("the dump lacks %q:\n%s", want, dump)
		}
	}
	if text, err := f.Text(ctx); err != nil || text != dump || strings.Contains(text, quoteMark) {
		t.Errorf("Text = %q, %v; want the dump", text, err)
	}
	c, err := f.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Chains["g0"].Rules, ","); got != "c1,c2," {
		t.Errorf("the rules' comments of g0 are %q, want c1,c2,", got)
	}
	if got := strings.Join(c.Chains["g1"].Rules, ","); got != "c3,c4" {
		t.Errorf("the rules' comments of g1 are %q, want c3,c4", got)
	}
	// A refused statement is named with its quotes.
	bad := `add rule inet t nope counter name "g0" drop`
	var e *Error
	if err := f.RunScript(ctx, bad+"\n"); !errors.As(err, &e) || e.Statement != bad || e.Line != 1 {
		t.Errorf("a rule of a missing chain: %v, want an error naming %q", err, bad)
	}
	if err := f.CheckScript(ctx, "add rule inet t g1 log prefix \"x\" comment \"c5\"\n"); err != nil {
		t.Errorf("CheckScript: %v", err)
	}
	if f.Dump() != dump {
		t.Error("a refused script or a check changed the table")
	}
}
