package ipam

import (
	"errors"
	"net/netip"
	"testing"
)

func block(t testing.TB, v4, v6 string) Block {
	t.Helper()
	b, err := ParseBlock(v4, v6)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNATLoopbackIsTheLastUnicastAddress(t *testing.T) {
	cases := []struct {
		name       string
		v4, v6     string
		want4      string
		want6      string
		wantErr    error
		wantOffset []int
	}{
		{"IPv4 /27: below the broadcast address", "10.2.0.32/27", "", "10.2.0.62", "", nil, []int{30}},
		{"IPv4 /30: the smallest node subnet", "10.2.0.4/30", "", "10.2.0.6", "", nil, []int{2}},
		{"IPv6 /123: the last address", "", "fd01::20/123", "", "fd01::3f", nil, []int{31}},
		{"dual stack", "10.2.0.0/27", "fd01::/123", "10.2.0.30", "fd01::1f", nil, []int{30, 31}},
		{"IPv4 /31 is too small", "10.2.0.0/31", "", "", "", ErrBlockTooSmall, nil},
		{"IPv6 /128 is too small", "", "fd01::1/128", "", "", ErrBlockTooSmall, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := block(t, tc.v4, tc.v6)
			l, err := b.NATLoopback()
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := addrString(l.IPv4); got != tc.want4 {
				t.Errorf("IPv4 loopback = %q, want %q", got, tc.want4)
			}
			if got := addrString(l.IPv6); got != tc.want6 {
				t.Errorf("IPv6 loopback = %q, want %q", got, tc.want6)
			}
			offs := b.NATLoopbackOffsets()
			if len(offs) != len(tc.wantOffset) {
				t.Fatalf("offsets = %v, want %v", offs, tc.wantOffset)
			}
			for i := range offs {
				if offs[i] != tc.wantOffset[i] {
					t.Fatalf("offsets = %v, want %v", offs, tc.wantOffset)
				}
			}
		})
	}
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

func TestAssignableExcludesNetworkAndBroadcastOfIPv4Blocks(t *testing.T) {
	cases := []struct {
		name   string
		v4, v6 string
		want   []bool // by offset
	}{
		{"IPv4 /30", "10.0.0.0/30", "", []bool{false, true, true, false}},
		{"IPv4 /31 has no network address", "10.0.0.0/31", "", []bool{true, true}},
		{"IPv4 /32", "10.0.0.7/32", "", []bool{true}},
		{"IPv6 /126 uses every address", "", "fd00::/126", []bool{true, true, true, true}},
		{"dual stack follows IPv4", "10.0.0.0/30", "fd00::/126", []bool{false, true, true, false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := block(t, tc.v4, tc.v6)
			for off, want := range tc.want {
				if got := b.Assignable(off); got != want {
					t.Errorf("Assignable(%d) = %v, want %v", off, got, want)
				}
			}
			if b.Assignable(-1) || b.Assignable(len(tc.want)) {
				t.Errorf("offsets outside the block are assignable")
			}
		})
	}
}

func TestAddrAndOffsetRoundTrip(t *testing.T) {
	b := block(t, "10.2.0.32/27", "fd01:203:405:607::20/123")
	for off := 0; off < b.Size(); off++ {
		v4, v6 := b.Addr(off)
		o4, ok4 := b.Offset(v4)
		o6, ok6 := b.Offset(v6)
		if !ok4 || !ok6 || o4 != off || o6 != off {
			t.Fatalf("offset %d: Addr = %s,%s; Offset = %d,%v %d,%v", off, v4, v6, o4, ok4, o6, ok6)
		}
	}
	if _, ok := b.Offset(netip.MustParseAddr("10.2.0.64")); ok {
		t.Fatal("an address after the block has an offset")
	}
	if _, ok := b.Offset(netip.MustParseAddr("::ffff:10.2.0.33")); !ok {
		t.Fatal("an IPv4-mapped address of the block has no offset")
	}
}

func TestParseBlockRejectsBadBlocks(t *testing.T) {
	for _, tc := range []struct{ name, v4, v6 string }{
		{"nothing", "", ""},
		{"host bits", "10.0.0.1/30", ""},
		{"unequal sizes", "10.0.0.0/30", "fd00::/120"},
		{"too large", "10.0.0.0/8", ""},
		{"wrong family", "fd00::/120", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if b, err := ParseBlock(tc.v4, tc.v6); err == nil {
				t.Fatalf("ParseBlock accepted %s", b)
			}
		})
	}
}

func FuzzNodeSubnet(f *testing.F) {
	f.Add(uint32(0x0a020020), uint8(5), true)
	f.Add(uint32(0), uint8(2), false)
	f.Fuzz(func(t *testing.T, base uint32, bits uint8, dual bool) {
		bits = bits%(MaxBlockSizeBits+1-MinNodeSubnetBits) + MinNodeSubnetBits
		a := netip.AddrFrom4([4]byte{byte(base >> 24), byte(base >> 16), byte(base >> 8), byte(base)})
		b := Block{IPv4: netip.PrefixFrom(a, 32-int(bits)).Masked()}
		if dual {
			b.IPv6 = netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 15: byte(base)}), 128-int(bits)).Masked()
		}
		l, err := b.NATLoopback()
		if err != nil {
			t.Fatal(err)
		}
		// The loopback lies in the block, at a reserved offset, and the
		// block still has an assignable address that is not a loopback.
		reserved := map[int]bool{}
		for _, o := range b.NATLoopbackOffsets() {
			reserved[o] = true
		}
		for _, addr := range []netip.Addr{l.IPv4, l.IPv6} {
			if !addr.IsValid() {
				continue
			}
			off, ok := b.Offset(addr)
			if !ok || !reserved[off] {
				t.Fatalf("loopback %s of %s is not at a reserved offset (%d, %v)", addr, b, off, ok)
			}
		}
		free := 0
		for off := 0; off < b.Size(); off++ {
			if b.Assignable(off) && !reserved[off] {
				free++
			}
		}
		if free < 1 {
			t.Fatalf("node subnet %s leaves no address for pods", b)
		}
		if b.Assignable(b.Size()-1) || b.Assignable(0) {
			t.Fatalf("network or broadcast address of %s is assignable", b)
		}
	})
}
