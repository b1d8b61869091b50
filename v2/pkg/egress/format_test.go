package egress_test

import (
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/linux"
	"github.com/vcoil/vcoil/v2/pkg/egress"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// loadFixture writes testdata/format1/name (the egress table as the code
// before format versions, commit 2711c05, wrote it) into ns.
func loadFixture(t *testing.T, ns *netnstest.NS, name string) {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("testdata/format1", name))
	if err != nil {
		t.Fatal(err)
	}
	ns.Exec("nft", "-f", path)
}

// markNewer turns the egress table of ns (of the current format) into a
// newer vcoil's.
func markNewer(ns *netnstest.NS) {
	ns.Exec("nft", "delete", "set", "inet", "vcoil-egress", "format")
	ns.Exec("nft", "add", "set", "inet", "vcoil-egress", "format", `{ type ipv4_addr; comment "vcoil egress v3"; }`)
}

func wantRefusal(t *testing.T, err error) {
	t.Helper()
	var ne *formatversion.NewerError
	if !errors.As(err, &ne) || ne.Found != 3 || ne.Known != formatversion.KernelTable || !strings.Contains(err.Error(), "nftables table inet vcoil-egress") {
		t.Fatalf("error %v, want a refusal of the table's format 3", err)
	}
}

func tableHandle(t *testing.T, ns *netnstest.NS) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^table inet vcoil-egress \{ # handle ([0-9]+)$`).FindStringSubmatch(ns.Exec("nft", "-a", "list", "table", "inet", "vcoil-egress"))
	if m == nil {
		t.Fatal("no egress table")
	}
	return m[1]
}

// A client pod's table of format 1 gets its format set in place (the same
// table, the same rule); a newer one is refused, neither changed nor
// deleted.
func TestAClientTableOfFormat1IsAdoptedInPlaceAndANewerOneRefused(t *testing.T) {
	netnstest.RequireRoot(t)
	l := &lab{t: t, node: netnstest.New(t, "egnode")}
	var err error
	l.dp, err = linux.New(linux.Config{NodeNetns: l.node.Path(), MTU: 1500}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.dp.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	pod, _ := l.addPod("egfmt", idemIP, "2001:db8:10::30")
	cfg := egress.ClientConfig{
		PodIPs:   addrs(idemIP, "2001:db8:10::30"),
		Egresses: []egress.ClientEgress{{Egress: labEgress, Kind: egress.KindVXLAN, ServiceIPs: addrs(serviceIP, serviceIP6), Destinations: prefixes(extNet, extNet6)}},
		Excluded: prefixes("10.1.0.0/16", "10.96.0.0/12", "2001:db8:10::/64", "2001:db8:96::/112"),
	}
	loadFixture(t, pod, "client.nft")
	handle := tableHandle(t, pod)
	if err := egress.ApplyClient(t.Context(), pod.Path(), cfg); err != nil {
		t.Fatalf("ApplyClient over a format 1 table: %v", err)
	}
	got := pod.Exec("nft", "list", "table", "inet", "vcoil-egress")
	for _, want := range []string{`comment "vcoil egress v2"`, `tcp option maxseg size set rt mtu comment "vcoil egress: clamp TCP MSS to the tunnel's MTU"`} {
		if !strings.Contains(got, want) {
			t.Errorf("the table lacks %q:\n%s", want, got)
		}
	}
	if h := tableHandle(t, pod); h != handle {
		t.Errorf("the table was made again (handle %s, was %s)", h, handle)
	}

	markNewer(pod)
	before := snapshot(t, pod) + pod.Exec("nft", "-a", "list", "table", "inet", "vcoil-egress")
	other := cfg
	other.Egresses = []egress.ClientEgress{{Egress: labEgress, Kind: egress.KindVXLAN, ServiceIPs: addrs(serviceIP), Destinations: prefixes(otherNet)}}
	wantRefusal(t, egress.ApplyClient(t.Context(), pod.Path(), other))
	wantRefusal(t, egress.ApplyClient(t.Context(), pod.Path(), egress.ClientConfig{PodIPs: addrs(idemIP)}))
	// Nothing of the pod changed: links, rules, routes, the table.
	if after := snapshot(t, pod) + pod.Exec("nft", "-a", "list", "table", "inet", "vcoil-egress"); after != before {
		t.Fatalf("the pod changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// A router starts from scratch: a format 1 table is replaced by the
// current one; a newer one stops Setup before anything is deleted.
func TestARouterReplacesAFormat1TableAndRefusesANewerOne(t *testing.T) {
	netnstest.RequireRoot(t)
	ns := netnstest.New(t, "egrfmt")
	netnstest.Veth(t, ns, "eth0", netnstest.New(t, "egpeer"), "eth0")
	ns.AddAddr("eth0", "10.1.0.11/24")
	ns.AddAddr("eth0", "2001:db8:10::11/64")
	cfg := egress.RouterConfig{Egress: labEgress, PodIPs: addrs("10.1.0.11", "2001:db8:10::11"), NetnsPath: ns.Path(), Destinations: prefixes(extNet)}
	loadFixture(t, ns, "router.nft")
	r := egress.NewRouter(cfg, testr.New(t))
	if err := r.Setup(t.Context()); err != nil {
		t.Fatalf("Setup over a format 1 table: %v", err)
	}
	r.Close()
	if got := ns.Exec("nft", "list", "table", "inet", "vcoil-egress"); !strings.Contains(got, `comment "vcoil egress v2"`) || !strings.Contains(got, "elements = { 203.0.113.0/24 }") ||
		!strings.Contains(got, "ip saddr != @clients4") {
		t.Fatalf("the router's table:\n%s", got)
	}

	markNewer(ns)
	before := snapshot(t, ns) + ns.Exec("nft", "-a", "list", "table", "inet", "vcoil-egress")
	r2 := egress.NewRouter(cfg, testr.New(t))
	t.Cleanup(r2.Close)
	wantRefusal(t, r2.Setup(t.Context()))
	// Nothing of the namespace changed: links, rules, routes, the table.
	if after := snapshot(t, ns) + ns.Exec("nft", "-a", "list", "table", "inet", "vcoil-egress"); after != before {
		t.Fatalf("the newer router's namespace changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}
