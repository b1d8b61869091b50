package renderer

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

func TestAggregatePrefixesCoversExactlyTheSameAddresses(t *testing.T) {
	pfx := func(ss ...string) []netip.Prefix {
		var out []netip.Prefix
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
		}
		return out
	}
	tests := []struct{ in, want []netip.Prefix }{
		{pfx("10.0.0.1/32", "10.0.0.0/32", "10.0.0.2/32", "10.0.0.3/32"), pfx("10.0.0.0/30")},
		{pfx("10.0.0.1/32", "10.0.0.2/32"), pfx("10.0.0.1/32", "10.0.0.2/32")},
		{pfx("10.0.0.0/24", "10.0.0.7/32", "10.0.1.0/24"), pfx("10.0.0.0/23")},
		{pfx("fd00::1/128", "fd00::/128", "10.0.0.0/32", "10.0.0.1/32"), pfx("10.0.0.0/31", "fd00::/127")},
		{pfx("0.0.0.0/1", "128.0.0.0/1"), pfx("0.0.0.0/0")},
		{nil, nil},
	}
	for _, tc := range tests {
		if got := AggregatePrefixes(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("AggregatePrefixes(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
	// Random sets: every address of a /24 is in the result exactly when
	// it is in the input, and the result's prefixes are disjoint.
	rng := rand.New(rand.NewPCG(7, 7))
	for range 200 {
		var in []netip.Prefix
		want := map[netip.Addr]bool{}
		for range rng.IntN(200) {
			a := netip.AddrFrom4([4]byte{10, 0, 0, byte(rng.IntN(256))})
			in = append(in, netip.PrefixFrom(a, 32))
			want[a] = true
		}
		got := AggregatePrefixes(in)
		for i := range 256 {
			a := netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})
			n := 0
			for _, p := range got {
				if p.Contains(a) {
					n++
				}
			}
			if n > 1 || (n == 1) != want[a] {
				t.Fatalf("AggregatePrefixes(%v) = %v: %v is in %d prefixes, want %v", in, got, a, n, want[a])
			}
		}
	}
}
