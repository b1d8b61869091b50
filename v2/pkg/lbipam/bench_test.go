package lbipam

import (
	"net/netip"
	"strconv"
	"testing"

	"github.com/vcoil/vcoil/v2/pkg/ipam"
)

// BenchmarkAllocateNext measures what the controller does for one automatic
// allocation when n addresses are held: read the used set from the table
// and search the pool's first free address (an IPv4 /16 and an IPv6 /64
// pool, both filled from their start).
func BenchmarkAllocateNext(b *testing.B) {
	for _, tc := range []struct {
		name   string
		subnet ipam.SubnetSpec
		family Family
	}{
		{"IPv4 /16", v4("198.18.0.0/16"), IPv4},
		{"IPv6 /64", v6("fd00:1b::/64"), IPv6},
	} {
		for _, n := range []int{100, 10000} {
			b.Run(tc.name+"/held="+itoa(n), func(b *testing.B) {
				p, err := ParsePool([]ipam.SubnetSpec{tc.subnet})
				if err != nil {
					b.Fatal(err)
				}
				table := NewTable()
				var used []netip.Addr
				for i := 0; i < n; i++ {
					a, err := p.FirstFree(tc.family, used)
					if err != nil {
						b.Fatal(err)
					}
					table.Assign(a, "ns/svc-"+itoa(i))
					used = append(used, a)
				}
				b.ReportAllocs()
				for b.Loop() {
					if _, err := p.FirstFree(tc.family, table.Used(tc.family)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
