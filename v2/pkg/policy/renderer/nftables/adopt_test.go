package nftables

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/nft"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// newFake is an empty namespace in memory for the renderer's table.
func newFake() *nft.Fake {
	return nft.NewFake(knftables.InetFamily, constants.PolicyTable, elementLayout)
}

// fakeRenderer is a Renderer of f's table, as a vcoild (re)starting over
// it: its first Render adopts what f holds.
func fakeRenderer(t *testing.T, f *nft.Fake, logDrops bool) *Renderer {
	t.Helper()
	r, err := withKernel(Config{Table: constants.PolicyTable, PodIfPrefix: "vcoil", LogDrops: logDrops, Log: testr.New(t)}, &kernel{t: f})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func render(t *testing.T, r *Renderer, txn renderer.Txn) string {
	t.Helper()
	if err := r.Render(t.Context(), txn); err != nil {
		t.Fatal(err)
	}
	return r.lastScript
}

// adoptionState is a node's pods of every kind of group content: hostPorts,
// hosts, nets and signatures in both families, shared and single groups,
// egress isolation (the self sets).
func adoptionState() renderer.Txn {
	in := list(
		permit(renderer.Ingress, "10.1.0.5/32", renderer.ProtocolTCP, renderer.SinglePort(80)),
		permit(renderer.Ingress, "fd00:1::5/128", renderer.ProtocolUDP, renderer.SinglePort(53)),
		permit(renderer.Ingress, "10.1.0.9/32", renderer.ProtocolAny, renderer.AnyPort),
		permit(renderer.Ingress, "10.3.0.0/16", renderer.ProtocolAny, renderer.AnyPort),
		permit(renderer.Ingress, "10.2.0.0/16", renderer.ProtocolTCP, renderer.PortRange{First: 8000, Last: 8080}),
		permit(renderer.Ingress, "fd00:2::/48", renderer.ProtocolTCP, renderer.PortRange{First: 8000, Last: 8080}),
	)
	var except []renderer.Rule
	except = append(except, exceptRules(renderer.Egress, "10.2.0.0/16", []string{"10.2.3.0/24"}, renderer.ProtocolTCP, renderer.SinglePort(443))...)
	except = append(except, exceptRules(renderer.Egress, "fd00:2::/48", []string{"fd00:2:0:5::/64"}, renderer.ProtocolAny, renderer.AnyPort)...)
	return renderer.Txn{Resync: true, Pods: []renderer.PodRules{
		podRules("a", []string{"10.0.0.1", "fd00::1"}, in, list(except...)),
		podRules("b", []string{"10.0.0.2"}, in, nil),
		podRules("c", []string{"10.0.0.3"}, nil, nil),
		podRules("d", []string{"fd00::4"}, list(permit(renderer.Ingress, "", renderer.ProtocolSCTP, renderer.PortRange{First: 9000, Last: 9100})), nil),
	}}
}

func TestAdoptingATableLeftEarlierPlansNothingForTheSameContent(t *testing.T) {
	f := newFake()
	txn := adoptionState()
	if s := render(t, fakeRenderer(t, f, false), txn); !strings.Contains(s, "add table") {
		t.Fatalf("the first render wrote no table:\n%s", s)
	}
	before, writes := f.Dump(), f.Writes
	// A restarted vcoild, with a resync or with updates of the same pods.
	for _, again := range []renderer.Txn{txn, {Pods: txn.Pods}} {
		r := fakeRenderer(t, f, false)
		if s := render(t, r, again); s != "" {
			t.Fatalf("adopting the table (resync %v) wrote:\n%s", again.Resync, s)
		}
		if len(r.groups) != 3 || len(r.elems[renderer.Ingress]) != 4 || len(r.elems[renderer.Egress]) != 2 {
			t.Fatalf("adopted %d groups, %d ingress and %d egress addresses; want 3, 4, 2",
				len(r.groups), len(r.elems[renderer.Ingress]), len(r.elems[renderer.Egress]))
		}
	}
	if f.Writes != writes || f.Dump() != before {
		t.Fatalf("adoption wrote to the table:\nbefore:\n%s\nafter:\n%s", before, f.Dump())
	}
}

// TestAdoptingATableLeftEarlierPlansTheMinimalChange: a restarted vcoild
// finding another state writes what the vcoild that stayed would have:
// here (testdata/scripts/adopt-changed.nft, reviewed) the shared group's
// new peer in place, the leaving pod's element out and its group deleted
// (a resync keeps no idle group), the new pod's element in.
func TestAdoptingATableLeftEarlierPlansTheMinimalChange(t *testing.T) {
	txn := adoptionState()
	a, b, c := txn.Pods[0], txn.Pods[1], txn.Pods[2]
	// Pod d leaves, e comes with the rules of a and b, which gain a peer.
	peer := list(append(a.Ingress[:len(a.Ingress)-1:len(a.Ingress)-1], permit(renderer.Ingress, "10.1.0.6/32", renderer.ProtocolTCP, renderer.SinglePort(80)))...)
	a.Ingress, b.Ingress = peer, peer
	e := podRules("e", []string{"10.0.0.5"}, peer, nil)
	changed := renderer.Txn{Resync: true, Pods: []renderer.PodRules{a, b, c, e}}

	stayed := newFake()
	r := fakeRenderer(t, stayed, false)
	render(t, r, txn)
	want := render(t, r, changed)

	restarted := newFake()
	render(t, fakeRenderer(t, restarted, false), txn)
	got := render(t, fakeRenderer(t, restarted, false), changed)
	if got != want {
		t.Fatalf("after a restart the change wrote\n%s\nthe vcoild that stayed wrote\n%s", got, want)
	}
	if stayed.Dump() != restarted.Dump() {
		t.Fatalf("the tables differ:\nstayed:\n%s\nrestarted:\n%s", stayed.Dump(), restarted.Dump())
	}
	golden(t, "scripts/adopt-changed.nft", got)
}

func TestAdoptionRefusesATableOfANewerFormatAndLeavesItUnchanged(t *testing.T) {
	f := newFake()
	txn := adoptionState()
	render(t, fakeRenderer(t, f, false), txn)
	// The newer vcoild's marker.
	if err := f.RunScript(t.Context(), "delete set inet vcoil-policy format\n"+
		`add set inet vcoil-policy format { type ipv4_addr ; comment "vcoil policy v2" ; }`+"\n"); err != nil {
		t.Fatal(err)
	}
	before, writes := f.Dump(), f.Writes

	r := fakeRenderer(t, f, false)
	for range 2 { // refused again: the refusal does not adopt half the table
		err := r.Render(t.Context(), txn)
		var ne *formatversion.NewerError
		if !errors.As(err, &ne) || ne.Found != 2 || ne.Known != 1 {
			t.Fatalf("Render = %v, want a refusal of format 2", err)
		}
		for _, want := range []string{"nftables table inet vcoil-policy", "format version 2", "this vcoild's 1"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the refusal %q lacks %q", err, want)
			}
		}
	}
	if f.Writes != writes || f.Dump() != before {
		t.Fatalf("the newer table changed:\nbefore:\n%s\nafter:\n%s", before, f.Dump())
	}
}

