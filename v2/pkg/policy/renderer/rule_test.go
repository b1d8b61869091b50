package renderer

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// randomRule returns a valid rule over a small address and port space, so
// that random pairs often overlap, contain or equal each other.
func randomRule(rng *rand.Rand) Rule {
	network := func() netip.Prefix {
		switch rng.IntN(5) {
		case 0:
			return AnyNetwork
		case 1, 2:
			a := netip.AddrFrom4([4]byte{10, 0, byte(rng.IntN(2)), byte(rng.IntN(4) * 64)})
			return netip.PrefixFrom(a, 22+rng.IntN(11)).Masked()
		default:
			a := netip.AddrFrom16([16]byte{0xfd, 0, 15: byte(rng.IntN(4) * 64)})
			return netip.PrefixFrom(a, 118+rng.IntN(11)).Masked()
		}
	}
	ports := func() PortRange {
		if rng.IntN(3) == 0 {
			return AnyPort
		}
		first := uint16(rng.IntN(8) * 10)
		return PortRange{First: first, Last: first + uint16(rng.IntN(20))}
	}
	r := Rule{Action: Action(rng.IntN(2)), Protocol: Protocol(rng.IntN(4)), SrcPort: AnyPort, DstPort: AnyPort}
	r.SrcNetwork, r.DstNetwork = network(), network()
	if r.SrcNetwork.IsValid() && r.DstNetwork.IsValid() && r.SrcNetwork.Addr().Is4() != r.DstNetwork.Addr().Is4() {
		r.DstNetwork = AnyNetwork
	}
	if r.Protocol != ProtocolAny {
		r.SrcPort, r.DstPort = ports(), ports()
	}
	return r
}

// covers reports whether every packet that o matches, r matches too,
// written from the meaning of the fields rather than from Compare.
func covers(r, o Rule) bool {
	net := func(a, b netip.Prefix) bool {
		if !a.IsValid() {
			return true
		}
		return b.IsValid() && a.Addr().Is4() == b.Addr().Is4() && a.Bits() <= b.Bits() && a.Contains(b.Addr())
	}
	return net(r.SrcNetwork, o.SrcNetwork) && net(r.DstNetwork, o.DstNetwork) &&
		(r.Protocol == ProtocolAny || r.Protocol == o.Protocol) &&
		r.SrcPort.Covers(o.SrcPort) && r.DstPort.Covers(o.DstPort)
}

func sameMatch(r, o Rule) bool {
	r.Action, o.Action = 0, 0
	return r == o
}

func TestCompareIsATotalOrderInWhichSubsetsComeFirst(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	rules := make([]Rule, 300)
	for i := range rules {
		rules[i] = randomRule(rng)
		if err := rules[i].Validate(); err != nil {
			t.Fatalf("the generator made an invalid rule: %v", err)
		}
	}
	subsets := 0
	for _, a := range rules {
		if a.Compare(a) != 0 {
			t.Fatalf("%v is not equal to itself", a)
		}
		for _, b := range rules {
			ab, ba := a.Compare(b), b.Compare(a)
			if ab != -ba {
				t.Fatalf("Compare is not antisymmetric on %v and %v: %d, %d", a, b, ab, ba)
			}
			if (ab == 0) != (a == b) {
				t.Fatalf("Compare(%v, %v) = 0 for different rules", a, b)
			}
			if covers(b, a) && !sameMatch(a, b) {
				subsets++
				if ab >= 0 {
					t.Fatalf("%v matches a strict subset of %v's traffic but does not sort first", a, b)
				}
			}
		}
	}
	if subsets < 1000 {
		t.Fatalf("only %d strict subset pairs were checked; the generator is too sparse", subsets)
	}
	// Transitivity: a sorted list is sorted pairwise.
	sorted := slices.Clone(rules)
	slices.SortFunc(sorted, Rule.Compare)
	for i := range sorted {
		for j := i + 1; j < len(sorted); j++ {
			if sorted[i].Compare(sorted[j]) > 0 {
				t.Fatalf("Compare is not transitive: %v sorts before %v but compares greater", sorted[i], sorted[j])
			}
		}
	}
}

