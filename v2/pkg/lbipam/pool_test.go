package lbipam

import (
	"errors"
	"math"
	"net/netip"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/vcoil/vcoil/v2/pkg/ipam"
)

func pool(t *testing.T, entries ...ipam.SubnetSpec) Pool {
	t.Helper()
	p, err := ParsePool(entries)
	if err != nil {
		t.Fatalf("parse pool: %v", err)
	}
	return p
}

func v4(s string) ipam.SubnetSpec { return ipam.SubnetSpec{IPv4: ptr.To(s)} }
func v6(s string) ipam.SubnetSpec { return ipam.SubnetSpec{IPv6: ptr.To(s)} }
func dual(a, b string) ipam.SubnetSpec {
	return ipam.SubnetSpec{IPv4: ptr.To(a), IPv6: ptr.To(b)}
}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

func TestSizeCountsTheAddressesGivenAutomatically(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []ipam.SubnetSpec
		want    int64
	}{
		{"an IPv4 /30 gives its two host addresses", []ipam.SubnetSpec{v4("203.0.113.0/30")}, 2},
		{"an IPv4 /24 gives 254", []ipam.SubnetSpec{v4("203.0.113.0/24")}, 254},
		{"an IPv4 /31 gives both addresses", []ipam.SubnetSpec{v4("203.0.113.0/31")}, 2},
		{"an IPv4 /32 gives its address", []ipam.SubnetSpec{v4("203.0.113.7/32")}, 1},
		{"subnets add up", []ipam.SubnetSpec{v4("203.0.113.0/30"), v4("198.51.100.0/29")}, 2 + 6},
		{"an IPv6 /120 gives all 256", []ipam.SubnetSpec{v6("fd00:1b::/120")}, 256},
		{"a dual-stack /30 and /126 give 2 + 4", []ipam.SubnetSpec{dual("203.0.113.0/30", "fd00:1b::/126")}, 6},
		{"an IPv6 /64 saturates", []ipam.SubnetSpec{v6("fd00:1b::/64")}, math.MaxInt64},
		{"two IPv6 /66 saturate", []ipam.SubnetSpec{v6("fd00:1b::/66"), v6("fd00:1c::/66")}, math.MaxInt64},
		{"an IPv6 /66 is counted exactly", []ipam.SubnetSpec{v6("fd00:1b::/66")}, 1 << 62},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pool(t, tc.entries...).Size(); got != tc.want {
				t.Errorf("Size() = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestFirstFreeTakesTheLowestFreeAddressInSubnetOrder(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []ipam.SubnetSpec
		family  Family
		used    []string
		want    string // "" for exhausted
	}{
		{"an empty IPv4 /24 gives .1, not the network address", []ipam.SubnetSpec{v4("203.0.113.0/24")}, IPv4, nil, "203.0.113.1"},
		{"used addresses are skipped", []ipam.SubnetSpec{v4("203.0.113.0/24")}, IPv4, []string{"203.0.113.2", "203.0.113.1"}, "203.0.113.3"},
		{"a hole is filled first", []ipam.SubnetSpec{v4("203.0.113.0/24")}, IPv4, []string{"203.0.113.1", "203.0.113.3"}, "203.0.113.2"},
		{"duplicates in used do not matter", []ipam.SubnetSpec{v4("203.0.113.0/24")}, IPv4, []string{"203.0.113.1", "203.0.113.1", "203.0.113.2"}, "203.0.113.3"},
		{"a used network address does not hide .1", []ipam.SubnetSpec{v4("203.0.113.0/24")}, IPv4, []string{"203.0.113.0"}, "203.0.113.1"},
		{"a /30 is exhausted after two, the broadcast address is not given", []ipam.SubnetSpec{v4("203.0.113.0/30")}, IPv4, []string{"203.0.113.1", "203.0.113.2"}, ""},
		{"a full subnet moves on to the next one", []ipam.SubnetSpec{v4("203.0.113.0/30"), v4("198.51.100.0/30")}, IPv4, []string{"203.0.113.1", "203.0.113.2"}, "198.51.100.1"},
		{"a /31 gives its first address", []ipam.SubnetSpec{v4("203.0.113.0/31")}, IPv4, nil, "203.0.113.0"},
		{"a /31 gives its second address", []ipam.SubnetSpec{v4("203.0.113.0/31")}, IPv4, []string{"203.0.113.0"}, "203.0.113.1"},
		{"a /32 gives its address once", []ipam.SubnetSpec{v4("203.0.113.9/32")}, IPv4, []string{"203.0.113.9"}, ""},
		{"addresses of the other family do not count", []ipam.SubnetSpec{dual("203.0.113.0/30", "fd00:1b::/126")}, IPv6, []string{"203.0.113.1"}, "fd00:1b::"},
		{"IPv6 starts at the subnet's first address", []ipam.SubnetSpec{v6("fd00:1b::/120")}, IPv6, []string{"fd00:1b::", "fd00:1b::1"}, "fd00:1b::2"},
		{"an IPv6 /126 is exhausted after four", []ipam.SubnetSpec{v6("fd00:1b::/126")}, IPv6, []string{"fd00:1b::", "fd00:1b::1", "fd00:1b::2", "fd00:1b::3"}, ""},
		{"a /64 is searched around the used set, not enumerated", []ipam.SubnetSpec{v6("fd00:1b::/64")}, IPv6, []string{"fd00:1b::", "fd00:1b::1", "fd00:1c::5"}, "fd00:1b::2"},
		{"the top of the IPv6 space ends the search", []ipam.SubnetSpec{v6("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127")}, IPv6, []string{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pool(t, tc.entries...).FirstFree(tc.family, addrs(tc.used...))
			if tc.want == "" {
				if !errors.Is(err, ErrExhausted) {
					t.Fatalf("FirstFree = %v, %v; want ErrExhausted", got, err)
				}
				return
			}
			if err != nil || got != netip.MustParseAddr(tc.want) {
				t.Fatalf("FirstFree = %v, %v; want %s", got, err, tc.want)
			}
		})
	}
}

func TestFirstFreeOfAFamilyThePoolLacksFails(t *testing.T) {
	_, err := pool(t, v4("203.0.113.0/30")).FirstFree(IPv6, nil)
	if err == nil || errors.Is(err, ErrExhausted) {
		t.Fatalf("FirstFree(IPv6) of an IPv4 pool = %v, want an error other than exhaustion", err)
	}
}

func TestParsePoolRefusesWhatIsNoPool(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entries []ipam.SubnetSpec
	}{
		{"no subnets", nil},
		{"an empty entry", []ipam.SubnetSpec{{}}},
		{"host bits set", []ipam.SubnetSpec{v4("203.0.113.1/30")}},
		{"an IPv6 subnet as ipv4", []ipam.SubnetSpec{v4("fd00:1b::/120")}},
		{"overlapping subnets", []ipam.SubnetSpec{v4("203.0.113.0/24"), v4("203.0.113.128/25")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParsePool(tc.entries); err == nil {
				t.Fatal("ParsePool accepted it")
			}
		})
	}
}

