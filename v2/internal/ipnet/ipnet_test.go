package ipnet

import (
	"net"
	"net/netip"
	"testing"
)

func TestPrefix(t *testing.T) {
	for _, tc := range []struct {
		in   *net.IPNet
		want string
		ok   bool
	}{
		{nil, "", false},
		{&net.IPNet{IP: net.IP{1, 2}, Mask: net.CIDRMask(8, 32)}, "", false},
		{&net.IPNet{IP: net.ParseIP("198.18.32.1"), Mask: net.CIDRMask(32, 32)}, "198.18.32.1/32", true},
		{&net.IPNet{IP: net.ParseIP("198.18.32.7").To4(), Mask: net.CIDRMask(24, 32)}, "198.18.32.0/24", true},
		{&net.IPNet{IP: net.ParseIP("fd00::1"), Mask: net.CIDRMask(128, 128)}, "fd00::1/128", true},
	} {
		got, ok := Prefix(tc.in)
		if ok != tc.ok || (ok && got != netip.MustParsePrefix(tc.want)) {
			t.Errorf("Prefix(%v) = %v, %v; want %s, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
