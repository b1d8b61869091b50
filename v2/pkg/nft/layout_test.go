package nft

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"
)

// RangeText writes the shortest of nft's forms, and ParseRange reads each
// back to the same addresses.
func TestRangeTextRoundTrips(t *testing.T) {
	for _, tc := range []struct{ lo, hi, text string }{
		{"10.0.0.1", "10.0.0.1", "10.0.0.1"},
		{"10.1.0.0", "10.1.255.255", "10.1.0.0/16"},
		{"0.0.0.0", "255.255.255.255", "0.0.0.0/0"},
		{"10.0.0.1", "10.0.0.2", "10.0.0.1-10.0.0.2"},
		{"10.0.0.0", "10.0.0.2", "10.0.0.0-10.0.0.2"},
		{"fd00:2::", "fd00:2::ffff:ffff:ffff:ffff", "fd00:2::/64"},
		{"::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "::/0"},
		{"fd00::1", "fd00::3", "fd00::1-fd00::3"},
	} {
		lo, hi := netip.MustParseAddr(tc.lo), netip.MustParseAddr(tc.hi)
		if got := RangeText(lo, hi); got != tc.text {
			t.Errorf("RangeText(%s, %s) = %q, want %q", lo, hi, got, tc.text)
		}
		if l, h, err := ParseRange(tc.text); err != nil || l != lo || h != hi {
			t.Errorf("ParseRange(%q) = %s, %s, %v; want %s, %s", tc.text, l, h, err, lo, hi)
		}
	}
	if l, h, err := ParseRange("10.1.2.3/16"); err != nil || l != netip.MustParseAddr("10.1.0.0") || h != netip.MustParseAddr("10.1.255.255") {
		t.Errorf("ParseRange of an unmasked prefix = %s, %s, %v; want its network", l, h, err)
	}
	for _, bad := range []string{"", "10.0.0.300", "10.0.0.2-10.0.0.1", "10.0.0.1-fd00::1", "10.0.0.1-x"} {
		if _, _, err := ParseRange(bad); err == nil {
			t.Errorf("ParseRange(%q) accepted", bad)
		}
	}
	if _, _, err := parseRange("fd00::/64", IPv4Interval); err == nil {
		t.Error("parseRange took an IPv6 prefix for an IPv4 interval set")
	}
}

// An ifname field holds one exact name of at most 15 bytes, bare or
// quoted, and reads back bare.
func TestIfNameFieldsRoundTrip(t *testing.T) {
	l := Layout{Key: []Field{IfName, IPv4Interval}}
	for _, name := range []string{"vcoil0123456789", `"vcoil0123456789"`} {
		raw, err := l.encode([]string{name, "10.0.0.0/24"}, nil)
		if err != nil {
			t.Fatalf("encode %s: %v", name, err)
		}
		elems, err := l.decode(raw)
		if err != nil || len(elems) != 1 || elems[0].Key[0] != "vcoil0123456789" || elems[0].Key[1] != "10.0.0.0/24" {
			t.Errorf("decode of %s: %+v %v", name, elems, err)
		}
	}
	for _, bad := range []string{"", `""`, "vcoil0123456789a", "vcoil*"} {
		if _, err := l.encode([]string{bad, "10.0.0.1"}, nil); err == nil {
			t.Errorf("encode accepted interface name %q", bad)
		}
	}
}

// serviceMapOps are n element changes of a DNAT map as the service
// renderer writes them (a service's address, protocol and port to an
// endpoint's address and port).
func serviceMapOps(n int) []ElementOp {
	ops := make([]ElementOp, n)
	for i := range ops {
		ops[i] = ElementOp{Set: "endpoints", Key: []string{fmt.Sprintf("10.96.%d.%d", i/250, i%250+1), "tcp", "80"},
			Value: []string{fmt.Sprintf("10.1.%d.%d", i/250, i%250+1), "8080"}}
	}
	return ops
}

var serviceMapLayout = func(string) (Layout, error) {
	return Layout{Key: []Field{IPv4Addr, Proto, Port}, Value: []Field{IPv4Addr, Port}}, nil
}

// An endpoint change writes a few elements: their encoding takes bytes in
// proportion, not a whole arena chunk per set (64 KiB allocated and
// cleared for every change, under churn most of vcoild's garbage).
func TestASmallChangeEncodesWithoutAWholeChunk(t *testing.T) {
	ops := serviceMapOps(3)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const runs = 100
	for range runs {
		if _, err := encodeOps(serviceMapLayout, ops); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 4<<10 {
		t.Errorf("encoding 3 elements allocated %d bytes", per)
	}
	elems, err := encodeOps(serviceMapLayout, serviceMapOps(3000))
	if err != nil || len(elems) != 3000 {
		t.Fatalf("3,000 elements: %d encoded, %v", len(elems), err)
	}
}

func BenchmarkEncodeOps(b *testing.B) {
	for _, n := range []int{3, 1000} {
		ops := serviceMapOps(n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := encodeOps(serviceMapLayout, ops); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
