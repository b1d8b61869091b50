// Package ipnet converts the net.IPNet that netlink returns into netip
// types, the one form vcoil's packages compare and key maps with.
package ipnet

import (
	"net"
	"net/netip"
)

// Prefix is n as a masked netip.Prefix, an IPv4 address (also one netlink
// gave in 16 bytes) as IPv4. It is false for a nil n or an address of
// another length.
func Prefix(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones).Masked(), true
}
