package nftables

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"
	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/nft"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// fakeRenderer is a renderer on a table in memory, without root: no
// namespace, no conntrack.
func fakeRenderer(t *testing.T, tbl *nft.Fake) *renderer {
	t.Helper()
	r, err := newRenderer(Config{PodIfPrefix: podPrefix}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	r.table = tbl
	r.deleteFlows = func(*staleFlows) (uint, error) { return 0, nil }
	return r
}

func fakeState(services ...*service.Service) *service.State {
	st := &service.State{
		Node: service.Node{
			Name:              "node",
			NodePortAddresses: []netip.Addr{netip.MustParseAddr(v4.node), netip.MustParseAddr(v6.node)},
			NATLoopback:       []netip.Addr{netip.MustParseAddr(v4.loopback), netip.MustParseAddr(v6.loopback)},
		},
		Services: map[service.ID]*service.Service{},
	}
	for _, s := range services {
		st.Services[s.ID] = s
	}
	return st
}

// sortedDump is the fake's table, one statement a line, in an order that
// does not depend on the order of the writes.
func sortedDump(f *nft.Fake) string {
	lines := strings.Split(f.Dump(), "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// A new renderer adopts the table an old one left: with the same state it
// writes nothing, and it repairs what changed behind its back.
func TestANewRendererAdoptsTheTableWithoutRoot(t *testing.T) {
	ctx := t.Context()
	tbl := nft.NewFake(knftables.InetFamily, "vcoil-services", layoutOf)
	first := fakeRenderer(t, tbl)
	if err := first.Resync(ctx, fakeState(everything()...)); err != nil {
		t.Fatal(err)
	}
	want := sortedDump(tbl)
	for _, s := range []string{"add map inet vcoil-services services4", "10.98.0.1 . tcp . 80 . 203.0.113.0/24", "add set inet vcoil-services format"} {
		if !strings.Contains(want, s) {
			t.Fatalf("the table lacks %q:\n%s", s, want)
		}
	}

	writes := tbl.Writes
	second := fakeRenderer(t, tbl)
	if err := second.Resync(ctx, fakeState(everything()...)); err != nil {
		t.Fatal(err)
	}
	if tbl.Writes != writes || sortedDump(tbl) != want {
		t.Fatalf("adopting the table with the same state changed it (%d writes):\n%s", tbl.Writes-writes, tbl.Dump())
	}

	// Drift: an element deleted, a stray one added.
	element := v4.cluster(1) + " . tcp . 80"
	if err := tbl.RunScript(ctx, "delete element inet vcoil-services services4 { "+element+" }\n"+
		"add element inet vcoil-services no-endpoints4 { 10.96.99.99 . udp . 9 }\n"); err != nil {
		t.Fatal(err)
	}
	third := fakeRenderer(t, tbl)
	if err := third.Resync(ctx, fakeState(everything()...)); err != nil {
		t.Fatal(err)
	}
	if got := sortedDump(tbl); got != want {
		t.Fatalf("the new renderer did not repair the table:\n%s", tbl.Dump())
	}

	// A smaller state, then the whole one again from another renderer.
	if err := third.Resync(ctx, fakeState(everything()[:2]...)); err != nil {
		t.Fatal(err)
	}
	if sortedDump(tbl) == want {
		t.Fatal("a smaller state left the table as it was")
	}
	fourth := fakeRenderer(t, tbl)
	if err := fourth.Resync(ctx, fakeState(everything()...)); err != nil {
		t.Fatal(err)
	}
	if got := sortedDump(tbl); got != want {
		t.Fatalf("the whole state again does not give the same table:\n%s", tbl.Dump())
	}

	// A newer vcoild's table is refused and left unchanged.
	if err := tbl.RunScript(ctx, "delete set inet vcoil-services format\n"+
		"add set inet vcoil-services format { type ipv4_addr ; comment \"vcoil services v3\" ; }\n"); err != nil {
		t.Fatal(err)
	}
	before, writes := tbl.Dump(), tbl.Writes
	var ne *formatversion.NewerError
	if err := fakeRenderer(t, tbl).Resync(ctx, fakeState(everything()[:1]...)); !errors.As(err, &ne) || ne.Found != 3 {
		t.Fatalf("Resync over a newer table: %v, want a NewerError", err)
	}
	if tbl.Dump() != before || tbl.Writes != writes {
		t.Fatal("the newer table changed")
	}

	if err := fourth.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if tbl.KnftTable() != nil {
		t.Fatal("Remove left the table")
	}
}
