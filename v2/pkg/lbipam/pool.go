package lbipam

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"slices"

	"github.com/vcoil/vcoil/v2/pkg/ipam"
)

// Family is an IP address family.
type Family int

const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string {
	if f == IPv6 {
		return "IPv6"
	}
	return "IPv4"
}

// FamilyOf is the family of a.
func FamilyOf(a netip.Addr) Family {
	if a.Is6() && !a.Is4In6() {
		return IPv6
	}
	return IPv4
}

// ErrExhausted means every address of a pool's family is in use.
var ErrExhausted = errors.New("every address is in use")

// Pool is the addresses of a LoadBalancer AddressPool: every address of its
// subnets, per family, the subnets in the order of the pool's spec. Block
// sizes play no part: a LoadBalancer pool gives single addresses.
type Pool struct {
	v4, v6 []netip.Prefix
}

// ParsePool reads a LoadBalancer AddressPool's subnet entries by
// ValidatePool's rules; the error is the first problem. Unlike a Pods pool
// (ipam.ParsePool) it knows no block size, so any subnet size is fine (an
// IPv6 /64 too), and entries need not pair families: each address is given
// on its own.
func ParsePool(entries []ipam.SubnetSpec) (Pool, error) {
	sets, errs := ValidatePool(entries)
	if len(errs) > 0 {
		return Pool{}, errs[0]
	}
	var p Pool
	for _, set := range sets {
		if set.IPv4.IsValid() {
			p.v4 = append(p.v4, set.IPv4)
		}
		if set.IPv6.IsValid() {
			p.v6 = append(p.v6, set.IPv6)
		}
	}
	return p, nil
}

// ValidatePool checks a LoadBalancer pool's subnet entries and returns
// them, keeping every problem with the field it concerns (for the
// webhook). Its addresses are given one at a time and per family, so the rules that make
// blocks fit and pair up (blockSizeBits, equal host bits in a dual-stack
// entry, the same families in every entry, the block count) do not apply:
// each entry needs a subnet, every subnet must parse in canonical form, and
// no two may overlap.
func ValidatePool(entries []ipam.SubnetSpec) ([]ipam.SubnetSet, []*ipam.FieldError) {
	var errs []*ipam.FieldError
	fail := func(field, format string, args ...any) {
		errs = append(errs, &ipam.FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if len(entries) == 0 {
		fail("subnets", "at least one subnet is required")
	}
	sets := make([]ipam.SubnetSet, 0, len(entries))
	for i, s := range entries {
		field := fmt.Sprintf("subnets[%d]", i)
		if s.IPv4 == nil && s.IPv6 == nil {
			fail(field, "needs ipv4, ipv6 or both")
			continue
		}
		var set ipam.SubnetSet
		ok := true
		parse := func(family string, text *string, ipv6 bool) netip.Prefix {
			if text == nil {
				return netip.Prefix{}
			}
			p, err := ipam.ParsePrefix(*text, ipv6)
			if err != nil {
				fail(field+"."+family, "%v", err)
				ok = false
			}
			return p
		}
		set.IPv4 = parse("ipv4", s.IPv4, false)
		set.IPv6 = parse("ipv6", s.IPv6, true)
		if !ok {
			continue
		}
		for j, other := range sets {
			if set.IPv4.IsValid() && other.IPv4.IsValid() && set.IPv4.Overlaps(other.IPv4) {
				fail(field+".ipv4", "overlaps ipv4 of subnets[%d] (%s)", j, other.IPv4)
			}
			if set.IPv6.IsValid() && other.IPv6.IsValid() && set.IPv6.Overlaps(other.IPv6) {
				fail(field+".ipv6", "overlaps ipv6 of subnets[%d] (%s)", j, other.IPv6)
			}
		}
		sets = append(sets, set)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return sets, nil
}

// Subnets are the pool's subnets of family f, in order.
func (p Pool) Subnets(f Family) []netip.Prefix {
	if f == IPv6 {
		return p.v6
	}
	return p.v4
}

// Has says whether the pool has subnets of family f.
func (p Pool) Has(f Family) bool { return len(p.Subnets(f)) > 0 }

// Contains says whether a is an address of the pool. Any address of a
// subnet counts, also an IPv4 network or broadcast address: a Service may
// ask for one, only the automatic choice skips them.
func (p Pool) Contains(a netip.Addr) bool {
	a = a.Unmap()
	for _, s := range p.Subnets(FamilyOf(a)) {
		if s.Contains(a) {
			return true
		}
	}
	return false
}

// Size is the number of addresses the pool gives automatically, over both
// families, saturating at math.MaxInt64 (an IPv6 /64 alone holds 2^64).
func (p Pool) Size() int64 {
	var n int64
	for _, s := range append(slices.Clip(p.v4), p.v6...) {
		n = addSat(n, subnetSize(s))
	}
	return n
}

// subnetSize is the number of automatically given addresses of s: all of
// them, except the network and broadcast addresses of an IPv4 subnet
// shorter than /31 (hosts on the subnet would take them for what they are).
func subnetSize(s netip.Prefix) int64 {
	host := s.Addr().BitLen() - s.Bits()
	if host >= 63 {
		return math.MaxInt64
	}
	n := int64(1) << host
	if s.Addr().Is4() && host >= 2 {
		n -= 2
	}
	return n
}

func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// autoRange is the first and last address of s given automatically.
func autoRange(s netip.Prefix) (first, last netip.Addr) {
	first, last = s.Addr(), lastAddr(s)
	if s.Addr().Is4() && s.Bits() < 31 {
		first, last = first.Next(), last.Prev()
	}
	return first, last
}

// lastAddr is the highest address of s.
func lastAddr(s netip.Prefix) netip.Addr {
	b := s.Addr().AsSlice()
	for i := s.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// FirstFree is the first address of family f, in the order of the pool's
// subnets and from each subnet's lowest address up, that is not in used.
// used needs not be sorted nor limited to the pool. The search costs
// O(k log k) in the number k of used addresses, whatever the subnets' size.
func (p Pool) FirstFree(f Family, used []netip.Addr) (netip.Addr, error) {
	subnets := p.Subnets(f)
	if len(subnets) == 0 {
		return netip.Addr{}, fmt.Errorf("the pool has no %s subnet", f)
	}
	sorted := make([]netip.Addr, 0, len(used))
	for _, a := range used {
		if a = a.Unmap(); FamilyOf(a) == f {
			sorted = append(sorted, a)
		}
	}
	if !slices.IsSortedFunc(sorted, netip.Addr.Compare) { // Table.Used is sorted already
		slices.SortFunc(sorted, netip.Addr.Compare)
	}
	for _, s := range subnets {
		first, last := autoRange(s)
		cand := first
		i, _ := slices.BinarySearchFunc(sorted, first, netip.Addr.Compare)
		for ; i < len(sorted) && sorted[i] == cand; i++ {
			cand = cand.Next()
			if !cand.IsValid() {
				break // past the top of the address space
			}
			// Skip duplicates in used.
			for i+1 < len(sorted) && sorted[i+1] == sorted[i] {
				i++
			}
		}
		if cand.IsValid() && !last.Less(cand) {
			return cand, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%s addresses of the pool: %w", f, ErrExhausted)
}
