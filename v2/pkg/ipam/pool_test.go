package ipam

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

func ptr(s string) *string { return &s }

func TestParsePoolRejectsInvalidSpecsNamingTheField(t *testing.T) {
	cases := []struct {
		name      string
		bits      int
		subnets   []SubnetSpec
		wantField string
		wantIn    string
	}{
		{"negative block size", -1, []SubnetSpec{{IPv4: ptr("10.0.0.0/16")}}, "blockSizeBits", "out of range"},
		{"block size above 16", 17, []SubnetSpec{{IPv4: ptr("10.0.0.0/8")}}, "blockSizeBits", "out of range"},
		{"no subnets", 5, nil, "subnets", "at least one"},
		{"an empty entry", 5, []SubnetSpec{{}}, "subnets[0]", "needs ipv4, ipv6 or both"},
		{"garbage CIDR", 5, []SubnetSpec{{IPv4: ptr("10.0.0.0/33")}}, "subnets[0].ipv4", "not an IPv4 subnet in CIDR notation"},
		{"address without length", 5, []SubnetSpec{{IPv4: ptr("10.0.0.0")}}, "subnets[0].ipv4", "CIDR notation"},
		{"IPv6 in the ipv4 field", 5, []SubnetSpec{{IPv4: ptr("fd00::/112")}}, "subnets[0].ipv4", "not an IPv4 subnet"},
		{"IPv4 in the ipv6 field", 5, []SubnetSpec{{IPv6: ptr("10.0.0.0/16")}}, "subnets[0].ipv6", "not an IPv6 subnet"},
		{"IPv4-mapped IPv6", 5, []SubnetSpec{{IPv6: ptr("::ffff:10.0.0.0/112")}}, "subnets[0].ipv6", "not an IPv6 subnet"},
		{"host bits set", 5, []SubnetSpec{{IPv4: ptr("10.0.0.1/16")}}, "subnets[0].ipv4", "host bits set; the subnet is 10.0.0.0/16"},
		{"surrounding spaces", 5, []SubnetSpec{{IPv4: ptr(" 10.0.0.0/16")}}, "subnets[0].ipv4", "CIDR notation"},
		{"dual stack of different sizes", 5, []SubnetSpec{{IPv4: ptr("10.0.0.0/16"), IPv6: ptr("fd00::/64")}}, "subnets[0]", "same number of host bits"},
		{"mixed families", 5, []SubnetSpec{{IPv4: ptr("10.0.0.0/16")}, {IPv6: ptr("fd00::/112")}}, "subnets[1]", "same address families"},
		{"subnet smaller than a block", 5, []SubnetSpec{{IPv4: ptr("10.0.0.0/28")}}, "subnets[0].ipv4", "fewer than one block"},
		{"entries overlap", 5, []SubnetSpec{{IPv4: ptr("10.0.0.0/16")}, {IPv4: ptr("10.0.128.0/17")}}, "subnets[1].ipv4", "overlaps ipv4 of subnets[0]"},
		{"too many blocks", 0, []SubnetSpec{{IPv6: ptr("fd00::/48")}}, "subnets[0]", "more than 2^62 blocks"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, errs := ParsePool(tc.bits, tc.subnets)
			if len(errs) == 0 {
				t.Fatalf("ParsePool accepted an invalid pool")
			}
			for _, e := range errs {
				if e.Field == tc.wantField && strings.Contains(e.Reason, tc.wantIn) {
					return
				}
			}
			t.Fatalf("want an error on %s containing %q, got %v", tc.wantField, tc.wantIn, errs)
		})
	}
}