func TestSortRulesAndSortKeysAgreeWithCompare(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for n := range 60 {
		rules := make([]Rule, n)
		for i := range rules {
			rules[i] = randomRule(rng)
		}
		want := slices.Clone(rules)
		slices.SortFunc(want, Rule.Compare)
		got := slices.Clone(rules)
		SortRules(got)
		if !slices.Equal(got, want) {
			t.Fatalf("SortRules of %d rules differs from sorting by Compare:\n%v\n%v", n, got, want)
		}
		for i := range rules {
			for j := range rules {
				ki, kj := rules[i].SortKey(), rules[j].SortKey()
				if got, want := ki.Compare(&kj), rules[i].Compare(rules[j]); got != want {
					t.Fatalf("keys of %v and %v compare %d, the rules %d", rules[i], rules[j], got, want)
				}
			}
		}
	}
}

func TestValidateRejectsMalformedRules(t *testing.T) {
	cases := []struct {
		name string
		rule Rule
		want string
	}{
		{"an unmasked network", Rule{Action: ActionPermit, SrcNetwork: netip.MustParsePrefix("10.0.0.1/24"), SrcPort: AnyPort, DstPort: AnyPort}, "not masked"},
		{"an IPv4-mapped network", Rule{SrcNetwork: netip.MustParsePrefix("::ffff:10.0.0.0/120"), SrcPort: AnyPort, DstPort: AnyPort}, "IPv4-mapped"},
		{"networks of two families", Rule{SrcNetwork: netip.MustParsePrefix("10.0.0.0/8"), DstNetwork: netip.MustParsePrefix("fd00::/8"), SrcPort: AnyPort, DstPort: AnyPort}, "different families"},
		{"an empty port range", Rule{Protocol: ProtocolTCP, SrcPort: AnyPort, DstPort: PortRange{First: 9, Last: 8}}, "empty port range"},
		{"ports on every protocol", Rule{SrcPort: AnyPort, DstPort: SinglePort(80)}, "cannot restrict ports"},
		{"an unknown action", Rule{Action: 7, SrcPort: AnyPort, DstPort: AnyPort}, "unknown action"},
		{"an unknown protocol", Rule{Protocol: 9, SrcPort: AnyPort, DstPort: AnyPort}, "unknown protocol"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.rule.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestValidateRuleListChecksTheShapeRenderersRelyOn(t *testing.T) {
	tcp80 := func(src, dst string) Rule {
		r := Rule{Action: ActionPermit, Protocol: ProtocolTCP, SrcPort: AnyPort, DstPort: SinglePort(80)}
		if src != "" {
			r.SrcNetwork = netip.MustParsePrefix(src)
		}
		if dst != "" {
			r.DstNetwork = netip.MustParsePrefix(dst)
		}
		return r
	}
	cases := []struct {
		name  string
		dir   Direction
		rules []Rule
		want  string // empty: valid
	}{
		{"an empty list is valid", Ingress, nil, ""},
		{"permits then deny-all is valid", Ingress, []Rule{tcp80("10.0.0.1/32", ""), tcp80("10.0.0.0/24", ""), DenyAll}, ""},
		{"permit-all alone is valid", Egress, []Rule{PermitAll}, ""},
		{"traffic to the pod naming a destination", Ingress, []Rule{tcp80("", "10.0.0.1/32"), DenyAll}, "destination of traffic to the pod"},
		{"traffic from the pod naming a source", Egress, []Rule{tcp80("10.0.0.1/32", ""), DenyAll}, "source of traffic from the pod"},
		{"a list that does not end with a catch-all", Ingress, []Rule{tcp80("10.0.0.1/32", "")}, "must match all traffic"},
		{"a deny before the end", Ingress, []Rule{{SrcNetwork: netip.MustParsePrefix("10.0.0.1/32"), SrcPort: AnyPort, DstPort: AnyPort}, DenyAll}, "only the last rule may deny"},
		{"unsorted permits", Ingress, []Rule{tcp80("10.0.0.0/24", ""), tcp80("10.0.0.1/32", ""), DenyAll}, "not sorted"},
		{"a duplicate permit", Ingress, []Rule{tcp80("10.0.0.1/32", ""), tcp80("10.0.0.1/32", ""), DenyAll}, "not sorted or not unique"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateRuleList(tc.dir, tc.rules)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("ValidateRuleList: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("ValidateRuleList = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestRulesPrintAsSixTuples(t *testing.T) {
	r := Rule{Action: ActionPermit, Protocol: ProtocolUDP, SrcNetwork: netip.MustParsePrefix("10.0.0.0/24"), SrcPort: AnyPort, DstPort: PortRange{First: 53, Last: 60}}
	if got, want := r.String(), "permit udp 10.0.0.0/24 -> any port 53-60"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	if got, want := DenyAll.String(), "deny any any -> any"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
}
