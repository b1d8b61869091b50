package configurator

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestSubtractSubnets(t *testing.T) {
	cases := []struct {
		name    string
		network string
		except  []string
		want    []string
	}{
		{"nothing to subtract", "10.0.0.0/24", nil, []string{"10.0.0.0/24"}},
		{"the Kubernetes documentation's block", "172.17.0.0/16", []string{"172.17.1.0/24"}, []string{
			"172.17.0.0/24", "172.17.2.0/23", "172.17.4.0/22", "172.17.8.0/21",
			"172.17.16.0/20", "172.17.32.0/19", "172.17.64.0/18", "172.17.128.0/17",
		}},
		{"an except equal to the network", "10.0.0.0/24", []string{"10.0.0.0/24"}, nil},
		{"an except larger than the network", "10.0.0.0/24", []string{"10.0.0.0/8"}, nil},
		{"an except outside the network", "10.0.0.0/24", []string{"10.0.1.0/24"}, []string{"10.0.0.0/24"}},
		{"an except of the other family", "10.0.0.0/24", []string{"fd00::/8"}, []string{"10.0.0.0/24"}},
		{"a single address", "10.0.0.0/30", []string{"10.0.0.2/32"}, []string{"10.0.0.0/31", "10.0.0.3/32"}},
		{"two excepts", "10.0.0.0/29", []string{"10.0.0.0/31", "10.0.0.6/31"}, []string{"10.0.0.2/31", "10.0.0.4/31"}},
		{"nested excepts", "10.0.0.0/29", []string{"10.0.0.0/30", "10.0.0.1/32"}, []string{"10.0.0.4/30"}},
		{"IPv6", "fd00::/126", []string{"fd00::1/128"}, []string{"fd00::/128", "fd00::2/127"}},
		{"everything but one IPv4 address", "0.0.0.0/0", []string{"8.8.8.8/32"}, nil /* checked below by count */},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := SubtractSubnets(netip.MustParsePrefix(tc.network), prefixes(tc.except...))
			if tc.name == "everything but one IPv4 address" {
				if len(got) != 32 {
					t.Fatalf("got %d prefixes, want 32 (one per bit)", len(got))
				}
				return
			}
			if want := prefixes(tc.want...); !slices.Equal(got, want) {
				t.Fatalf("SubtractSubnets = %v, want %v", got, want)
			}
		})
	}
}

// TestSubtractSubnetsKeepsExactlyTheAddressesOutsideTheExcepts checks the
// result against membership, for random networks, excepts and addresses.
func TestSubtractSubnetsKeepsExactlyTheAddressesOutsideTheExcepts(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	randomIn := func(p netip.Prefix) netip.Addr {
		b := p.Addr().AsSlice()
		for i := p.Bits(); i < len(b)*8; i++ {
			if rng.IntN(2) == 1 {
				b[i/8] |= 0x80 >> (i % 8)
			}
		}
		a, _ := netip.AddrFromSlice(b)
		return a
	}
	for range 500 {
		var network netip.Prefix
		if rng.IntN(2) == 0 {
			network = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(rng.IntN(256)), 0, 0}), 8+rng.IntN(20)).Masked()
		} else {
			network = netip.PrefixFrom(netip.MustParseAddr("fd00::"), 100+rng.IntN(20)).Masked()
		}
		var except []netip.Prefix
		for range rng.IntN(4) {
			a := randomIn(network)
			except = append(except, netip.PrefixFrom(a, network.Bits()+rng.IntN(a.BitLen()-network.Bits()+1)).Masked())
		}
		got := SubtractSubnets(network, except)
		for i := 1; i < len(got); i++ {
			if got[i-1].Addr().Compare(got[i].Addr()) >= 0 || got[i-1].Overlaps(got[i]) {
				t.Fatalf("%v minus %v = %v: not sorted and disjoint", network, except, got)
			}
		}
		for range 200 {
			a := randomIn(network)
			if len(except) > 0 && rng.IntN(2) == 0 {
				a = randomIn(except[rng.IntN(len(except))])
			}
			want := !slices.ContainsFunc(except, func(e netip.Prefix) bool { return e.Contains(a) })
			in := slices.ContainsFunc(got, func(p netip.Prefix) bool { return p.Contains(a) })
			if in != want {
				t.Fatalf("%v minus %v = %v: address %v is in the result: %v, want %v", network, except, got, a, in, want)
			}
		}
	}
}