// TestAdoptionReplacesWhatItCannotAdoptInOneTransaction: a table of the
// current format (1) is adopted; one without a format set, of another
// kind's format, with an object vcoil does not write, or with groups of
// other rules (drop logging switched) is replaced by one script that
// deletes the table first, so that no pod is unfiltered in between; the
// table is then the renderer's own, adopted by the next vcoild.
func TestAdoptionReplacesWhatItCannotAdoptInOneTransaction(t *testing.T) {
	txn := adoptionState()
	for _, tc := range []struct {
		name   string
		change string // a script run on the table a vcoild left
		logged bool   // the table was written with drop logging
	}{
		{name: "no format set", change: "delete set inet vcoil-policy format\n"},
		{name: "another kind's format", change: "delete set inet vcoil-policy format\n" +
			`add set inet vcoil-policy format { type ipv4_addr ; comment "vcoil services v1" ; }` + "\n"},
		{name: "a stranger's chain", change: "add chain inet vcoil-policy mine\n"},
		{name: "a stranger's set", change: "add set inet vcoil-policy mine { type ipv4_addr ; }\n"},
		{name: "a group's set of another type", change: "delete set inet vcoil-policy g1-s0-6\n" +
			"add set inet vcoil-policy g1-s0-6 { type ipv4_addr ; flags interval ; comment \"sctp sport any dport 9000-9100\" ; }\n"},
		{name: "a chain that is no group, in a map", change: "add chain inet vcoil-policy g9\n" +
			"add element inet vcoil-policy in4 { 10.0.0.9 : jump g9 }\n"},
		{name: "drop logging switched", logged: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			render(t, fakeRenderer(t, f, tc.logged), txn)
			if tc.change != "" {
				if err := f.RunScript(t.Context(), tc.change); err != nil {
					t.Fatal(err)
				}
			}
			writes := f.Writes
			s := render(t, fakeRenderer(t, f, false), txn)
			if !strings.HasPrefix(s, "delete table inet vcoil-policy\nadd table inet vcoil-policy") {
				t.Fatalf("the table was not replaced:\n%s", s)
			}
			if f.Writes != writes+1 {
				t.Fatalf("the replacement took %d writes, want one transaction", f.Writes-writes)
			}
			if strings.Contains(f.Dump(), "mine") || strings.Contains(f.Dump(), "g9") {
				t.Fatalf("the stranger's objects are left:\n%s", f.Dump())
			}
			// As a fresh table: identical to what a first render writes.
			fresh := newFake()
			render(t, fakeRenderer(t, fresh, false), txn)
			if f.Dump() != fresh.Dump() {
				t.Fatalf("the replaced table differs from a new one:\nreplaced:\n%s\nnew:\n%s", f.Dump(), fresh.Dump())
			}
			if s := render(t, fakeRenderer(t, f, false), txn); s != "" {
				t.Fatalf("the next vcoild does not adopt the replacement:\n%s", s)
			}
		})
	}
}

