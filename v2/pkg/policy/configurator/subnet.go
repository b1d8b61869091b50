package configurator

import (
	"net/netip"
)

// SubtractSubnets returns disjoint prefixes, sorted by address, that together
// hold exactly the addresses of network that are in none of except.
//
// GenerateRules (docs/background.md#generaterules) uses subtraction instead
// of overlapping Permit and Deny rules so that a rule list stays "Permit
// rules, then one Deny", whose meaning does not depend on order. Prefixes of
// the other family, or that do not overlap network, are ignored. The result
// has at most len(except) × (prefix length difference) prefixes: each except
// is peeled off by halving the prefix around it.
func SubtractSubnets(network netip.Prefix, except []netip.Prefix) []netip.Prefix {
	network = network.Masked()
	var relevant []netip.Prefix
	for _, e := range except {
		e = e.Masked()
		if e.IsValid() && e.Addr().Is4() == network.Addr().Is4() && e.Overlaps(network) {
			relevant = append(relevant, e)
		}
	}
	return subtract(network, relevant, nil)
}

func subtract(p netip.Prefix, except []netip.Prefix, out []netip.Prefix) []netip.Prefix {
	overlapping := false
	for _, e := range except {
		if !e.Overlaps(p) {
			continue
		}
		if e.Bits() <= p.Bits() {
			// e holds all of p.
			return out
		}
		overlapping = true
	}
	if !overlapping {
		return append(out, p)
	}
	lo, hi := halves(p)
	out = subtract(lo, except, out)
	return subtract(hi, except, out)
}

// halves splits p (which is not a single address) into its two halves.
func halves(p netip.Prefix) (netip.Prefix, netip.Prefix) {
	bits := p.Bits()
	lo := netip.PrefixFrom(p.Addr(), bits+1)
	b := p.Addr().AsSlice()
	b[bits/8] |= 0x80 >> (bits % 8)
	a, _ := netip.AddrFromSlice(b)
	return lo, netip.PrefixFrom(a, bits+1)
}
