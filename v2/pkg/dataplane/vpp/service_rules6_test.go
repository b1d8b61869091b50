package vpp

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// With IPv6 Services (the cnat renderer), the IPv4 table keeps the IPv4
// CIDRs and node ports and the IPv6 table gets the IPv6 ones: the refusal
// of what VPP sends back for an IPv6 service CIDR, and the DNAT of the
// node's own connections to its IPv6 node ports; nft refuses a table that
// mixes the families (seen when the IPv4 table got them). Without IPv6
// Services there is no IPv6 table.
func TestServiceRulesSplitTheFamilies(t *testing.T) {
	net := ServiceNetwork{
		CIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("fd00:96::/108")}, IPv6: true, Sinks: true,
		NodePorts: []NodePort{
			{Protocol: 6, Port: 30080, ClusterIP: netip.MustParseAddr("10.96.0.10"), ClusterPort: 80},
			{Protocol: 6, Port: 30080, ClusterIP: netip.MustParseAddr("fd00:96::10"), ClusterPort: 80},
		},
	}
	_, _, _, elements, rules := serviceRules(net)
	for _, r := range rules {
		if strings.Contains(r.Rule, "fd00") {
			t.Errorf("IPv4 table rule %q names an IPv6 prefix", r.Rule)
		}
	}
	for _, e := range elements {
		if slices.ContainsFunc(e.Value, func(v string) bool { return strings.Contains(v, ":") }) {
			t.Errorf("IPv4 table element %v names an IPv6 cluster IP", e.Value)
		}
	}
	chains, maps, elements6, rules6 := serviceRules6(net)
	var names []string
	for _, c := range chains {
		names = append(names, c.Name)
	}
	if !slices.Equal(names, []string{"forward", nodePortChain}) || len(maps) != 1 || len(elements6) != 1 ||
		!slices.Equal(elements6[0].Value, []string{"fd00:96::10", "80"}) {
		t.Fatalf("IPv6 table: chains %v, maps %d, elements %+v", names, len(maps), elements6)
	}
	var text []string
	for _, r := range rules6 {
		text = append(text, r.Rule)
	}
	all := strings.Join(text, "\n")
	for _, want := range []string{`iifname "vcoilhost" ip6 daddr { fd00:96::/108 } meta l4proto tcp reject with tcp reset`, "dnat ip6 to meta l4proto . th dport map @" + nodePortMap} {
		if !strings.Contains(all, want) {
			t.Errorf("IPv6 table rules lack %q:\n%s", want, all)
		}
	}
	net.IPv6 = false
	if c, _, _, _ := serviceRules6(net); c != nil {
		t.Errorf("without IPv6 Services the IPv6 table has chains %v", c)
	}
}
