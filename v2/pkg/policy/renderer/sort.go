package renderer

import (
	"net/netip"
	"slices"
)

// SortKey is a rule encoded so that comparing keys word by word is
// Rule.Compare. Hot loops that compare the same rules many times (sorting,
// merging sorted lists) compare keys instead: a Rule is large and its
// networks take several branches to compare.
type SortKey [8]uint64

// SortKey returns r's key.
func (r *Rule) SortKey() SortKey {
	var k SortKey
	k[0], k[1], k[2] = networkKey(r.SrcNetwork)
	k[3], k[4], k[5] = networkKey(r.DstNetwork)
	k[6] = uint64(protocolRank(r.Protocol))<<48 |
		uint64(r.DstPort.Last-r.DstPort.First)<<32 | uint64(r.DstPort.First)<<16 |
		uint64(r.SrcPort.Last-r.SrcPort.First)
	k[7] = uint64(r.SrcPort.First)<<8 | uint64(r.Action)
	return k
}

// Compare orders keys as Rule.Compare orders their rules.
func (k *SortKey) Compare(o *SortKey) int {
	for i := range k {
		if k[i] != o[i] {
			if k[i] < o[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// networkKey follows CompareNetworks: any last, IPv4 before IPv6, longer
// prefixes first, then the address.
func networkKey(n netip.Prefix) (uint64, uint64, uint64) {
	if !n.IsValid() {
		return 1 << 63, 0, 0
	}
	a := n.Addr()
	var head uint64
	if !a.Is4() {
		head = 1 << 62
	}
	head |= uint64(255 - n.Bits())
	b := a.As16()
	var hi, lo uint64
	for i := range 8 {
		hi = hi<<8 | uint64(b[i])
		lo = lo<<8 | uint64(b[8+i])
	}
	return head, hi, lo
}

// SortRules sorts rules by Rule.Compare, as slices.SortFunc(rules,
// Rule.Compare) does but faster on long lists: it sorts pointer-free keys and
// then moves each rule once (a Rule holds pointers, inside netip.Addr, so
// every move of a rule costs a GC write barrier).
func SortRules(rules []Rule) {
	if len(rules) < 12 {
		for i := 1; i < len(rules); i++ {
			for j := i; j > 0 && CompareRules(&rules[j], &rules[j-1]) < 0; j-- {
				rules[j], rules[j-1] = rules[j-1], rules[j]
			}
		}
		return
	}
	type indexed struct {
		key SortKey
		i   int
	}
	keys := make([]indexed, len(rules))
	for i := range rules {
		keys[i] = indexed{rules[i].SortKey(), i}
	}
	slices.SortFunc(keys, func(a, b indexed) int { return a.key.Compare(&b.key) })
	sorted := make([]Rule, len(rules))
	for i := range keys {
		sorted[i] = rules[keys[i].i]
	}
	copy(rules, sorted)
}
