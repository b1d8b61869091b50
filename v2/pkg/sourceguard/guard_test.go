package sourceguard

import (
	"context"
	"errors"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/nft"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

const (
	ifA = "vcoil0123456789"
	ifB = "vcoilabcdef0123"
)

var (
	a4 = netip.MustParseAddr("10.64.0.5")
	a6 = netip.MustParseAddr("fd00:64::5")
	b4 = netip.MustParseAddr("10.64.0.6")
)

func newGuard(t *testing.T, tbl nft.Table) *Guard {
	t.Helper()
	g, err := New(tbl, "vcoil", logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// elementsOfTable lists both sets as "set: if . source", sorted.
func elementsOfTable(t *testing.T, tbl nft.Table) []string {
	t.Helper()
	var out []string
	for _, set := range []string{Set4, Set6} {
		elems, err := tbl.Elements(context.Background(), set)
		if err != nil {
			t.Fatalf("elements of %s: %v", set, err)
		}
		for _, e := range elems {
			out = append(out, set+": "+strings.Join(e.Key, " . "))
		}
	}
	slices.Sort(out)
	return out
}

func wantElements(t *testing.T, tbl nft.Table, want ...string) {
	t.Helper()
	slices.Sort(want)
	if got := elementsOfTable(t, tbl); !slices.Equal(got, want) {
		t.Fatalf("elements:\n got %q\nwant %q", got, want)
	}
}

// exerciseGuard is what the guard does on the kernel and on the Fake.
func exerciseGuard(t *testing.T, tbl nft.Table) {
	ctx := context.Background()
	g := newGuard(t, tbl)
	if err := g.Healthy(ctx); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("healthy without a table: %v", err)
	}
	if err := g.Forget(ctx, ifA); err != nil {
		t.Fatalf("forget without a table: %v", err)
	}
	if err := g.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	if v, exists, err := tbl.Format(ctx, Kind); v != formatversion.SourceTable || !exists || err != nil {
		t.Fatalf("format %d %v %v", v, exists, err)
	}

	// An address inside one of the prefixes is the prefix's.
	p := []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("198.51.100.128/25"), netip.MustParsePrefix("fd99::/48")}
	if err := g.Allow(ctx, ifA, []netip.Addr{a4, a6, netip.MustParseAddr("198.51.100.7")}, p); err != nil {
		t.Fatal(err)
	}
	if err := g.Allow(ctx, ifB, []netip.Addr{b4}, nil); err != nil {
		t.Fatal(err)
	}
	wantElements(t, tbl,
		"allow4: vcoil0123456789 . 10.64.0.5", "allow4: vcoil0123456789 . 198.51.100.0/24", "allow6: vcoil0123456789 . fd00:64::5",
		"allow6: vcoil0123456789 . fd99::/48", "allow4: vcoilabcdef0123 . 10.64.0.6")
	if err := g.Check(ctx, ifA, []netip.Addr{a4, a6}, p); err != nil {
		t.Errorf("check of what Allow wrote: %v", err)
	}
	err := g.Check(ctx, ifA, []netip.Addr{a4, netip.MustParseAddr("10.64.0.9")}, nil)
	for _, want := range []string{"10.64.0.9 of set allow4 is missing", "fd99::/48 of set allow6 is unexpected", "198.51.100.0/24 of set allow4 is unexpected"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("check of other sources: %v, want it to say %q", err, want)
		}
	}

	// Allow replaces: a prefix grows over the address it held.
	if err := g.Allow(ctx, ifB, []netip.Addr{b4}, []netip.Prefix{netip.MustParsePrefix("10.64.0.0/29")}); err != nil {
		t.Fatal(err)
	}
	if err := g.Allow(ctx, ifA, []netip.Addr{a4}, nil); err != nil {
		t.Fatal(err)
	}
	wantElements(t, tbl, "allow4: vcoil0123456789 . 10.64.0.5", "allow4: vcoilabcdef0123 . 10.64.0.0/29")

	// Sync after a restart: B's veth is gone, C's elements are missing
	// (the table predates it), A keeps its prefix (known only to SetupPod)
	// and gets its missing address.
	if err := g.Allow(ctx, ifA, []netip.Addr{a4}, []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}); err != nil {
		t.Fatal(err)
	}
	ifC := "vcoilc0ffee0000"
	writes := writesOf(tbl)
	err = g.Sync(ctx, map[string]Entries{
		ifA: {Addrs: []netip.Addr{a4, a6, netip.MustParseAddr("203.0.113.9")}},
		ifC: {Addrs: []netip.Addr{netip.MustParseAddr("10.64.0.7")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	wantElements(t, tbl, "allow4: vcoil0123456789 . 10.64.0.5", "allow4: vcoil0123456789 . 203.0.113.0/24", "allow6: vcoil0123456789 . fd00:64::5",
		"allow4: vcoilc0ffee0000 . 10.64.0.7")
	if w := writesOf(tbl); writes >= 0 && w != writes+1 {
		t.Errorf("sync wrote %d times, want one batch", w-writes)
	}

	if err := g.Forget(ctx, ifC); err != nil {
		t.Fatal(err)
	}
	if err := g.Forget(ctx, ifC); err != nil {
		t.Fatalf("forget twice: %v", err)
	}
	wantElements(t, tbl, "allow4: vcoil0123456789 . 10.64.0.5", "allow4: vcoil0123456789 . 203.0.113.0/24", "allow6: vcoil0123456789 . fd00:64::5")

	// Ensure adopts its own table without a write.
	writes = writesOf(tbl)
	if err := newGuard(t, tbl).Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if w := writesOf(tbl); w != writes {
		t.Errorf("Ensure of an equal table wrote %d times", w-writes)
	}

	// A table whose rules were changed is made again with its elements.
	tx := tbl.NewTransaction()
	tx.Flush(&knftables.Chain{Name: Chain})
	if err := tbl.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if err := g.Healthy(ctx); err == nil || !strings.Contains(err.Error(), "rules") {
		t.Errorf("healthy with a flushed chain: %v", err)
	}
	if err := g.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	wantElements(t, tbl, "allow4: vcoil0123456789 . 10.64.0.5", "allow4: vcoil0123456789 . 203.0.113.0/24", "allow6: vcoil0123456789 . fd00:64::5")

	// A newer format is refused and left alone.
	tx = tbl.NewTransaction()
	tx.Delete(&knftables.Set{Name: nft.FormatSet})
	tx.Add(nft.NewFormatSet(Kind, formatversion.SourceTable+1))
	if err := tbl.Run(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if err := g.Ensure(ctx); !errors.Is(err, formatversion.ErrNewer) {
		t.Fatalf("ensure of a newer table: %v, want ErrNewer", err)
	}
	if err := g.Sync(ctx, nil); !errors.Is(err, formatversion.ErrNewer) {
		t.Fatalf("sync of a newer table: %v, want ErrNewer", err)
	}
	wantElements(t, tbl, "allow4: vcoil0123456789 . 10.64.0.5", "allow4: vcoil0123456789 . 203.0.113.0/24", "allow6: vcoil0123456789 . fd00:64::5")
	if err := tbl.Delete(ctx); err != nil {
		t.Fatal(err)
	}

	// Sync of no table makes it with the elements.
	if err := g.Sync(ctx, map[string]Entries{ifB: {Addrs: []netip.Addr{b4}}}); err != nil {
		t.Fatal(err)
	}
	wantElements(t, tbl, "allow4: vcoilabcdef0123 . 10.64.0.6")
	if v4, v6, err := g.Drops(ctx); v4 != 0 || v6 != 0 || err != nil {
		t.Errorf("drops %d %d %v", v4, v6, err)
	}
}

// writesOf is the Fake's count of writes, -1 for the kernel.
func writesOf(tbl nft.Table) int {
	if f, ok := tbl.(*nft.Fake); ok {
		return f.Writes
	}
	return -1
}

func TestGuardOnTheFake(t *testing.T) {
	exerciseGuard(t, NewFake())
}

// The table as the guard writes it, with two pods' elements.
func TestTheTableIsTheGoldenOne(t *testing.T) {
	ctx := context.Background()
	f := NewFake()
	g := newGuard(t, f)
	err := g.Sync(ctx, map[string]Entries{
		ifA: {Addrs: []netip.Addr{a4, a6}},
		ifB: {Addrs: []netip.Addr{b4}, Prefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "table.nft")
	got := f.Dump()
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update writes it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("table differs from %s (go test -update rewrites it):\n%s", golden, got)
	}
}

func TestEntriesAreCheckedAndPrefixesMasked(t *testing.T) {
	e, err := elementsOf(ifA, Entries{Addrs: []netip.Addr{netip.MustParseAddr("::ffff:10.0.0.1")}, Prefixes: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/16")}})
	if err != nil || !slices.Equal(e[Set4], []string{"10.1.0.0/16", "10.0.0.1"}) || len(e[Set6]) != 0 {
		t.Errorf("elements %v %v", e, err)
	}
	for _, bad := range []Entries{
		{Addrs: []netip.Addr{{}}},
		{Prefixes: []netip.Prefix{{}}},
		{Addrs: []netip.Addr{netip.MustParseAddr("fe80::1%eth0")}},
	} {
		if _, err := elementsOf(ifA, bad); err == nil {
			t.Errorf("entries %+v accepted", bad)
		}
	}
	for _, name := range []string{"", "vcoil*", "vcoil0123456789a"} {
		if _, err := elementsOf(name, Entries{Addrs: []netip.Addr{a4}}); err == nil {
			t.Errorf("interface %q accepted", name)
		}
	}
	if _, err := New(NewFake(), "vc*", logr.Discard()); err == nil {
		t.Error("a prefix with a wildcard accepted")
	}
}
