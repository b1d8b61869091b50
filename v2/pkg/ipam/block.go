package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Block is an address block: a prefix of each family its pool has, both of
// the same size. Addresses are handed out by offset: a dual-stack pod gets the
// addresses at the same offset in both prefixes.
type Block struct {
	IPv4 netip.Prefix
	IPv6 netip.Prefix
}

// ParseBlock parses an AddressBlock's ipv4 and ipv6 fields ("" when absent).
func ParseBlock(ipv4, ipv6 string) (Block, error) {
	var b Block
	if ipv4 != "" {
		p, err := ParsePrefix(ipv4, false)
		if err != nil {
			return Block{}, fmt.Errorf("ipv4: %w", err)
		}
		b.IPv4 = p
	}
	if ipv6 != "" {
		p, err := ParsePrefix(ipv6, true)
		if err != nil {
			return Block{}, fmt.Errorf("ipv6: %w", err)
		}
		b.IPv6 = p
	}
	switch {
	case !b.IPv4.IsValid() && !b.IPv6.IsValid():
		return Block{}, errors.New("block has neither ipv4 nor ipv6")
	case b.IPv4.IsValid() && b.IPv6.IsValid() && 32-b.IPv4.Bits() != 128-b.IPv6.Bits():
		return Block{}, fmt.Errorf("block %s and %s differ in size", b.IPv4, b.IPv6)
	case b.SizeBits() > MaxBlockSizeBits:
		return Block{}, fmt.Errorf("block %s is larger than 2^%d addresses", b, MaxBlockSizeBits)
	}
	return b, nil
}

// String is the block's prefixes, comma separated.
func (b Block) String() string {
	var parts []string
	if b.IPv4.IsValid() {
		parts = append(parts, b.IPv4.String())
	}
	if b.IPv6.IsValid() {
		parts = append(parts, b.IPv6.String())
	}
	return strings.Join(parts, ",")
}

// SizeBits is log2 of the number of addresses per family.
func (b Block) SizeBits() int {
	if b.IPv4.IsValid() {
		return 32 - b.IPv4.Bits()
	}
	return 128 - b.IPv6.Bits()
}

// Size is the number of addresses per family.
func (b Block) Size() int { return 1 << b.SizeBits() }

// Assignable reports whether the address pair at offset may be given to a
// pod. In IPv4 blocks of 4 or more addresses the network and broadcast
// addresses are not, and in a dual-stack block the IPv6 address at those
// offsets stays unused too, because pods get the same offset in both
// families. This says nothing of a node subnet's NAT loopback: see
// NATLoopbackOffsets.
func (b Block) Assignable(offset int) bool {
	size := b.Size()
	if offset < 0 || offset >= size {
		return false
	}
	if b.IPv4.IsValid() && size >= 4 {
		return offset != 0 && offset != size-1
	}
	return true
}

// Addr returns the addresses at offset; a family the block lacks is the zero
// netip.Addr.
func (b Block) Addr(offset int) (ipv4, ipv6 netip.Addr) {
	off := uint128{lo: uint64(offset)}
	if b.IPv4.IsValid() {
		ipv4 = fromAddr(b.IPv4.Addr()).add(off).toAddr(b.IPv4.Addr())
	}
	if b.IPv6.IsValid() {
		ipv6 = fromAddr(b.IPv6.Addr()).add(off).toAddr(b.IPv6.Addr())
	}
	return ipv4, ipv6
}

// Offset returns the offset of a in the block, and false when a is outside.
func (b Block) Offset(a netip.Addr) (int, bool) {
	a = a.Unmap()
	p := b.IPv6
	if a.Is4() {
		p = b.IPv4
	}
	if !p.IsValid() || !p.Contains(a) {
		return 0, false
	}
	return int(fromAddr(a).sub(fromAddr(p.Addr())).lo), true
}

// NATLoopback is a node's NAT loopback: the source address for twice-NAT
// (hairpin) traffic. It is reserved in the node subnet and never given to a pod.
type NATLoopback struct {
	IPv4 netip.Addr
	IPv6 netip.Addr
}

// String lists the addresses, comma separated, as in the Node annotation.
func (l NATLoopback) String() string {
	var parts []string
	if l.IPv4.IsValid() {
		parts = append(parts, l.IPv4.String())
	}
	if l.IPv6.IsValid() {
		parts = append(parts, l.IPv6.String())
	}
	return strings.Join(parts, ",")
}

// ErrBlockTooSmall is returned when a block cannot hold a node subnet.
var ErrBlockTooSmall = errors.New("block too small for a node subnet")

// NATLoopback returns the NAT loopback of a node subnet: in IPv4 the address
// just below the broadcast address, in IPv6 the last address. An IPv4 block
// must hold at least 4 addresses (network, one pod, loopback, broadcast).
func (b Block) NATLoopback() (NATLoopback, error) {
	if b.SizeBits() < MinNodeSubnetBits {
		return NATLoopback{}, fmt.Errorf("block %s: %w: it needs at least %d addresses", b, ErrBlockTooSmall, 1<<MinNodeSubnetBits)
	}
	var l NATLoopback
	size := b.Size()
	if b.IPv4.IsValid() {
		l.IPv4, _ = b.Addr(size - 2)
	}
	if b.IPv6.IsValid() {
		_, l.IPv6 = b.Addr(size - 1)
	}
	return l, nil
}

// NATLoopbackOffsets are the offsets a node subnet reserves for its NAT
// loopback: size-2 for IPv4 (size-1 is the broadcast address, unassignable
// anyway) and size-1 for IPv6.
func (b Block) NATLoopbackOffsets() []int {
	size := b.Size()
	var offs []int
	if b.IPv4.IsValid() {
		offs = append(offs, size-2)
	}
	if b.IPv6.IsValid() {
		offs = append(offs, size-1)
	}
	return offs
}
