package vpp

import (
	"net/netip"

	"go.fd.io/govpp/binapi/fib_types"
	"go.fd.io/govpp/binapi/interface_types"
	"go.fd.io/govpp/binapi/ip_types"
)

// Conversions between net/netip and VPP's types.

func vppAddress(a netip.Addr) ip_types.Address {
	return ip_types.NewAddress(a.AsSlice())
}

func fromVPPAddress(a ip_types.Address) netip.Addr {
	if a.Af == ip_types.ADDRESS_IP6 {
		return netip.AddrFrom16(a.Un.GetIP6())
	}
	return netip.AddrFrom4(a.Un.GetIP4())
}

func fromVPPPrefix(p ip_types.Prefix) netip.Prefix {
	return netip.PrefixFrom(fromVPPAddress(p.Address), int(p.Len))
}

func hostPrefix(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

func nhProto(a netip.Addr) fib_types.FibPathNhProto {
	if a.Is4() {
		return fib_types.FIB_API_PATH_NH_PROTO_IP4
	}
	return fib_types.FIB_API_PATH_NH_PROTO_IP6
}

// viaPath is a path through sw_if_index to the next hop nh.
func viaPath(swIfIndex uint32, nh netip.Addr) fib_types.FibPath {
	p := fib_types.FibPath{SwIfIndex: swIfIndex, Weight: 1, Proto: nhProto(nh), Type: fib_types.FIB_API_PATH_TYPE_NORMAL}
	if nh.Is4() {
		p.Nh.Address.SetIP4(nh.As4())
	} else {
		p.Nh.Address.SetIP6(nh.As16())
	}
	return p
}

// dropPath discards what the route matches.
func dropPath(family netip.Addr) fib_types.FibPath {
	return fib_types.FibPath{SwIfIndex: ^uint32(0), Weight: 1, Proto: nhProto(family), Type: fib_types.FIB_API_PATH_TYPE_DROP}
}

func index(i uint32) interface_types.InterfaceIndex { return interface_types.InterfaceIndex(i) }

// addrs lists the pod's addresses, IPv4 first.
func addrsOf(v4, v6 netip.Addr) []netip.Addr {
	var a []netip.Addr
	if v4.IsValid() {
		a = append(a, v4)
	}
	if v6.IsValid() {
		a = append(a, v6)
	}
	return a
}