func TestContainsAcceptsEveryAddressOfTheSubnets(t *testing.T) {
	p := pool(t, v4("203.0.113.0/30"), v6("fd00:1b::/64"))
	for addr, want := range map[string]bool{
		"203.0.113.0":          true, // network address: may be requested
		"203.0.113.3":          true, // broadcast address: may be requested
		"203.0.113.4":          false,
		"::ffff:203.0.113.1":   true, // IPv4-mapped form of a member
		"fd00:1b::ffff:ffff:1": true,
		"fd00:1c::":            false,
		"198.51.100.1":         false,
	} {
		if got := p.Contains(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Contains(%s) = %v, want %v", addr, got, want)
		}
	}
	if !p.Has(IPv4) || !p.Has(IPv6) || pool(t, v4("203.0.113.0/30")).Has(IPv6) {
		t.Error("Has reports the wrong families")
	}
}

// FuzzFirstFree checks the search against enumeration on small subnets: the
// result is in the pool, not used, and no lower automatic address is free.
func FuzzFirstFree(f *testing.F) {
	f.Add(uint8(28), uint16(0b1011))
	f.Add(uint8(30), uint16(0xffff))
	f.Fuzz(func(t *testing.T, bits uint8, mask uint16) {
		b := 24 + int(bits)%9 // /24 .. /32
		prefix := netip.PrefixFrom(netip.AddrFrom4([4]byte{203, 0, 113, 0}), b).Masked()
		p := Pool{v4: []netip.Prefix{prefix}}
		first, last := autoRange(prefix)
		var used []netip.Addr
		a := first
		for i := 0; i < 16 && !last.Less(a); i++ {
			if mask&(1<<i) != 0 {
				used = append(used, a)
			}
			a = a.Next()
		}
		got, err := p.FirstFree(IPv4, used)
		var want netip.Addr
		for a := first; !last.Less(a); a = a.Next() {
			if !containsAddr(used, a) {
				want = a
				break
			}
		}
		if !want.IsValid() {
			if !errors.Is(err, ErrExhausted) {
				t.Fatalf("%s used %v: FirstFree = %v, %v; want exhausted", prefix, used, got, err)
			}
			return
		}
		if err != nil || got != want {
			t.Fatalf("%s used %v: FirstFree = %v, %v; want %s", prefix, used, got, err, want)
		}
	})
}

func containsAddr(as []netip.Addr, a netip.Addr) bool {
	for _, x := range as {
		if x == a {
			return true
		}
	}
	return false
}
