package ipam

import (
	"math/bits"
	"net/netip"
)

// uint128 is an address as a 128-bit number: IPv4 addresses live in the low
// 32 bits. netip offers no arithmetic, and IPv6 block offsets (index shifted by
// the block size) do not fit 64 bits.
type uint128 struct{ hi, lo uint64 }

func fromAddr(a netip.Addr) uint128 {
	if a.Is4() {
		b := a.As4()
		return uint128{lo: uint64(b[0])<<24 | uint64(b[1])<<16 | uint64(b[2])<<8 | uint64(b[3])}
	}
	b := a.As16()
	var u uint128
	for i := 0; i < 8; i++ {
		u.hi = u.hi<<8 | uint64(b[i])
		u.lo = u.lo<<8 | uint64(b[i+8])
	}
	return u
}

// toAddr turns u back into an address of the family of like.
func (u uint128) toAddr(like netip.Addr) netip.Addr {
	if like.Is4() {
		return netip.AddrFrom4([4]byte{byte(u.lo >> 24), byte(u.lo >> 16), byte(u.lo >> 8), byte(u.lo)})
	}
	var b [16]byte
	for i := 0; i < 8; i++ {
		b[7-i] = byte(u.hi >> (8 * i))
		b[15-i] = byte(u.lo >> (8 * i))
	}
	return netip.AddrFrom16(b)
}

func (u uint128) add(v uint128) uint128 {
	lo, carry := bits.Add64(u.lo, v.lo, 0)
	hi, _ := bits.Add64(u.hi, v.hi, carry)
	return uint128{hi: hi, lo: lo}
}

func (u uint128) sub(v uint128) uint128 {
	lo, borrow := bits.Sub64(u.lo, v.lo, 0)
	hi, _ := bits.Sub64(u.hi, v.hi, borrow)
	return uint128{hi: hi, lo: lo}
}

// shl shifts left by n < 128 bits.
func (u uint128) shl(n uint) uint128 {
	switch {
	case n == 0:
		return u
	case n >= 64:
		return uint128{hi: u.lo << (n - 64)}
	default:
		return uint128{hi: u.hi<<n | u.lo>>(64-n), lo: u.lo << n}
	}
}

// shr shifts right by n < 128 bits.
func (u uint128) shr(n uint) uint128 {
	switch {
	case n == 0:
		return u
	case n >= 64:
		return uint128{lo: u.hi >> (n - 64)}
	default:
		return uint128{hi: u.hi >> n, lo: u.lo>>n | u.hi<<(64-n)}
	}
}
