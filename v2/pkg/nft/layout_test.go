package nft

import (
	"net/netip"
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
