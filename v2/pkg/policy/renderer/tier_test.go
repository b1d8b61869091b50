package renderer

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// tierPacket is the first packet of a connection; protocol 99 stands for
// a protocol without ports (ICMP), which only rules of every protocol match.
type tierPacket struct {
	src, dst     netip.Addr
	proto        Protocol
	sport, dport uint16
}

func tierMatches(r Rule, p tierPacket) bool {
	if r.Protocol != ProtocolAny && r.Protocol != p.proto {
		return false
	}
	if r.SrcNetwork.IsValid() && !r.SrcNetwork.Contains(p.src) || r.DstNetwork.IsValid() && !r.DstNetwork.Contains(p.dst) {
		return false
	}
	return r.Protocol == ProtocolAny || r.SrcPort.Contains(p.sport) && r.DstPort.Contains(p.dport)
}

// decideTiers is the tiers' meaning, read directly: Admin rules in order,
// then the NetworkPolicy list if it isolates, else the Baseline rules
// (Pass and no match permit). tier and policy name what decided ("" for
// no rule, or a rule without a policy).
func decideTiers(t Tiers, p tierPacket) (permit bool, tier, policy string) {
admin:
	for _, r := range t.Admin {
		if tierMatches(r.Match, p) {
			switch r.Action {
			case TierAccept:
				return true, "admin", r.Policy
			case TierDeny:
				return false, "admin", r.Policy
			case TierPass:
				break admin
			}
		}
	}
	if len(t.NetworkPolicy) > 0 {
		for _, r := range t.NetworkPolicy {
			if tierMatches(r, p) {
				return r.Action == ActionPermit, "networkpolicy", "np"
			}
		}
		return false, "networkpolicy", "np"
	}
	for _, r := range t.Baseline {
		if tierMatches(r.Match, p) {
			return r.Action != TierDeny, "baseline", r.Policy
		}
	}
	return true, "", ""
}

// TestCompiledTiersDecideAsTheTiers: for random tiers (Pass rules
// included) and random packets of both families, the compiled list, applied
// with first-match semantics, decides every packet as the tiers do, and
// every rule of it is valid.
func TestCompiledTiersDecideAsTheTiers(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	networks4 := []string{"10.0.0.0/8", "10.1.0.0/16", "10.1.0.1/32", "10.2.0.0/16"}
	networks6 := []string{"fd00::/8", "fd00:1::/32", "fd00:1::1/128"}
	addrs := []string{"10.1.0.1", "10.1.0.2", "10.2.0.1", "10.3.0.1", "fd00:1::1", "fd00:1::2", "fd00:2::1", "2001:db8::1"}
	ports := []PortRange{AnyPort, SinglePort(80), {First: 80, Last: 90}, {First: 1000, Last: 2000}}
	network := func(v6 bool) netip.Prefix {
		if rng.IntN(3) == 0 {
			return AnyNetwork
		}
		pool := networks4
		if v6 {
			pool = networks6
		}
		return netip.MustParsePrefix(pool[rng.IntN(len(pool))])
	}
	rule := func() Rule {
		v6 := rng.IntN(2) == 0
		r := Rule{Protocol: Protocol(rng.IntN(4)), SrcNetwork: network(v6), DstNetwork: network(v6), SrcPort: AnyPort, DstPort: AnyPort}
		if r.Protocol != ProtocolAny {
			r.DstPort = ports[rng.IntN(len(ports))]
			if rng.IntN(5) == 0 {
				r.SrcPort = ports[rng.IntN(len(ports))]
			}
		}
		return r
	}
	tierRules := func(n int) []TierRule {
		out := make([]TierRule, n)
		for i := range out {
			out[i] = TierRule{Match: rule(), Action: TierAction(rng.IntN(3)), Policy: []string{"", "p1", "p2", "p3"}[rng.IntN(4)]}
		}
		return out
	}
	passes := 0
	for range 4000 {
		tiers := Tiers{Admin: tierRules(rng.IntN(8)), Baseline: tierRules(rng.IntN(4))}
		if rng.IntN(2) == 0 {
			for range rng.IntN(4) {
				r := rule()
				r.Action = ActionPermit
				tiers.NetworkPolicy = append(tiers.NetworkPolicy, r)
			}
			tiers.NetworkPolicy = append(tiers.NetworkPolicy, DenyAll)
		}
		for _, r := range tiers.Admin {
			if r.Action == TierPass {
				passes++
			}
		}
		np := &Origin{Tier: "networkpolicy", Direction: Ingress, Policies: []string{"np"}}
		compiled, origins := tiers.CompileWithOrigins(Ingress, np)
		if plain := tiers.Compile(); !slices.Equal(plain, compiled) || len(origins) != len(compiled) {
			t.Fatalf("%+v: Compile gives %v, CompileWithOrigins %v with %d origins", tiers, plain, compiled, len(origins))
		}
		if len(compiled) == 0 || !compiled[len(compiled)-1].MatchesAll() {
			t.Fatalf("%+v compiled to %v: the last rule must match everything", tiers, compiled)
		}
		for _, r := range compiled {
			if err := r.Validate(); err != nil {
				t.Fatalf("%+v compiled to an invalid rule: %v", tiers, err)
			}
		}
		for range 50 {
			p := tierPacket{src: netip.MustParseAddr(addrs[rng.IntN(len(addrs))]), proto: Protocol(1 + rng.IntN(3)),
				sport: []uint16{80, 85, 1500, 40000}[rng.IntN(4)], dport: []uint16{80, 85, 1500, 40000}[rng.IntN(4)]}
			p.dst = netip.MustParseAddr(addrs[rng.IntN(len(addrs))])
			if p.dst.Is4() != p.src.Is4() {
				continue
			}
			if rng.IntN(6) == 0 {
				p.proto, p.sport, p.dport = 99, 0, 0
			}
			want, wantTier, wantPolicy := decideTiers(tiers, p)
			got, gotTier, gotPolicy := false, "", ""
			for i, r := range compiled {
				if tierMatches(r, p) {
					got = r.Action == ActionPermit
					if o := origins[i]; o != nil {
						gotTier, gotPolicy = o.Tier, o.Policies[0]
						if o.Direction != Ingress || len(o.Policies) != 1 {
							t.Fatalf("origin %+v: want one policy, ingress", o)
						}
					}
					break
				}
			}
			if got != want {
				t.Fatalf("tiers %+v, packet %+v: the compiled list %v permits=%v, the tiers say %v", tiers, p, compiled, got, want)
			}
			if wantPolicy == "" {
				wantTier = ""
			}
			if gotTier != wantTier || gotPolicy != wantPolicy {
				t.Fatalf("tiers %+v, packet %+v: the compiled list's rule comes from %s %q, the tiers' decision from %s %q", tiers, p, gotTier, gotPolicy, wantTier, wantPolicy)
			}
		}
	}
	if passes < 500 {
		t.Errorf("only %d Admin Pass rules were generated", passes)
	}
}