// TestAdoptionAfterAFailedRenderRereadsTheTable: a failed write leaves the
// mirror unknown; the next Render reads the table again and writes only
// what it lacks.
func TestAdoptionAfterAFailedRenderRereadsTheTable(t *testing.T) {
	f := newFake()
	txn := adoptionState()
	r := fakeRenderer(t, f, false)
	render(t, r, txn)
	e := podRules("e", []string{"10.0.0.5", "fd00::5"}, txn.Pods[1].Ingress, nil)
	f.FailNext(errors.New("injected"))
	if err := r.Render(t.Context(), renderer.Txn{Pods: []renderer.PodRules{e}}); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("Render = %v, want the injected failure", err)
	}
	got := render(t, r, renderer.Txn{Pods: []renderer.PodRules{e}})
	// The new pod's sources join the source sets: fd00::5 merges with the
	// interval of fd00::4 next to it.
	want := "delete element inet vcoil-policy src6 { fd00::4 }\n" +
		"add element inet vcoil-policy src4 { 10.0.0.5 }\n" +
		"add element inet vcoil-policy src6 { fd00::4/127 }\n" +
		"add element inet vcoil-policy in4 { 10.0.0.5 : jump g0 }\nadd element inet vcoil-policy in6 { fd00::5 : jump g0 }\n"
	if got != want {
		t.Fatalf("the render after a failure wrote\n%s\nwant\n%s", got, want)
	}
}

// TestAdoptedGroupsCountersAreCollected: the drop counters reach the
// metrics, read through the table's counters.
func TestAdoptedGroupsCountersAreCollected(t *testing.T) {
	f := newFake()
	render(t, fakeRenderer(t, f, false), adoptionState())
	reg := prometheus.NewRegistry()
	r, err := withKernel(Config{Table: constants.PolicyTable, PodIfPrefix: "vcoil", Registry: reg, Log: testr.New(t)}, &kernel{t: f})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	render(t, r, adoptionState())
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	groups := map[string]string{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			var group, dir string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "group":
					group = l.GetValue()
				case "direction":
					dir = l.GetValue()
				}
			}
			if group != "" {
				groups[group] = dir
			}
		}
	}
	want := map[string]string{"g0": "ingress", "g1": "ingress", "g2": "egress", "unknown-source": "egress"}
	for g, d := range want {
		if groups[g] != d {
			t.Errorf("the denied packets of group %s: direction %q, want %q (collected %v)", g, groups[g], d, groups)
		}
	}
}

// TestSourceSetsHoldEveryPodsAddressesAndAllowedPrefixes: the sources the
// forward chain lets out of the pods' interfaces are the local pods'
// addresses, isolated or not, and their allowed source prefixes, merged;
// a restarted vcoild adopts them, and a pod leaving takes its own away.
func TestSourceSetsHoldEveryPodsAddressesAndAllowedPrefixes(t *testing.T) {
	f := newFake()
	router := podRules("router", []string{"10.0.0.9", "fd00::9"}, nil, nil)
	router.SourcePrefixes = []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("10.0.0.8/29"), netip.MustParsePrefix("2001:db8:5::/48")}
	txn := renderer.Txn{Resync: true, Pods: []renderer.PodRules{podRules("a", []string{"10.0.0.1"}, nil, nil), router}}
	r := fakeRenderer(t, f, false)
	render(t, r, txn)
	elems := func(set string) string {
		t.Helper()
		es, err := f.Elements(t.Context(), set)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			out = append(out, strings.Join(e.Key, " . "))
		}
		slices.Sort(out)
		return strings.Join(out, ", ")
	}
	if got, want := elems("src4"), "10.0.0.1, 10.0.0.8/29, 198.51.100.0/24"; got != want {
		t.Errorf("src4 holds %q, want %q", got, want)
	}
	if got, want := elems("src6"), "2001:db8:5::/48, fd00::9"; got != want {
		t.Errorf("src6 holds %q, want %q", got, want)
	}
	if s := render(t, fakeRenderer(t, f, false), txn); s != "" {
		t.Fatalf("a restarted vcoild rewrote the sources:\n%s", s)
	}
	router.Removed, router.SourcePrefixes, router.IPs = true, nil, nil
	render(t, r, renderer.Txn{Pods: []renderer.PodRules{router}})
	if got, want := elems("src4"), "10.0.0.1"; got != want {
		t.Errorf("after the router left, src4 holds %q, want %q", got, want)
	}
	if got := elems("src6"); got != "" {
		t.Errorf("after the router left, src6 holds %q, want nothing", got)
	}
}
