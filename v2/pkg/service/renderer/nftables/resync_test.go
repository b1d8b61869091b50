package nftables

import (
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/vcoil/vcoil/v2/pkg/service"
)

// A hand-made change stands for drift: a plain Resync, which diffs with
// what the renderer last wrote, does not see it; the Resyncs that list the
// kernel (a new renderer's first, the one after a failed transaction, the
// one after FullResyncPeriod) repair it.
func TestResyncListsTheKernelOnlyWhenItsMirrorCannotBeTrusted(t *testing.T) {
	l := newLab(t)
	first := l.renderer()
	l.resync(first, everything()...)
	want := canonical(l.ruleset())
	element := v4.cluster(1) + " . tcp . 80"
	drift := func() {
		t.Helper()
		l.node.Exec("nft", "delete", "element", "inet", "vcoil-services", "services4", "{ "+element+" }")
		if strings.Contains(l.ruleset(), element+" : goto") {
			t.Fatal("the hand-made deletion did not happen")
		}
	}
	repaired := func(when string) {
		t.Helper()
		if got := canonical(l.ruleset()); got != want {
			t.Fatalf("%s: the table was not repaired:\n%s", when, l.ruleset())
		}
	}

	drift()
	l.resync(first, everything()...)
	if strings.Contains(l.ruleset(), element+" : goto") {
		t.Fatal("a Resync with a valid mirror listed the kernel and repaired the drift")
	}

	second := l.renderer()
	l.resync(second, everything()...)
	repaired("the first Resync of a new renderer")

	// A transaction fails on a table deleted behind the renderer's back.
	l.node.Exec("nft", "delete", "table", "inet", "vcoil-services")
	changed := &service.Changes{Upsert: []*service.Service{withNodePorts(dual("plain", 1, podA), 30080, 30053)}}
	if err := second.Update(t.Context(), changed); err == nil {
		t.Fatal("an Update into a deleted table succeeded")
	}
	l.resync(second, everything()...)
	repaired("the Resync after a failed transaction")

	periodic, err := New(Config{Netns: l.node.Path(), PodIfPrefix: podPrefix, FullResyncPeriod: time.Nanosecond}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer periodic.Close()
	l.resync(periodic, everything()...)
	drift()
	l.resync(periodic, everything()...)
	repaired("a Resync past FullResyncPeriod")
}
