package lbipam

import (
	"net/netip"
	"slices"
)

// Table records which Service (by "namespace/name") holds which address.
// One address has at most one holder: that is how vcoil never gives an
// address to two Services. It is not safe for concurrent use; its owner
// serialises access.
type Table struct {
	holder map[netip.Addr]string
	held   map[string][]netip.Addr
	// used is every held address per family, kept sorted, so that a
	// search for a free address costs no sort (see BenchmarkAllocateNext).
	used map[Family][]netip.Addr
}

// NewTable returns an empty table.
func NewTable() *Table {
	return &Table{holder: map[netip.Addr]string{}, held: map[string][]netip.Addr{}, used: map[Family][]netip.Addr{}}
}

// Holder is the Service holding a, if any.
func (t *Table) Holder(a netip.Addr) (string, bool) {
	h, ok := t.holder[a.Unmap()]
	return h, ok
}

// Held is the addresses holder holds, sorted (IPv4 first).
func (t *Table) Held(holder string) []netip.Addr { return slices.Clone(t.held[holder]) }

// Assign gives a to holder and reports whether it could: false when another
// holder has it.
func (t *Table) Assign(a netip.Addr, holder string) bool {
	a = a.Unmap()
	switch h, ok := t.holder[a]; {
	case ok && h == holder:
		return true
	case ok:
		return false
	}
	t.holder[a] = holder
	f := FamilyOf(a)
	i, _ := slices.BinarySearchFunc(t.used[f], a, netip.Addr.Compare)
	t.used[f] = slices.Insert(t.used[f], i, a)
	addrs := append(t.held[holder], a)
	slices.SortFunc(addrs, netip.Addr.Compare)
	t.held[holder] = addrs
	return true
}

// Keep releases every address of holder not in keep and returns them.
func (t *Table) Keep(holder string, keep []netip.Addr) []netip.Addr {
	var kept, released []netip.Addr
	for _, a := range t.held[holder] {
		if slices.Contains(keep, a) {
			kept = append(kept, a)
		} else {
			released = append(released, a)
			delete(t.holder, a)
			f := FamilyOf(a)
			if i, found := slices.BinarySearchFunc(t.used[f], a, netip.Addr.Compare); found {
				t.used[f] = slices.Delete(t.used[f], i, i+1)
			}
		}
	}
	if len(kept) == 0 {
		delete(t.held, holder)
	} else {
		t.held[holder] = kept
	}
	return released
}

// Release frees every address of holder and returns them.
func (t *Table) Release(holder string) []netip.Addr { return t.Keep(holder, nil) }

// Used is every held address of family f, sorted, for Pool.FirstFree.
func (t *Table) Used(f Family) []netip.Addr { return slices.Clone(t.used[f]) }

// Len is the number of held addresses.
func (t *Table) Len() int { return len(t.holder) }
