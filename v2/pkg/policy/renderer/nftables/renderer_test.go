package nftables

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// permit is a permit rule of direction d for peer (any when "") with
// protocol and destination ports.
func permit(d renderer.Direction, peer string, proto renderer.Protocol, ports renderer.PortRange) renderer.Rule {
	r := renderer.Rule{Action: renderer.ActionPermit, Protocol: proto, SrcPort: renderer.AnyPort, DstPort: ports}
	if proto == renderer.ProtocolAny {
		r.DstPort = renderer.AnyPort
	}
	if peer != "" {
		if d == renderer.Ingress {
			r.SrcNetwork = pfx(peer)
		} else {
			r.DstNetwork = pfx(peer)
		}
	}
	return r
}

// list sorts rules and ends them with DenyAll.
func list(rules ...renderer.Rule) []renderer.Rule {
	out := append([]renderer.Rule(nil), rules...)
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].Compare(out[j-1]) < 0; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return append(out, renderer.DenyAll)
}

func newRenderer(t *testing.T, n *netnstest.NS) *Renderer {
	t.Helper()
	r, err := New(Config{Netns: n.Path(), PodIfPrefix: "vcoil", Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

func TestPodsWithEqualRulesShareAGroupAndARestartChangesNothing(t *testing.T) {
	netnstest.RequireRoot(t)
	n := netnstest.New(t, "polnft")
	in := list(
		permit(renderer.Ingress, "10.1.0.5/32", renderer.ProtocolTCP, renderer.SinglePort(80)),
		permit(renderer.Ingress, "10.2.0.0/16", renderer.ProtocolTCP, renderer.PortRange{First: 8000, Last: 8080}),
		permit(renderer.Ingress, "fd00::5/128", renderer.ProtocolAny, renderer.AnyPort),
		permit(renderer.Ingress, "203.0.113.0/24", renderer.ProtocolUDP, renderer.SinglePort(53)),
	)
	eg := list(permit(renderer.Egress, "10.1.0.0/24", renderer.ProtocolAny, renderer.AnyPort))
	txn := renderer.Txn{Resync: true, Pods: []renderer.PodRules{
		{Pod: renderer.PodID{Namespace: "ns", Name: "a"}, IPs: []netip.Addr{addr("10.0.0.1"), addr("fd00::1")}, Ingress: in, Egress: eg},
		{Pod: renderer.PodID{Namespace: "ns", Name: "b"}, IPs: []netip.Addr{addr("10.0.0.2")}, Ingress: in},
		{Pod: renderer.PodID{Namespace: "ns", Name: "c"}, IPs: []netip.Addr{addr("10.0.0.3")}},
	}}
	r := newRenderer(t, n)
	if err := r.Render(t.Context(), txn); err != nil {
		t.Fatal(err)
	}
	listing := n.Exec("nft", "list", "table", "inet", "vcoil-policy")
	t.Log(listing)
	for _, want := range []string{"10.0.0.1 : jump g0", "10.0.0.2 : jump g0", "fd00::1 : jump g0", "10.0.0.1 : jump g1", "10.1.0.5 . tcp . 80", "10.2.0.0/16", "fd00::5", "203.0.113.0/24"} {
		if !strings.Contains(listing, want) {
			t.Errorf("the table lacks %q", want)
		}
	}
	// Pod c's address is one of the sources pods may send from, and in no
	// dispatch map.
	for _, m := range []string{"in4", "eg4"} {
		if strings.Contains(n.Exec("nft", "list", "map", "inet", "vcoil-policy", m), "10.0.0.3") {
			t.Errorf("pod c has no policy but is in map %s", m)
		}
	}
	if src := n.Exec("nft", "list", "set", "inet", "vcoil-policy", "src4"); !strings.Contains(src, "10.0.0.1-10.0.0.3") {
		t.Errorf("the sources of the pods are not 10.0.0.1-10.0.0.3:\n%s", src)
	}

	// A new renderer (a restarted vcoild) adopts the table: the same state
	// writes nothing.
	r2 := newRenderer(t, n)
	if err := r2.Render(t.Context(), txn); err != nil {
		t.Fatal(err)
	}
	if r2.lastScript != "" {
		t.Fatalf("a restart rewrote the table:\n%s", r2.lastScript)
	}

	// A peer coming changes set elements, not chains.
	in2 := list(append(in[:len(in)-1:len(in)-1], permit(renderer.Ingress, "10.1.0.6/32", renderer.ProtocolTCP, renderer.SinglePort(80)))...)
	txn2 := renderer.Txn{Pods: []renderer.PodRules{
		{Pod: renderer.PodID{Namespace: "ns", Name: "a"}, IPs: []netip.Addr{addr("10.0.0.1"), addr("fd00::1")}, Ingress: in2, Egress: eg},
		{Pod: renderer.PodID{Namespace: "ns", Name: "b"}, IPs: []netip.Addr{addr("10.0.0.2")}, Ingress: in2},
	}}
	if err := r2.Render(t.Context(), txn2); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(r2.lastScript), "add element inet vcoil-policy g0-hp4 { 10.1.0.6 . tcp . 80 }"; got != want {
		t.Fatalf("a new peer wrote\n%s\nwant\n%s", got, want)
	}
	// Pod b's rules diverge: it gets a group of its own, a gets the old one.
	txn3 := renderer.Txn{Pods: []renderer.PodRules{
		{Pod: renderer.PodID{Namespace: "ns", Name: "b"}, IPs: []netip.Addr{addr("10.0.0.2")}, Ingress: in},
	}}
	if err := r2.Render(t.Context(), txn3); err != nil {
		t.Fatal(err)
	}
	listing = n.Exec("nft", "list", "table", "inet", "vcoil-policy")
	for _, want := range []string{"10.0.0.1 : jump g0", "10.0.0.2 : jump g2"} {
		if !strings.Contains(listing, want) {
			t.Errorf("the table lacks %q:\n%s", want, listing)
		}
	}
	// Removing every pod leaves the base chains only.
	if err := r2.Render(t.Context(), renderer.Txn{Resync: true}); err != nil {
		t.Fatal(err)
	}
	listing = n.Exec("nft", "list", "table", "inet", "vcoil-policy")
	if strings.Contains(listing, "chain g") || strings.Contains(listing, "set g") || strings.Contains(listing, "jump") {
		t.Fatalf("groups are left:\n%s", listing)
	}
}

// TestGroupsWithoutPodsStayIdleForReuseUpToALimit: a pod leaving its
// group leaves it idle; a pod with the same rules later reuses it without
// creating a chain; beyond maxIdle idle groups, the longest idle go.
func TestGroupsWithoutPodsStayIdleForReuseUpToALimit(t *testing.T) {
	netnstest.RequireRoot(t)
	n := netnstest.New(t, "polidle")
	r := newRenderer(t, n)
	podWithPort := func(i int, port uint16) renderer.PodRules {
		return renderer.PodRules{Pod: renderer.PodID{Namespace: "ns", Name: fmt.Sprint("p", i)},
			IPs:     []netip.Addr{netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})},
			Ingress: list(permit(renderer.Ingress, "10.1.0.0/16", renderer.ProtocolTCP, renderer.SinglePort(port)))}
	}
	// maxIdle+6 pods, each with rules of its own: as many groups.
	var pods []renderer.PodRules
	for i := range maxIdle + 6 {
		pods = append(pods, podWithPort(i, uint16(1000+i)))
	}
	if err := r.Render(t.Context(), renderer.Txn{Pods: pods}); err != nil {
		t.Fatal(err)
	}
	chains := func() int { return strings.Count(n.Exec("nft", "list", "chains", "inet"), "chain g") }
	if got := chains(); got != maxIdle+6 {
		t.Fatalf("%d group chains, want %d", got, maxIdle+6)
	}
	// Pod 0 leaves; pod 70 comes with pod 0's rules: it reuses the idle group.
	gone := renderer.PodRules{Pod: pods[0].Pod, Removed: true}
	if err := r.Render(t.Context(), renderer.Txn{Pods: []renderer.PodRules{gone}}); err != nil {
		t.Fatal(err)
	}
	if got := chains(); got != maxIdle+6 {
		t.Fatalf("after a pod left: %d group chains, want %d (its group idle)", got, maxIdle+6)
	}
	again := podWithPort(500, 1000)
	if err := r.Render(t.Context(), renderer.Txn{Pods: []renderer.PodRules{again}}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(r.lastScript, "add chain") || !strings.Contains(r.lastScript, "jump g0") {
		t.Fatalf("a pod with an idle group's rules wrote:\n%s", r.lastScript)
	}
	// Every other pod leaves: only maxIdle idle groups stay (plus g0, used).
	var leave []renderer.PodRules
	for _, p := range pods[1:] {
		leave = append(leave, renderer.PodRules{Pod: p.Pod, Removed: true})
	}
	if err := r.Render(t.Context(), renderer.Txn{Pods: leave}); err != nil {
		t.Fatal(err)
	}
	if got := chains(); got != maxIdle+1 {
		t.Fatalf("%d group chains after %d pods left, want %d", got, len(leave), maxIdle+1)
	}
	// A full resync deletes every idle group.
	if err := r.Render(t.Context(), renderer.Txn{Resync: true, Pods: []renderer.PodRules{again}}); err != nil {
		t.Fatal(err)
	}
	if got := chains(); got != 1 {
		t.Fatalf("%d group chains after a resync, want 1", got)
	}
}

func TestRemoveTableDeletesWhatAnEarlierVcoildLeft(t *testing.T) {
	netnstest.RequireRoot(t)
	n := netnstest.New(t, "polrm")
	// Nothing to remove: no error.
	if err := RemoveTable(t.Context(), n.Path(), ""); err != nil {
		t.Fatal(err)
	}
	r := newRenderer(t, n)
	txn := renderer.Txn{Resync: true, Pods: []renderer.PodRules{{Pod: renderer.PodID{Namespace: "ns", Name: "a"},
		IPs: []netip.Addr{addr("10.0.0.1")}, Ingress: list(permit(renderer.Ingress, "10.1.0.0/16", renderer.ProtocolAny, renderer.AnyPort))}}}
	if err := r.Render(t.Context(), txn); err != nil {
		t.Fatal(err)
	}
	if err := RemoveTable(t.Context(), n.Path(), ""); err != nil {
		t.Fatal(err)
	}
	if out, err := n.TryExec(t.Context(), "nft", "list", "tables"); err != nil || strings.Contains(out, "vcoil-policy") {
		t.Fatalf("the table is left: %q %v", out, err)
	}
}
