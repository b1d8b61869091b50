package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"k8s.io/apimachinery/pkg/types"
)

var (
	egA = types.NamespacedName{Namespace: "team-a", Name: "nat"}
	egB = types.NamespacedName{Namespace: "team-b", Name: "proxy"}
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestClientConfigValidationNamesTheEgressAndTheProblem(t *testing.T) {
	ok := ClientEgress{Egress: egA, Kind: KindVXLAN, ServiceIPs: addrs("10.96.0.50"), Destinations: prefixes("203.0.113.0/24")}
	with := func(f func(*ClientEgress)) ClientEgress { e := ok; f(&e); return e }
	for _, tc := range []struct {
		name string
		cfg  ClientConfig
		want []string // all in the error
	}{
		{"overlapping destinations of two Egresses name both",
			ClientConfig{PodIPs: addrs("10.1.0.5"), Egresses: []ClientEgress{ok,
				{Egress: egB, Kind: KindVXLAN, ServiceIPs: addrs("10.96.0.51"), Destinations: prefixes("203.0.113.128/25")}}},
			[]string{"203.0.113.0/24", "team-a/nat", "203.0.113.128/25", "team-b/proxy", "overlaps"}},
		{"overlapping destinations within one Egress",
			ClientConfig{PodIPs: addrs("10.1.0.5"), Egresses: []ClientEgress{with(func(e *ClientEgress) { e.Destinations = prefixes("203.0.113.0/24", "203.0.113.7/32") })}},
			[]string{"Egress team-a/nat", "203.0.113.0/24", "203.0.113.7/32", "overlap"}},
		{"an Egress listed twice",
			ClientConfig{PodIPs: addrs("10.1.0.5"), Egresses: []ClientEgress{ok, ok}},
			[]string{"team-a/nat is listed twice"}},
		{"no pod address",
			ClientConfig{Egresses: []ClientEgress{ok}},
			[]string{"no pod addresses"}},
		{"two pod addresses of one family",
			ClientConfig{PodIPs: addrs("10.1.0.5", "10.1.0.6"), Egresses: []ClientEgress{ok}},
			[]string{"at most one per family"}},
		{"no Service address",
			ClientConfig{PodIPs: addrs("10.1.0.5"), Egresses: []ClientEgress{with(func(e *ClientEgress) { e.ServiceIPs = nil })}},
			[]string{"Egress team-a/nat has no Service address"}},
		{"an unknown encapsulation",
			ClientConfig{PodIPs: addrs("10.1.0.5"), Egresses: []ClientEgress{with(func(e *ClientEgress) { e.Kind = "gre" })}},
			[]string{"Egress team-a/nat", `unknown encapsulation "gre"`}},
		{"an IPv6 destination for a pod without IPv6",
			ClientConfig{PodIPs: addrs("10.1.0.5"), Egresses: []ClientEgress{with(func(e *ClientEgress) { e.Destinations = prefixes("2001:db8:113::/64") })}},
			[]string{"Egress team-a/nat", "2001:db8:113::/64 is IPv6 but the pod has no IPv6 address"}},
		{"a FoU destination without a Service address of its family",
			ClientConfig{PodIPs: addrs("10.1.0.5", "fd00::5"), Egresses: []ClientEgress{with(func(e *ClientEgress) {
				e.Kind = KindFoU
				e.Destinations = prefixes("2001:db8:113::/64")
			})}},
			[]string{"Egress team-a/nat", "2001:db8:113::/64 needs an IPv6 Service address"}},
		{"an Egress without a name",
			ClientConfig{PodIPs: addrs("10.1.0.5"), Egresses: []ClientEgress{with(func(e *ClientEgress) { e.Egress.Name = "" })}},
			[]string{"without namespace or name"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if err == nil {
				t.Fatal("Validate accepted it")
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("%v does not wrap ErrInvalidConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	if err := (ClientConfig{}).Validate(); err != nil {
		t.Errorf("an empty configuration (remove everything) is invalid: %v", err)
	}
}

func describeLink(l clientLink) string {
	return fmt.Sprintf("%s %s mtu %d vni %d mac %s remote %v local %v sport %d", l.name, l.kind, l.mtu, l.vni, l.mac, l.remote, l.local, l.sport)
}

func TestPlanOfADualStackPodWithAVXLANAndAFoUEgress(t *testing.T) {
	cfg := ClientConfig{
		PodIPs: addrs("fd00::5", "10.1.0.5"), // IPv4 comes first whatever the order
		Egresses: []ClientEgress{
			{Egress: egA, Kind: KindVXLAN, ServiceIPs: addrs("fd00:96::50", "10.96.0.50"), Destinations: prefixes("203.0.113.0/24", "2001:db8:113::/64")},
			{Egress: egB, Kind: KindFoU, ServiceIPs: addrs("10.96.0.51", "fd00:96::51"), Destinations: prefixes("198.51.100.0/24", "2001:db8:100::/64"), FoUSourcePortAuto: true},
		},
		Excluded: prefixes("10.1.0.0/16", "fd00::/48", "10.96.0.0/12", "fd00:96::/108"),
	}
	p, err := planClient(cfg, 9000)
	if err != nil {
		t.Fatal(err)
	}
	vx, f4, f6 := clientLinkName(egA, "x"), clientLinkName(egB, "4"), clientLinkName(egB, "6")
	want := map[string]string{
		// VXLAN carries both families over the IPv4 Service address.
		vx: fmt.Sprintf("%s vxlan mtu 8950 vni %d mac 0a:58:0a:01:00:05 remote 10.96.0.50 local invalid IP sport 0", vx, VNI(egA)),
		f4: f4 + " ipip mtu 8972 vni 0 mac  remote 10.96.0.51 local 10.1.0.5 sport 0",
		f6: f6 + " ip6tnl mtu 8952 vni 0 mac  remote fd00:96::51 local fd00::5 sport 0",
		// The fallback receivers accept replies from any router.
		"egrfb4": "egrfb4 ipip mtu 8972 vni 0 mac  remote invalid IP local 10.1.0.5 sport 5555",
		"egrfb6": "egrfb6 ip6tnl mtu 8952 vni 0 mac  remote invalid IP local fd00::5 sport 5555",
	}
	if len(p.links) != len(want) {
		t.Errorf("%d links, want %d", len(p.links), len(want))
	}
	for _, l := range p.links {
		if got := describeLink(l); got != want[l.name] {
			t.Errorf("link:\n got %s\nwant %s", got, want[l.name])
		}
	}
	var routes []string
	for _, r := range p.routes {
		routes = append(routes, fmt.Sprintf("%s dev %s via %v src %s", r.dst, r.link, r.gw, r.src))
	}
	wantRoutes := []string{
		"198.51.100.0/24 dev " + f4 + " via invalid IP src 10.1.0.5",
		"203.0.113.0/24 dev " + vx + " via 169.254.77.1 src 10.1.0.5",
		"2001:db8:100::/64 dev " + f6 + " via invalid IP src fd00::5",
		"2001:db8:113::/64 dev " + vx + " via fe80::77:1 src fd00::5",
	}
	if strings.Join(routes, "\n") != strings.Join(wantRoutes, "\n") {
		t.Errorf("routes:\n%s\nwant:\n%s", strings.Join(routes, "\n"), strings.Join(wantRoutes, "\n"))
	}
	var rules []string
	for _, r := range p.rules {
		rules = append(rules, r.key())
	}
	wantRules := []string{
		"false 1990 254 10.1.0.0/16  0x0", "false 1990 254 10.96.0.0/12  0x0",
		"false 1990 254 10.96.0.50/32  0x0", "false 1990 254 10.96.0.51/32  0x0",
		"false 2000 118 invalid Prefix  0x0",
		"true 1990 254 fd00::/48  0x0", "true 1990 254 fd00:96::/108  0x0",
		"true 1990 254 fd00:96::50/128  0x0", "true 1990 254 fd00:96::51/128  0x0",
		"true 2000 118 invalid Prefix  0x0",
	}
	if strings.Join(rules, "\n") != strings.Join(wantRules, "\n") {
		t.Errorf("rules:\n%s\nwant:\n%s", strings.Join(rules, "\n"), strings.Join(wantRules, "\n"))
	}
	if len(p.neighs) != 2 || p.neighs[0].mac.String() != RouterMAC(VNI(egA)).String() {
		t.Errorf("neighbours %v, want both gateways at the router MAC %s", p.neighs, RouterMAC(VNI(egA)))
	}
	if fmt.Sprint(p.fou) != fmt.Sprint([]int{netlink.FAMILY_V4, netlink.FAMILY_V6}) || !p.nft {
		t.Errorf("FoU ports %v, nftables %t: want both families and the MSS clamp", p.fou, p.nft)
	}
}

func TestAFoUTunnelAsTheKernelReportsItMatchesItsPlan(t *testing.T) {
	p, err := planClient(ClientConfig{PodIPs: addrs("10.1.0.5"), Egresses: []ClientEgress{
		{Egress: egB, Kind: KindFoU, ServiceIPs: addrs("10.96.0.51"), Destinations: prefixes("198.51.100.0/24")},
	}}, 1500)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range p.links {
		l := w.netlinkLink()
		// What a link dump returns: the alias and the up flag, and 16-byte
		// addresses for the tunnel ends.
		l.Attrs().Alias = w.alias
		l.Attrs().Flags |= netUp
		t4 := l.(*netlink.Iptun)
		if t4.Remote != nil {
			t4.Remote = t4.Remote.To16()
		}
		t4.Local = t4.Local.To16()
		if !linkMatches(l, w) {
			t.Errorf("link %s as created does not match its plan", w.name)
		}
		if t4.EncapType != tunnelEncapFoU || t4.EncapDport != fouPort {
			t.Errorf("link %s: encap type %d dport %d, want FoU to %d", w.name, t4.EncapType, t4.EncapDport, fouPort)
		}
		// Another source port mode is another tunnel.
		t4.EncapSport ^= fouPort
		if linkMatches(l, w) {
			t.Errorf("link %s with another source port matches its plan", w.name)
		}
	}
	if p.links[0].sport != fouPort {
		t.Errorf("without FoUSourcePortAuto the source port is %d, want %d", p.links[0].sport, fouPort)
	}
}