func TestParsePoolAcceptsValidSpecs(t *testing.T) {
	cases := []struct {
		name      string
		bits      int
		subnets   []SubnetSpec
		numBlocks int64
	}{
		{"IPv4 /16 in /27 blocks", 5, []SubnetSpec{{IPv4: ptr("10.2.0.0/16")}}, 2048},
		{"Coil's dual-stack example", 5, []SubnetSpec{{IPv4: ptr("10.2.0.0/16"), IPv6: ptr("fd01:0203:0405:0607::/112")}}, 2048},
		{"IPv6 only /64 in /123 blocks", 5, []SubnetSpec{{IPv6: ptr("fd00::/64")}}, 1 << 59},
		{"two IPv4 subnets", 2, []SubnetSpec{{IPv4: ptr("10.0.0.0/24")}, {IPv4: ptr("10.1.0.0/30")}}, 65},
		{"public /32 blocks", 0, []SubnetSpec{{IPv4: ptr("203.0.113.0/29")}}, 8},
		{"a block as large as the subnet", 4, []SubnetSpec{{IPv4: ptr("10.0.0.0/28")}}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, errs := ParsePool(tc.bits, tc.subnets)
			if errs != nil {
				t.Fatalf("ParsePool: %v", errs)
			}
			if got := p.NumBlocks(); got != tc.numBlocks {
				t.Fatalf("NumBlocks = %d, want %d", got, tc.numBlocks)
			}
		})
	}
}

func mustPool(t testing.TB, bits int, subnets ...SubnetSpec) Pool {
	t.Helper()
	p, errs := ParsePool(bits, subnets)
	if errs != nil {
		t.Fatalf("ParsePool: %v", errs)
	}
	return p
}

func TestBlockCarvesSubnetsInOrder(t *testing.T) {
	p := mustPool(t, 5,
		SubnetSpec{IPv4: ptr("10.2.0.0/26"), IPv6: ptr("fd01:203:405:607::/122")},
		SubnetSpec{IPv4: ptr("10.9.0.0/27"), IPv6: ptr("fd02::/123")},
	)
	cases := []struct {
		index      int64
		ipv4, ipv6 string
	}{
		{0, "10.2.0.0/27", "fd01:203:405:607::/123"},
		{1, "10.2.0.32/27", "fd01:203:405:607::20/123"},
		{2, "10.9.0.0/27", "fd02::/123"},
	}
	for _, tc := range cases {
		b, err := p.Block(tc.index)
		if err != nil {
			t.Fatalf("Block(%d): %v", tc.index, err)
		}
		if b.IPv4.String() != tc.ipv4 || b.IPv6.String() != tc.ipv6 {
			t.Errorf("Block(%d) = %s, want %s,%s", tc.index, b, tc.ipv4, tc.ipv6)
		}
	}
	for _, bad := range []int64{-1, 3, 1 << 40} {
		if _, err := p.Block(bad); !errors.Is(err, ErrNoSuchBlock) {
			t.Errorf("Block(%d) error = %v, want ErrNoSuchBlock", bad, err)
		}
	}
}

