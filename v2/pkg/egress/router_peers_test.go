package egress

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
)

func describeEntries(m map[string]peerEntry) []string {
	var out []string
	for _, e := range m {
		out = append(out, strings.TrimSpace(fmt.Sprintf("%s %s %s %s %d", e.kind[2:], e.link, e.ip, e.mac, e.table)))
	}
	slices.Sort(out)
	return out
}

func TestRouterPeerEntriesFollowTheLatestHolderOfAnAddress(t *testing.T) {
	r := NewRouter(RouterConfig{Egress: types.NamespacedName{Namespace: "egns", Name: "nat"}, PodIPs: addrs("10.1.0.11", "fd00::11"), FoU: true}, logr.Discard())
	add := func(id string, ips ...string) {
		t.Helper()
		// Before Setup, AddPeer only records the peer.
		if err := r.AddPeer(t.Context(), id, addrs(ips...)); err != nil {
			t.Fatal(err)
		}
	}
	add("a", "fd00::5", "10.1.0.5") // IPv4 first, whatever the order
	add("b", "10.1.0.5", "fd00::6") // reuses a's IPv4 address, not its IPv6 one
	a4, a6, b6 := routerPeerLinkName(netip.MustParseAddr("10.1.0.5")), routerPeerLinkName(netip.MustParseAddr("fd00::5")), routerPeerLinkName(netip.MustParseAddr("fd00::6"))
	mac := "0a:58:0a:01:00:05"
	want := []string{
		"client  10.1.0.5  0",
		"client  fd00::5  0",
		"client  fd00::6  0",
		"fdb egrx4 10.1.0.5 " + mac + " 0",
		"foulink " + a4 + " 10.1.0.5  0",
		"foulink " + a6 + " fd00::5  0",
		"foulink " + b6 + " fd00::6  0",
		"neigh egrx4 10.1.0.5 " + mac + " 0",
		"neigh egrx4 fd00::5 " + mac + " 0",
		"neigh egrx4 fd00::6 " + mac + " 0",
		"route " + a4 + " 10.1.0.5  119",
		"route " + a6 + " fd00::5  119",
		"route " + b6 + " fd00::6  119",
		"route egrx4 10.1.0.5  118",
		"route egrx4 fd00::5  118",
		"route egrx4 fd00::6  118",
	}
	if got := describeEntries(r.wantedPeers()); !slices.Equal(got, want) {
		t.Errorf("entries of a and b:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := r.Peers(); got[netip.MustParseAddr("10.1.0.5")] != 2 || got[netip.MustParseAddr("fd00::5")] != 1 || len(got) != 3 {
		t.Errorf("Peers() = %v, want 10.1.0.5 twice, fd00::5 and fd00::6 once", got)
	}
	// a goes: its IPv6 address goes, the shared IPv4 address stays.
	if err := r.RemovePeer(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	for _, e := range describeEntries(r.wantedPeers()) {
		if strings.Contains(e, "fd00::5") {
			t.Errorf("entry %q of a's own address is left", e)
		}
	}
	if got := describeEntries(r.wantedPeers()); !slices.Contains(got, "route egrx4 10.1.0.5  118") || !slices.Contains(got, "fdb egrx4 10.1.0.5 "+mac+" 0") ||
		!slices.Contains(got, "client  10.1.0.5  0") {
		t.Errorf("the address b still holds lost its entries: %v", got)
	}
	// A peer of a family the router lacks is refused, naming it.
	r4 := NewRouter(RouterConfig{Egress: types.NamespacedName{Namespace: "egns", Name: "nat"}, PodIPs: addrs("10.1.0.11")}, logr.Discard())
	if err := r4.AddPeer(t.Context(), "c", addrs("fd00::7")); err == nil || !strings.Contains(err.Error(), "fd00::7 is IPv6 but the router has no IPv6 address") {
		t.Errorf("AddPeer of an IPv6-only peer to an IPv4 router: %v", err)
	}
}