func TestIntersect(t *testing.T) {
	tcp80 := Rule{Protocol: ProtocolTCP, DstNetwork: netip.MustParsePrefix("10.1.0.0/16"), SrcPort: AnyPort, DstPort: SinglePort(80)}
	for _, tc := range []struct {
		name string
		a, b Rule
		want Rule
		ok   bool
	}{
		{"with everything: the narrower, with b's action", tcp80, DenyAll, Rule{Action: ActionDeny, Protocol: ProtocolTCP, DstNetwork: netip.MustParsePrefix("10.1.0.0/16"), SrcPort: AnyPort, DstPort: SinglePort(80)}, true},
		{"nested networks: the longer", tcp80, Rule{Action: ActionPermit, DstNetwork: netip.MustParsePrefix("10.1.2.0/24"), SrcPort: AnyPort, DstPort: AnyPort},
			Rule{Action: ActionPermit, Protocol: ProtocolTCP, DstNetwork: netip.MustParsePrefix("10.1.2.0/24"), SrcPort: AnyPort, DstPort: SinglePort(80)}, true},
		{"nested networks, the other way: the longer", Rule{Action: ActionPermit, SrcNetwork: netip.MustParsePrefix("10.1.2.3/32"), SrcPort: AnyPort, DstPort: AnyPort}, tcp80,
			Rule{Action: ActionDeny, Protocol: ProtocolTCP, SrcNetwork: netip.MustParsePrefix("10.1.2.3/32"), DstNetwork: netip.MustParsePrefix("10.1.0.0/16"), SrcPort: AnyPort, DstPort: SinglePort(80)}, true},
		{"disjoint networks: nothing", tcp80, Rule{DstNetwork: netip.MustParsePrefix("10.2.0.0/16"), SrcPort: AnyPort, DstPort: AnyPort}, Rule{}, false},
		{"other families: nothing", tcp80, Rule{DstNetwork: netip.MustParsePrefix("fd00::/8"), SrcPort: AnyPort, DstPort: AnyPort}, Rule{}, false},
		{"two protocols: nothing", tcp80, Rule{Protocol: ProtocolUDP, SrcPort: AnyPort, DstPort: AnyPort}, Rule{}, false},
		{"port ranges: the overlap", Rule{Protocol: ProtocolUDP, SrcPort: AnyPort, DstPort: PortRange{First: 50, Last: 100}},
			Rule{Protocol: ProtocolUDP, SrcPort: AnyPort, DstPort: PortRange{First: 90, Last: 200}},
			Rule{Protocol: ProtocolUDP, SrcPort: AnyPort, DstPort: PortRange{First: 90, Last: 100}}, true},
		{"disjoint ports: nothing", tcp80, Rule{Protocol: ProtocolTCP, SrcPort: AnyPort, DstPort: SinglePort(81)}, Rule{}, false},
	} {
		got, ok := Intersect(tc.a, tc.b)
		if ok != tc.ok || ok && got != tc.want {
			t.Errorf("%s: Intersect(%v, %v) = %v, %v; want %v, %v", tc.name, tc.a, tc.b, got, ok, tc.want, tc.ok)
		}
	}
}
