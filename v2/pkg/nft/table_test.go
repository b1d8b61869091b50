package nft

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// The sets of the test table: one of each layout the renderers use.
var testLayouts = FixedLayouts(map[string]Layout{
	"h4":     {Key: []Field{IPv4Addr}},
	"n4":     {Key: []Field{IPv4Interval}},
	"n6":     {Key: []Field{IPv6Interval}},
	"hp4":    {Key: []Field{IPv4Addr, Proto, Port}},
	"self6":  {Key: []Field{IPv6Addr, IPv6Addr}},
	"in4":    {Key: []Field{IPv4Addr}, Value: []Field{Verdict}},
	"be4":    {Key: []Field{IPv4Addr, Proto, Port}, Value: []Field{IPv4Addr, Port}},
	"allow4": {Key: []Field{IPv4Addr, Proto, Port, IPv4Interval}},
	"src6":   {Key: []Field{IfName, IPv6Interval}},
})

// makeTestTable writes the test table as the renderers do: objects with
// knftables, elements with scripts of many elements per command and with
// netlink batches.
func makeTestTable(t *testing.T, tbl Table) {
	t.Helper()
	ctx := context.Background()
	tx := tbl.NewTransaction()
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("test")})
	tx.Add(NewFormatSet("test", 2))
	tx.Add(&knftables.Set{Name: "h4", Type: "ipv4_addr"})
	tx.Add(&knftables.Set{Name: "n4", Type: "ipv4_addr", Flags: []knftables.SetFlag{knftables.IntervalFlag}, Comment: knftables.PtrTo("peers")})
	tx.Add(&knftables.Set{Name: "n6", Type: "ipv6_addr", Flags: []knftables.SetFlag{knftables.IntervalFlag}})
	tx.Add(&knftables.Set{Name: "hp4", Type: "ipv4_addr . inet_proto . inet_service"})
	tx.Add(&knftables.Set{Name: "self6", Type: "ipv6_addr . ipv6_addr"})
	tx.Add(&knftables.Set{Name: "allow4", Type: "ipv4_addr . inet_proto . inet_service . ipv4_addr", Flags: []knftables.SetFlag{knftables.IntervalFlag}})
	tx.Add(&knftables.Set{Name: "src6", Type: "ifname . ipv6_addr", Flags: []knftables.SetFlag{knftables.IntervalFlag}})
	tx.Add(&knftables.Map{Name: "be4", Type: "ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service"})
	tx.Add(&knftables.Counter{Name: "g1"})
	tx.Add(&knftables.Chain{Name: "g1"})
	tx.Add(&knftables.Chain{Name: "g2"})
	tx.Add(&knftables.Map{Name: "in4", Type: "ipv4_addr : verdict"})
	tx.Add(&knftables.Chain{Name: "input", Type: knftables.PtrTo(knftables.FilterType),
		Hook: knftables.PtrTo(knftables.InputHook), Priority: knftables.PtrTo(knftables.FilterPriority)})
	tx.Add(&knftables.Rule{Chain: "input", Rule: "ip daddr vmap @in4", Comment: knftables.PtrTo("dispatch")})
	tx.Add(&knftables.Rule{Chain: "input", Rule: "ip saddr @n4 accept"})
	tx.Add(&knftables.Rule{Chain: "g1", Rule: "counter name g1 drop", Comment: knftables.PtrTo("deny")})
	if err := tbl.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	script := strings.Join([]string{
		"add element inet t hp4 { 10.0.0.1 . tcp . 80, 10.0.0.2 . 17 . 53 }",
		"add element inet t n4 { 10.0.0.0/8, 192.168.1.1-192.168.1.5, 172.16.0.1 }",
		"add element inet t in4 { 10.1.0.1 : jump g1, 10.1.0.2 : jump g2 }",
		"add element inet t be4 { 10.0.0.1 . tcp . 80 : 10.2.0.1 . 8080 }",
		"add element inet t allow4 { 10.0.0.1 . tcp . 80 . 10.3.0.0/16 }",
		`add element inet t src6 { "vcoil0123456789" . fd00::1, vcoil0123456789 . fd01::/64 }`,
		"",
	}, "\n")
	if err := tbl.CheckScript(ctx, script); err != nil {
		t.Fatal(err)
	}
	if err := tbl.RunScript(ctx, script); err != nil {
		t.Fatal(err)
	}
	err := tbl.ApplyElements(ctx, []ElementOp{
		{Set: "h4", Key: []string{"10.9.0.1"}},
		{Set: "h4", Key: []string{"10.9.0.2"}},
		{Set: "n6", Key: []string{"fd00::/64"}},
		{Set: "n6", Key: []string{"fd01::5"}},
		{Set: "self6", Key: []string{"fd00::1", "fd00::1"}},
		{Set: "in4", Key: []string{"10.1.0.3"}, Value: []string{"jump g2"}},
		{Set: "in4", Key: []string{"10.1.0.2"}, Delete: true},
		{Set: "h4", Key: []string{"10.9.0.2"}, Delete: true},
		{Set: "src6", Key: []string{"vcoilabcdef0123", "fd02::/48"}},
		{Set: "src6", Key: []string{"vcoilabcdef0123", "fd00::1"}},
		{Set: "src6", Key: []string{"vcoil0123456789", "fd01::/64"}, Delete: true},
	})
	if err != nil {
		t.Fatal(err)
	}
}

