package nftables

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/knftables"
)

// The netlink reader must give, for every set and map of the table, the
// elements nft lists, in both families: what the renderer wrote, plus
// hand-made elements of the forms it does not write (a single address and
// a range that is not a prefix in firewall-allow, an affinity entry).
func TestElementsReadOverNetlinkAreThoseNftLists(t *testing.T) {
	l := newLab(t)
	ri := l.renderer()
	l.resync(ri, append(everything(), withAffinity(dual("sticky-v4-entry", 7, podA), 5*time.Second))...)
	for _, e := range []string{
		"firewall-allow4 { 10.98.0.1 . tcp . 80 . 198.51.100.7 }",
		"firewall-allow4 { 10.98.0.1 . udp . 53 . 198.51.100.20-198.51.100.30 }",
		"firewall-allow6 { fd00:98::1 . tcp . 80 . 2001:db8:198::7 }",
		"firewall-allow6 { fd00:98::1 . udp . 53 . 2001:db8:198::20-2001:db8:198::30 }",
		"affinity4-5 { 10.1.0.6 . 10.96.0.7 . tcp . 80 : 10.1.0.5 . 8080 }",
	} {
		l.node.Exec("nft", "add", "element", "inet", "vcoil-services", e)
	}
	r := ri.(*renderer)
	// nft's own listing, through knftables, in the node's namespace.
	var lister knftables.Interface
	var names []string
	if err := l.node.Do(func() error {
		var err error
		if lister, err = knftables.New(knftables.InetFamily, "vcoil-services"); err != nil {
			return err
		}
		all, err := lister.ListAll(t.Context())
		names = append(all["set"], all["map"]...)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	compared, elements := 0, 0
	for _, name := range names {
		if _, ok := layoutOf(name); !ok {
			continue
		}
		kind := "set"
		if isMap(name) {
			kind = "map"
		}
		var want []*knftables.Element
		if err := l.node.Do(func() error {
			var err error
			want, err = lister.ListElements(t.Context(), kind, name)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		got, err := r.table.Elements(t.Context(), name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// knftables cannot parse the JSON of a range that is not a
		// prefix: those are compared with nft's plain listing.
		want = slices.DeleteFunc(want, func(e *knftables.Element) bool { return slices.Contains(e.Key, "") })
		ranges := 0
		got = slices.DeleteFunc(got, func(e *knftables.Element) bool {
			last := e.Key[len(e.Key)-1]
			if !strings.Contains(last, "-") {
				return false
			}
			ranges++
			if listed := l.node.Exec("nft", "list", kind, "inet", "vcoil-services", name); !strings.Contains(listed, strings.Join(e.Key, " . ")) {
				t.Errorf("%s over netlink has %v, nft lists:\n%s", name, e.Key, listed)
			}
			return true
		})
		if strings.HasPrefix(name, setFirewallAllow) && ranges != 1 {
			t.Errorf("%s: %d ranges read, want 1", name, ranges)
		}
		if g, w := elementTexts(got), elementTexts(want); !slices.Equal(g, w) {
			t.Errorf("%s over netlink:\n%s\nnft lists:\n%s", name, strings.Join(g, "\n"), strings.Join(w, "\n"))
		}
		compared++
		elements += len(want)
	}
	for _, name := range []string{"services6", "backends6-0", "firewall-allow6", "hairpin6", "affinity4-5", "external-local4", "no-endpoints4"} {
		if !slices.Contains(names, name) {
			t.Errorf("the table has no %s to compare", name)
		}
	}
	t.Logf("%d sets and maps, %d elements compared", compared, elements)
}

func elementTexts(elems []*knftables.Element) []string {
	m := map[string]bool{}
	for _, e := range elems {
		m[e.Set+e.Map+" { "+strings.Join(e.Key, " . ")+" : "+strings.Join(e.Value, " . ")+" }"] = true
	}
	return slices.Sorted(maps.Keys(m))
}

// isMap tells the table's maps from its sets by name.
func isMap(name string) bool {
	for _, m := range []string{setServices, setExternalLocal, setAffinityFrontends, setBackendsLocal, setBackends, mapAffinityPrefix} {
		// backends4-I, backends-local4-I and affinity4-T too.
		if len(name) > len(m) && name[:len(m)] == m && (name[len(m)] == '4' || name[len(m)] == '6') {
			return true
		}
	}
	return false
}