func TestBlockOfAHugeIPv6PoolNeedsMoreThan64Bits(t *testing.T) {
	// Index 2^62-1 shifted by 16 bits is beyond 64 bits: the carry must reach
	// the upper half of the address.
	p := mustPool(t, 16, SubnetSpec{IPv6: ptr("fd00::/50")})
	b, err := p.Block(p.NumBlocks() - 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := "fd00::3fff:ffff:ffff:ffff:0/112"; b.IPv6.String() != want {
		t.Fatalf("last block = %s, want %s", b.IPv6, want)
	}
}

// TestBlocksTileThePoolProperty checks, for random pools, that distinct
// indexes give disjoint, aligned blocks inside the pool's subnets, and that
// dual-stack blocks pair the same position in both families.
func TestBlocksTileThePoolProperty(t *testing.T) {
	seed := uint64(20261122)
	rng := rand.New(rand.NewPCG(seed, 1))
	for iter := 0; iter < 500; iter++ {
		p := randomPool(rng)
		n := p.NumBlocks()
		seen := map[netip.Prefix]int64{}
		samples := min(n, 64)
		for k := int64(0); k < samples; k++ {
			idx := k
			if n > 64 {
				idx = rng.Int64N(n)
			}
			b, err := p.Block(idx)
			if err != nil {
				t.Fatalf("seed %d iter %d: Block(%d) of %d: %v", seed, iter, idx, n, err)
			}
			for _, pre := range []netip.Prefix{b.IPv4, b.IPv6} {
				if !pre.IsValid() {
					continue
				}
				if pre.Masked() != pre {
					t.Fatalf("seed %d iter %d: block %d = %s is not aligned", seed, iter, idx, pre)
				}
				inside := false
				for _, s := range p.Subnets {
					for _, sp := range []netip.Prefix{s.IPv4, s.IPv6} {
						if sp.IsValid() && sp.Contains(pre.Addr()) && pre.Bits() >= sp.Bits() {
							inside = true
						}
					}
				}
				if !inside {
					t.Fatalf("seed %d iter %d: block %d = %s lies outside the pool", seed, iter, idx, pre)
				}
				if other, dup := seen[pre]; dup && other != idx {
					t.Fatalf("seed %d iter %d: blocks %d and %d are both %s", seed, iter, other, idx, pre)
				}
				seen[pre] = idx
			}
			if b.IPv4.IsValid() && b.IPv6.IsValid() {
				if b.IPv4.Bits()+96 != b.IPv6.Bits() {
					t.Fatalf("seed %d iter %d: dual-stack block %s has unequal sizes", seed, iter, b)
				}
			}
		}
	}
}

func randomPool(rng *rand.Rand) Pool {
	for {
		bits := rng.IntN(MaxBlockSizeBits + 1)
		fam := rng.IntN(3) // 0: v4, 1: v6, 2: dual
		var specs []SubnetSpec
		for i := 0; i < 1+rng.IntN(3); i++ {
			host := bits + rng.IntN(max(1, min(24, 32)-bits))
			if fam == 0 || fam == 2 {
				host = min(host, 24)
			}
			var s SubnetSpec
			if fam != 1 {
				a := netip.AddrFrom4([4]byte{10, byte(i * 64), 0, 0})
				s.IPv4 = ptr(netip.PrefixFrom(a, 32-host).Masked().String())
			}
			if fam != 0 {
				a := netip.AddrFrom16([16]byte{0xfd, byte(i), 15: 0})
				s.IPv6 = ptr(netip.PrefixFrom(a, 128-host).Masked().String())
			}
			specs = append(specs, s)
		}
		if p, errs := ParsePool(bits, specs); errs == nil {
			return p
		}
	}
}

func FuzzParsePool(f *testing.F) {
	f.Add(5, "10.2.0.0/16", "fd01:203:405:607::/112")
	f.Add(0, "203.0.113.0/24", "")
	f.Add(16, "", "fd00::/48")
	f.Add(2, "10.0.0.1/30", "::ffff:1.2.3.4/128")
	f.Fuzz(func(t *testing.T, bits int, v4, v6 string) {
		spec := SubnetSpec{}
		if v4 != "" {
			spec.IPv4 = &v4
		}
		if v6 != "" {
			spec.IPv6 = &v6
		}
		p, errs := ParsePool(bits, []SubnetSpec{spec})
		if errs != nil {
			for _, e := range errs {
				if e.Field == "" || e.Reason == "" {
					t.Fatalf("error without a field or reason: %#v", e)
				}
			}
			return
		}
		n := p.NumBlocks()
		if n < 1 || n > MaxBlocks {
			t.Fatalf("accepted pool has %d blocks", n)
		}
		for _, idx := range []int64{0, n / 2, n - 1} {
			b, err := p.Block(idx)
			if err != nil {
				t.Fatalf("Block(%d) of %d: %v", idx, n, err)
			}
			if b.SizeBits() != bits {
				t.Fatalf("Block(%d) = %s, want 2^%d addresses", idx, b, bits)
			}
		}
		if _, err := p.Block(n); err == nil {
			t.Fatalf("Block(%d) past the end succeeded", n)
		}
	})
}
