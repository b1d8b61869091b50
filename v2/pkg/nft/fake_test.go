package nft

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

func TestFakeFailNextChangesNothing(t *testing.T) {
	ctx := context.Background()
	f := NewFake(knftables.InetFamily, "t", testLayouts)
	makeTestTable(t, f)
	before, writes := f.Dump(), f.Writes
	boom := errors.New("boom")
	f.FailNext(boom)
	err := f.RunScript(ctx, "add element inet t h4 { 10.9.0.3 }\n")
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "nftables table inet t") {
		t.Fatalf("got %v, want boom naming the table", err)
	}
	if f.Dump() != before || f.Writes != writes {
		t.Error("a failed write changed the table")
	}
	if err := f.RunScript(ctx, "add element inet t h4 { 10.9.0.3 }\n"); err != nil {
		t.Fatalf("the write after: %v", err)
	}
	if f.Writes != writes+1 {
		t.Errorf("writes %d, want %d", f.Writes, writes+1)
	}
}

func TestFakeRefusesWhatTheKernelWould(t *testing.T) {
	ctx := context.Background()
	f := NewFake(knftables.InetFamily, "t", testLayouts)
	makeTestTable(t, f)
	for _, script := range []string{
		"add element inet t h4 { 10.9.0.300 }",            // not an address
		"add element inet t hp4 { 10.0.0.1 . tcp }",       // a field short
		"add element inet t in4 { 10.1.0.9 : jump nope }", // no such chain
		"add element inet other s { 10.0.0.1 }",           // another table
		"create set inet t h4 { type ipv4_addr ; }",       // exists
		"rename chain inet t g1 g3",                       // not applied by the fake
	} {
		before := f.Dump()
		var e *Error
		if err := f.RunScript(ctx, "\n"+script+"\n"); !errors.As(err, &e) || e.Line != 2 || e.Statement != script {
			t.Errorf("%s: %v, want an error at line 2 naming it", script, err)
		}
		if f.Dump() != before {
			t.Errorf("%s: changed the table", script)
		}
	}
}

func TestFakeOutlivesClose(t *testing.T) {
	ctx := context.Background()
	f := NewFake(knftables.InetFamily, "t", testLayouts)
	makeTestTable(t, f)
	f.Close()
	if v, exists, err := f.Format(ctx, "test"); err != nil || !exists || v != 2 {
		t.Errorf("format after Close: %d %v %v", v, exists, err)
	}
}

func TestReplaceRefusesANewerTableAndReplacesAnOlder(t *testing.T) {
	ctx := context.Background()
	f := NewFake(knftables.IPv4Family, "t", nil)
	fill := func(tx *knftables.Transaction) { tx.Add(&knftables.Chain{Name: "c"}) }
	if err := Replace(ctx, f, "test", 2, "made by the test", fill); err != nil {
		t.Fatal(err)
	}
	if v, _, err := f.Format(ctx, "test"); v != 2 || err != nil {
		t.Fatalf("format %d %v, want 2", v, err)
	}
	before := f.Dump()
	if err := Replace(ctx, f, "test", 1, "", fill); !errors.Is(err, formatversion.ErrNewer) {
		t.Errorf("replace a newer table: %v, want ErrNewer", err)
	}
	if f.Dump() != before {
		t.Error("a newer table was changed")
	}
	if err := Replace(ctx, f, "test", 3, "", nil); err != nil {
		t.Fatal(err)
	}
	if c, err := f.Read(ctx); err != nil || c.Exists {
		t.Errorf("replace with nothing: %+v %v, want no table", c, err)
	}
}

func TestFormatCommentsRoundTrip(t *testing.T) {
	if v, ok := ParseFormatComment("services", FormatComment("services", 7)); !ok || v != 7 {
		t.Fatalf("ParseFormatComment = %d %v", v, ok)
	}
	for _, c := range []string{"", "vcoil policy v1", "vcoil services v", "vcoil services v0", "vcoil services v1x"} {
		if _, ok := ParseFormatComment("services", c); ok {
			t.Errorf("ParseFormatComment(%q) accepted", c)
		}
	}
}

// Rules with quoted strings and inline verdict maps, as the service
// renderer writes them, are held as written and keep their chains in use.
func TestFakeHoldsRulesAsWritten(t *testing.T) {
	ctx := context.Background()
	f := NewFake(knftables.InetFamily, "t", nil)
	rule := `iifname != "vcoil*" numgen random mod 2 vmap { 0 : goto e0, 1 : jump e1 }`
	script := "add table inet t\nadd chain inet t e0\nadd chain inet t e1\nadd chain inet t pick\n" +
		"add rule inet t pick " + rule + ` comment "585f42a227e6"` + "\n"
	if err := f.RunScript(ctx, script); err != nil {
		t.Fatal(err)
	}
	if d := f.Dump(); !strings.Contains(d, "add rule inet t pick "+rule+` comment "585f42a227e6"`) {
		t.Errorf("the rule is not held as written:\n%s", d)
	}
	c, err := f.Read(ctx)
	if err != nil || len(c.Chains["pick"].Rules) != 1 || c.Chains["pick"].Rules[0] != "585f42a227e6" {
		t.Fatalf("read: %+v %v", c, err)
	}
	var e *Error
	if err := f.RunScript(ctx, "delete chain inet t e0\n"); !errors.As(err, &e) || !errors.Is(err, syscall.EBUSY) {
		t.Errorf("deleting a chain a rule jumps to: %v, want EBUSY", err)
	}
	// A copy (every write makes one) keeps the rule.
	if err := f.RunScript(ctx, "add chain inet t other\n"); err != nil {
		t.Fatal(err)
	}
	if d := f.Dump(); !strings.Contains(d, rule) {
		t.Errorf("the rule changed in a copy:\n%s", d)
	}
}

// quotedRules is a table whose rules hold quoted strings, as the policy
// renderer's do (a named counter, a log prefix).
const quotedRules = `add table inet t
add counter inet t g0
add chain inet t g0 { comment "ingress" ; }
add rule inet t g0 limit rate 10/second burst 20 packets log prefix "vcoil-policy drop: " level info comment "c1"
add rule inet t g0 counter name "g0" drop comment "c2"
add rule inet t g0 counter name "g0" drop
`

// Rules with quoted strings in their text, not only in their comments,
// are taken from scripts and transactions, held as written, and named with
// their quotes when refused.
func TestFakeTakesRulesWithQuotedStrings(t *testing.T) {
	ctx := context.Background()
	f := NewFake(knftables.InetFamily, "t", nil)
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
		`log prefix "vcoil-policy drop: " level info comment "c1"`,
		`counter name "g0" drop comment "c2"`,
		`add rule inet t g0 counter name "g0" drop` + "\n",
		`add rule inet t g1 counter name "g0" accept comment "c3"`,
	} {
		if !strings.Contains(dump, want) {
			t.Errorf("the dump lacks %q:\n%s", want, dump)
		}
	}
	if text, err := f.Text(ctx); err != nil || text != dump {
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
