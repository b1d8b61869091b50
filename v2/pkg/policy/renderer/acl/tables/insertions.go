package tables

import (
	"net/netip"
	"slices"

	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// insertions are the rules CombineRules put into one pod's local table, per
// peer address, kept sorted by address so that the table is built by merging
// instead of sorting. A nil *insertions has none.
type insertions struct {
	entries []insertion // sorted by netip.Addr.Compare, the order of their host networks
	size    int         // number of rules
}

type insertion struct {
	addr  netip.Addr
	rules []renderer.Rule
}

func compareInsertion(e insertion, a netip.Addr) int { return e.addr.Compare(a) }

func (in *insertions) len() int {
	if in == nil {
		return 0
	}
	return len(in.entries)
}

func (in *insertions) get(x netip.Addr) []renderer.Rule {
	if in == nil {
		return nil
	}
	if i, ok := slices.BinarySearchFunc(in.entries, x, compareInsertion); ok {
		return in.entries[i].rules
	}
	return nil
}

// set replaces the insertions for x; nil removes them.
func (in *insertions) set(x netip.Addr, rules []renderer.Rule) {
	i, ok := slices.BinarySearchFunc(in.entries, x, compareInsertion)
	switch {
	case ok && rules == nil:
		in.size -= len(in.entries[i].rules)
		in.entries = slices.Delete(in.entries, i, i+1)
	case ok:
		in.size += len(rules) - len(in.entries[i].rules)
		in.entries[i].rules = rules
	case rules != nil:
		in.size += len(rules)
		in.entries = slices.Insert(in.entries, i, insertion{addr: x, rules: rules})
	}
}
