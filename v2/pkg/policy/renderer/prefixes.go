package renderer

import (
	"net/netip"
	"slices"
)

// AggregatePrefixes returns the fewest disjoint prefixes, sorted by
// address, that together hold exactly the addresses of ps: contained
// prefixes are dropped and two halves of one prefix are merged into it,
// repeatedly. A ClusterNetworkPolicy peer that selects many pods gives one
// rule per address; their addresses are mostly consecutive, so that this
// turns a thousand rules into a few dozen.
func AggregatePrefixes(ps []netip.Prefix) []netip.Prefix {
	sorted := make([]netip.Prefix, 0, len(ps))
	for _, p := range ps {
		if p.IsValid() {
			sorted = append(sorted, p.Masked())
		}
	}
	slices.SortFunc(sorted, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	var out []netip.Prefix
	for _, p := range sorted {
		if n := len(out); n > 0 && out[n-1].Bits() <= p.Bits() && out[n-1].Contains(p.Addr()) {
			continue
		}
		out = append(out, p)
		for n := len(out); n >= 2; n = len(out) {
			a, b := out[n-2], out[n-1]
			if a.Bits() != b.Bits() || a.Bits() == 0 || a.Addr().Is4() != b.Addr().Is4() {
				break
			}
			pa, _ := a.Addr().Prefix(a.Bits() - 1)
			pb, _ := b.Addr().Prefix(b.Bits() - 1)
			if pa != pb {
				break
			}
			out = append(out[:n-2], pa)
		}
	}
	return out
}