func elementTexts(elems []*knftables.Element) []string {
	var out []string
	for _, e := range elems {
		s := strings.Join(e.Key, " . ")
		if e.Value != nil {
			s += " : " + strings.Join(e.Value, " . ")
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// exerciseTable is the behaviour both the kernel and the Fake show.
func exerciseTable(t *testing.T, tbl Table) {
	ctx := context.Background()
	if c, err := tbl.Read(ctx); err != nil || c.Exists {
		t.Fatalf("before: %+v %v, want no table", c, err)
	}
	if v, exists, err := tbl.Format(ctx, "test"); v != 0 || exists || err != nil {
		t.Fatalf("format of no table: %d %v %v", v, exists, err)
	}
	if err := tbl.Delete(ctx); err != nil {
		t.Fatalf("delete a missing table: %v", err)
	}
	makeTestTable(t, tbl)

	c, err := tbl.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Exists {
		t.Fatal("the table does not exist")
	}
	wantSets := map[string]SetInfo{
		"format": {Type: "ipv4_addr", Comment: "vcoil test v2"},
		"n4":     {Type: "ipv4_addr", Interval: true, Comment: "peers"},
		"hp4":    {Type: "ipv4_addr . inet_proto . inet_service"},
		"in4":    {Map: true, Type: "ipv4_addr", ValueType: "verdict"},
		"be4":    {Map: true, Type: "ipv4_addr . inet_proto . inet_service", ValueType: "ipv4_addr . inet_service"},
		"src6":   {Type: "ifname . ipv6_addr", Interval: true},
	}
	for name, want := range wantSets {
		got := c.Sets[name]
		want.Name = name
		if got == nil || *got != want {
			t.Errorf("set %s: %+v, want %+v", name, got, want)
		}
	}
	for _, name := range []string{"h4", "n6", "self6", "allow4", "src6"} {
		if c.Sets[name] == nil {
			t.Errorf("set %s missing", name)
		}
	}
	if ch := c.Chains["input"]; ch == nil || !ch.Base || !slices.Equal(ch.Rules, []string{"dispatch", ""}) {
		t.Errorf("chain input: %+v", ch)
	}
	if ch := c.Chains["g1"]; ch == nil || ch.Base || !slices.Equal(ch.Rules, []string{"deny"}) {
		t.Errorf("chain g1: %+v", ch)
	}
	if ch := c.Chains["g2"]; ch == nil || len(ch.Rules) != 0 {
		t.Errorf("chain g2: %+v", ch)
	}
	if !c.Counters["g1"] || len(c.Counters) != 1 {
		t.Errorf("counters %v", c.Counters)
	}
	if cs, err := tbl.Counters(ctx); err != nil || len(cs) != 1 || cs[0].Name != "g1" {
		t.Errorf("counters %+v %v", cs, err)
	}

	want := map[string][]string{
		"h4":     {"10.9.0.1"},
		"n4":     {"10.0.0.0/8", "172.16.0.1", "192.168.1.1-192.168.1.5"},
		"n6":     {"fd00::/64", "fd01::5"},
		"hp4":    {"10.0.0.1 . tcp . 80", "10.0.0.2 . udp . 53"},
		"self6":  {"fd00::1 . fd00::1"},
		"in4":    {"10.1.0.1 : jump g1", "10.1.0.3 : jump g2"},
		"be4":    {"10.0.0.1 . tcp . 80 : 10.2.0.1 . 8080"},
		"allow4": {"10.0.0.1 . tcp . 80 . 10.3.0.0/16"},
		"src6":   {"vcoil0123456789 . fd00::1", "vcoilabcdef0123 . fd00::1", "vcoilabcdef0123 . fd02::/48"},
	}
	for set, w := range want {
		elems, err := tbl.Elements(ctx, set)
		if err != nil {
			t.Errorf("elements of %s: %v", set, err)
			continue
		}
		if got := elementTexts(elems); !slices.Equal(got, w) {
			t.Errorf("elements of %s: %q, want %q", set, got, w)
		}
		for _, e := range elems {
			if e.Set+e.Map != set || (e.Map != "") != (e.Value != nil) {
				t.Errorf("element %+v of %s: wrong set or map", e, set)
			}
		}
	}
	if _, err := tbl.Elements(ctx, "format"); err == nil {
		t.Error("elements of a set without a layout: no error")
	}

	if v, exists, err := tbl.Format(ctx, "test"); v != 2 || !exists || err != nil {
		t.Errorf("format: %d %v %v, want 2", v, exists, err)
	}
	if err := tbl.CheckFormat(ctx, "test", 2); err != nil {
		t.Errorf("check format 2 against 2: %v", err)
	}
	if err := tbl.CheckFormat(ctx, "test", 1); !errors.Is(err, formatversion.ErrNewer) ||
		!strings.Contains(err.Error(), "nftables table inet t") {
		t.Errorf("check format 2 against 1: %v, want a NewerError naming the table", err)
	}
	if _, _, err := tbl.Format(ctx, "other"); err == nil {
		t.Error("format of another kind: no error")
	}

	// A failed script changes nothing and names its statement.
	bad := "add element inet t h4 { 10.9.0.7 }\ndelete element inet t h4 { 10.9.0.9 }\n"
	for _, run := range []func(context.Context, string) error{tbl.CheckScript, tbl.RunScript} {
		err = run(ctx, bad)
		var e *Error
		if !errors.As(err, &e) || e.Line != 2 || !strings.Contains(e.Statement, "delete element inet t h4") || !IsNotFound(err) {
			t.Errorf("bad script: %v (%#v), want a not-found error at line 2", err, e)
		}
	}
	if got, _ := tbl.Elements(ctx, "h4"); !slices.Equal(elementTexts(got), []string{"10.9.0.1"}) {
		t.Errorf("after a failed script: h4 %q", elementTexts(got))
	}
	if err := tbl.ApplyElements(ctx, []ElementOp{{Set: "h4", Key: []string{"10.9.0.8"}}, {Set: "h4", Key: []string{"10.9.0.9"}, Delete: true}}); err == nil {
		t.Error("a batch deleting a missing element: no error")
	}
	if got, _ := tbl.Elements(ctx, "h4"); !slices.Equal(elementTexts(got), []string{"10.9.0.1"}) {
		t.Errorf("after a failed batch: h4 %q", elementTexts(got))
	}

	// A chain a map element jumps to cannot go before the element.
	tx := tbl.NewTransaction()
	tx.Flush(&knftables.Chain{Name: "g1"})
	tx.Delete(&knftables.Chain{Name: "g1"})
	tx.Delete(&knftables.Element{Map: "in4", Key: []string{"10.1.0.1"}})
	for _, run := range []func(context.Context, *knftables.Transaction) error{tbl.Check, tbl.Run} {
		var e *Error
		if err := run(ctx, tx); !errors.As(err, &e) || e.Errno != syscall.EBUSY || e.Line != 2 {
			t.Errorf("deleting a chain in use: %v, want EBUSY at line 2", err)
		}
	}
	if got, _ := tbl.Elements(ctx, "in4"); len(got) != 2 {
		t.Errorf("in4 after a failed transaction: %q", elementTexts(got))
	}

	// Flushes and deletions, as the policy renderer writes them.
	tx = tbl.NewTransaction()
	tx.Delete(&knftables.Element{Map: "in4", Key: []string{"10.1.0.1"}})
	tx.Flush(&knftables.Chain{Name: "g1"})
	tx.Delete(&knftables.Chain{Name: "g1"})
	tx.Delete(&knftables.Counter{Name: "g1"})
	tx.Flush(&knftables.Set{Name: "n4"})
	tx.Delete(&knftables.Set{Name: "hp4"})
	if err := tbl.Check(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if err := tbl.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	c, err = tbl.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c.Chains["g1"] != nil || c.Counters["g1"] || c.Sets["hp4"] != nil {
		t.Errorf("after deletions: %+v", c)
	}
	if got, _ := tbl.Elements(ctx, "n4"); len(got) != 0 {
		t.Errorf("n4 after a flush: %q", elementTexts(got))
	}
	if got, _ := tbl.Elements(ctx, "in4"); !slices.Equal(elementTexts(got), []string{"10.1.0.3 : jump g2"}) {
		t.Errorf("in4: %q", elementTexts(got))
	}
	text, err := tbl.Text(ctx)
	if err != nil || !strings.Contains(text, "in4") {
		t.Errorf("text: %q %v", text, err)
	}

	if err := tbl.RunScript(ctx, "delete table inet t\n"); err != nil {
		t.Fatal(err)
	}
	if c, err := tbl.Read(ctx); err != nil || c.Exists {
		t.Errorf("after delete: %+v %v", c, err)
	}
	if text, err := tbl.Text(ctx); text != "" || err != nil {
		t.Errorf("text of no table: %q %v", text, err)
	}
}

func TestFake(t *testing.T) {
	exerciseTable(t, NewFake(knftables.InetFamily, "t", testLayouts))
}

func TestKernel(t *testing.T) {
	netnstest.RequireRoot(t)
	n := netnstest.New(t, "nft")
	tbl, err := Open(n.NetNS(), knftables.InetFamily, "t", testLayouts)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	exerciseTable(t, tbl)
	tables, err := ListTables(n.NetNS())
	if err != nil || len(tables) != 0 {
		t.Errorf("tables after delete: %v %v", tables, err)
	}
}

func TestKernelCountersCarryTheirValues(t *testing.T) {
	netnstest.RequireRoot(t)
	n := netnstest.New(t, "nftctr")
	tbl, err := Open(n.NetNS(), knftables.InetFamily, "c", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	if err := tbl.RunScript(t.Context(), "add table inet c\nadd counter inet c denied { packets 5 bytes 300 }\n"); err != nil {
		t.Fatal(err)
	}
	cs, err := tbl.Counters(t.Context())
	if err != nil || len(cs) != 1 || cs[0] != (Counter{Name: "denied", Packets: 5, Bytes: 300}) {
		t.Errorf("counters %+v %v, want denied 5 packets 300 bytes", cs, err)
	}
}

// counterSetScript makes a set with a counter per element, as a rule
// adding to it would, and one element with counts.
const counterSetScript = "add table inet c\n" +
	"add set inet c h4 { type ipv4_addr ; flags dynamic ; size 1024 ; counter ; comment \"denied\" ; }\n" +
	"add element inet c h4 { 198.51.100.7 counter packets 3 bytes 180 }\n"

func checkCounterSet(t *testing.T, tbl Table, packets uint64) {
	t.Helper()
	c, err := tbl.Read(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := SetInfo{Name: "h4", Type: "ipv4_addr", Comment: "denied", Dynamic: true, ElementExprs: true}
	if got := c.Sets["h4"]; got == nil || *got != want {
		t.Errorf("set h4: %+v, want %+v", got, want)
	}
	cs, err := tbl.ElementCounters(t.Context(), "h4")
	want1 := []ElementCounter{{Key: []string{"198.51.100.7"}, Packets: packets, Bytes: packets * 60}}
	if err != nil || !reflect.DeepEqual(cs, want1) {
		t.Errorf("element counters %+v %v, want %+v", cs, err, want1)
	}
	if _, err := tbl.ElementCounters(t.Context(), "n4"); err == nil {
		t.Error("element counters of an interval set: no error")
	}
}

func TestKernelElementCountersCarryTheirValues(t *testing.T) {
	netnstest.RequireRoot(t)
	n := netnstest.New(t, "nftelem")
	tbl, err := Open(n.NetNS(), knftables.InetFamily, "c", testLayouts)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	if err := tbl.RunScript(t.Context(), counterSetScript); err != nil {
		t.Fatal(err)
	}
	checkCounterSet(t, tbl, 3)
}

// The Fake keeps which sets have counters, but counts nothing.
func TestFakeElementCountersAreZero(t *testing.T) {
	tbl := NewFake(knftables.InetFamily, "c", testLayouts)
	if err := tbl.RunScript(t.Context(), strings.Replace(counterSetScript, " counter packets 3 bytes 180", "", 1)); err != nil {
		t.Fatal(err)
	}
	checkCounterSet(t, tbl, 0)
	if err := tbl.Delete(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := tbl.RunScript(t.Context(), "add table inet c\nadd set inet c h4 { type ipv4_addr ; }\n"); err != nil {
		t.Fatal(err)
	}
	if c, err := tbl.Read(t.Context()); err != nil || c.Sets["h4"].ElementExprs {
		t.Errorf("a set made again without counters: %+v %v", c.Sets["h4"], err)
	}
}

// A batch of MaxApplyOps elements of the largest layout vcoil writes (an
// IPv6 frontend to an IPv6 endpoint) fits one netlink message: adding and
// then deleting them works, and the map holds them in between.
func TestKernelTakesMaxApplyOpsOfTheLargestLayout(t *testing.T) {
	netnstest.RequireRoot(t)
	n := netnstest.New(t, "nft")
	layouts := FixedLayouts(map[string]Layout{"be6": {Key: []Field{IPv6Addr, Proto, Port}, Value: []Field{IPv6Addr, Port}}})
	tbl, err := Open(n.NetNS(), knftables.InetFamily, "big", layouts)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	ctx := t.Context()
	tx := tbl.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Add(&knftables.Map{Name: "be6", Type: "ipv6_addr . inet_proto . inet_service : ipv6_addr . inet_service"})
	if err := tbl.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	ops := make([]ElementOp, MaxApplyOps)
	for i := range ops {
		ops[i] = ElementOp{Set: "be6",
			Key:   []string{fmt.Sprintf("2001:db8:ffff:ffff:ffff:ffff:ffff:%x", i), "tcp", "65535"},
			Value: []string{fmt.Sprintf("2001:db8:eeee:eeee:eeee:eeee:eeee:%x", i), "65535"}}
	}
	if err := tbl.ApplyElements(ctx, ops); err != nil {
		t.Fatalf("a batch of %d elements: %v", len(ops), err)
	}
	if got, err := tbl.Elements(ctx, "be6"); err != nil || len(got) != MaxApplyOps {
		t.Fatalf("the map holds %d elements (%v), want %d", len(got), err, MaxApplyOps)
	}
	for i := range ops {
		ops[i].Delete, ops[i].Value = true, nil
	}
	if err := tbl.ApplyElements(ctx, ops); err != nil {
		t.Fatalf("deleting %d elements: %v", len(ops), err)
	}
}
