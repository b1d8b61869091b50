package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

const (
	// MaxBlockSizeBits bounds blocks to 65,536 addresses: a node never holds
	// more pods, and the node allocator keeps one bit per address.
	MaxBlockSizeBits = 16

	// MaxBlocks bounds the blocks of one pool so that indexes and counts stay
	// exact in int64 (an IPv6 /48 of /123 blocks would hold 2^75).
	MaxBlocks = int64(1) << 62

	// MinNodeSubnetBits is the smallest blockSizeBits of the default pool: its
	// blocks hold node subnets, whose IPv4 network, NAT loopback and broadcast
	// addresses leave one address for a pod.
	MinNodeSubnetBits = 2
)

// SubnetSpec is one AddressPool subnet entry as written by a user: an IPv4
// CIDR, an IPv6 CIDR or both. A nil field is absent.
type SubnetSpec struct {
	IPv4 *string
	IPv6 *string
}

// SubnetSet is a parsed subnet entry. A family that is absent is the zero
// netip.Prefix (IsValid() is false).
type SubnetSet struct {
	IPv4 netip.Prefix
	IPv6 netip.Prefix
}

// HostBits is the number of host bits of the entry; both families have the
// same number in a valid dual-stack entry.
func (s SubnetSet) HostBits() int {
	if s.IPv4.IsValid() {
		return 32 - s.IPv4.Bits()
	}
	return 128 - s.IPv6.Bits()
}

// families describes which families an entry has, for messages.
func (s SubnetSet) families() string {
	switch {
	case s.IPv4.IsValid() && s.IPv6.IsValid():
		return "ipv4 and ipv6"
	case s.IPv4.IsValid():
		return "ipv4 only"
	default:
		return "ipv6 only"
	}
}

// Pool is a valid AddressPool spec: its subnets are carved, in order, into
// blocks of 2^BlockSizeBits addresses of each family they have.
type Pool struct {
	BlockSizeBits int
	Subnets       []SubnetSet
}

// FieldError is one problem with a pool spec. Field is a path relative to the
// spec, such as "subnets[2].ipv6".
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// ParsePool validates a pool spec on its own (not against other pools) and
// returns it parsed, or every problem found, each naming its field.
func ParsePool(blockSizeBits int, subnets []SubnetSpec) (Pool, []*FieldError) {
	var errs []*FieldError
	fail := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}

	bitsOK := blockSizeBits >= 0 && blockSizeBits <= MaxBlockSizeBits
	if !bitsOK {
		fail("blockSizeBits", "%d is out of range: blocks hold 2^blockSizeBits addresses, with 0 <= blockSizeBits <= %d", blockSizeBits, MaxBlockSizeBits)
	}
	if len(subnets) == 0 {
		fail("subnets", "at least one subnet is required")
	}

	pool := Pool{BlockSizeBits: blockSizeBits, Subnets: make([]SubnetSet, 0, len(subnets))}
	var total int64
	for i, spec := range subnets {
		field := fmt.Sprintf("subnets[%d]", i)
		set, entryOK := SubnetSet{}, true
		if spec.IPv4 == nil && spec.IPv6 == nil {
			fail(field, "needs ipv4, ipv6 or both")
			continue
		}
		if spec.IPv4 != nil {
			p, err := ParsePrefix(*spec.IPv4, false)
			if err != nil {
				fail(field+".ipv4", "%v", err)
				entryOK = false
			}
			set.IPv4 = p
		}
		if spec.IPv6 != nil {
			p, err := ParsePrefix(*spec.IPv6, true)
			if err != nil {
				fail(field+".ipv6", "%v", err)
				entryOK = false
			}
			set.IPv6 = p
		}
		if !entryOK {
			continue
		}
		if set.IPv4.IsValid() && set.IPv6.IsValid() && 32-set.IPv4.Bits() != 128-set.IPv6.Bits() {
			fail(field, "dual-stack subnets must have the same number of host bits so that their blocks pair up: ipv4 %s has %d, ipv6 %s has %d",
				set.IPv4, 32-set.IPv4.Bits(), set.IPv6, 128-set.IPv6.Bits())
			continue
		}
		if len(pool.Subnets) > 0 && pool.Subnets[0].families() != set.families() {
			fail(field, "has %s but the first entry has %s: all entries of a pool must have the same address families", set.families(), pool.Subnets[0].families())
			continue
		}
		if bitsOK && set.HostBits() < blockSizeBits {
			name, p := "ipv4", set.IPv4
			if !p.IsValid() {
				name, p = "ipv6", set.IPv6
			}
			fail(field+"."+name, "%s holds 2^%d addresses, fewer than one block of 2^%d (blockSizeBits)", p, set.HostBits(), blockSizeBits)
			continue
		}
		if bitsOK {
			n, ok := blocksIn(set, blockSizeBits)
			if !ok || total > MaxBlocks-n {
				fail(field, "the pool would hold more than 2^62 blocks; use a longer prefix or a larger blockSizeBits")
				continue
			}
			total += n
		}
		for j, other := range pool.Subnets {
			if f, o, ok := overlap(set, other); ok {
				fail(field+"."+f, "overlaps %s of subnets[%d] (%s)", f, j, o)
			}
		}
		pool.Subnets = append(pool.Subnets, set)
	}
	if len(errs) > 0 {
		return Pool{}, errs
	}
	return pool, nil
}

// ParsePrefix parses a subnet in CIDR notation of the wanted family and
// requires it in canonical form (no host bits set), so that what a user wrote
// is exactly the range vcoil uses.
func ParsePrefix(s string, ipv6 bool) (netip.Prefix, error) {
	family := "IPv4"
	if ipv6 {
		family = "IPv6"
	}
	p, err := netip.ParsePrefix(strings.TrimSpace(s))
	if err != nil || s != strings.TrimSpace(s) {
		return netip.Prefix{}, fmt.Errorf("%q is not an %s subnet in CIDR notation", s, family)
	}
	if p.Addr().Is4In6() || p.Addr().Is6() != ipv6 {
		return netip.Prefix{}, fmt.Errorf("%q is not an %s subnet", s, family)
	}
	if m := p.Masked(); m != p {
		return netip.Prefix{}, fmt.Errorf("%q has host bits set; the subnet is %s", s, m)
	}
	return p, nil
}

// blocksIn is the number of blocks in an entry, and false when it exceeds
// MaxBlocks.
func blocksIn(s SubnetSet, blockSizeBits int) (int64, bool) {
	exp := s.HostBits() - blockSizeBits
	if exp > 62 {
		return 0, false
	}
	return int64(1) << exp, true
}

// overlap reports the family name and prefix of b that a overlaps.
func overlap(a, b SubnetSet) (string, netip.Prefix, bool) {
	if a.IPv4.IsValid() && b.IPv4.IsValid() && a.IPv4.Overlaps(b.IPv4) {
		return "ipv4", b.IPv4, true
	}
	if a.IPv6.IsValid() && b.IPv6.IsValid() && a.IPv6.Overlaps(b.IPv6) {
		return "ipv6", b.IPv6, true
	}
	return "", netip.Prefix{}, false
}

// Overlaps reports the first subnet of p that overlaps a subnet of other, as
// the index in p, the family and the prefix of other it overlaps.
func (p Pool) Overlaps(other Pool) (index int, family string, with netip.Prefix, ok bool) {
	for i, s := range p.Subnets {
		for _, o := range other.Subnets {
			if f, w, hit := overlap(s, o); hit {
				return i, f, w, true
			}
		}
	}
	return 0, "", netip.Prefix{}, false
}

// NumBlocks is the number of blocks the pool can give.
func (p Pool) NumBlocks() int64 {
	var n int64
	for _, s := range p.Subnets {
		c, _ := blocksIn(s, p.BlockSizeBits)
		n += c
	}
	return n
}

// ErrNoSuchBlock is returned for an index outside the pool.
var ErrNoSuchBlock = errors.New("no such block in the pool")

// Block returns the block at index: blocks are numbered through the subnets in
// order, each subnet from its lowest address up.
func (p Pool) Block(index int64) (Block, error) {
	if index < 0 {
		return Block{}, fmt.Errorf("block %d: %w", index, ErrNoSuchBlock)
	}
	rest := index
	for _, s := range p.Subnets {
		n, _ := blocksIn(s, p.BlockSizeBits)
		if rest >= n {
			rest -= n
			continue
		}
		off := uint128{lo: uint64(rest)}.shl(uint(p.BlockSizeBits))
		var b Block
		if s.IPv4.IsValid() {
			b.IPv4 = netip.PrefixFrom(fromAddr(s.IPv4.Addr()).add(off).toAddr(s.IPv4.Addr()), 32-p.BlockSizeBits)
		}
		if s.IPv6.IsValid() {
			b.IPv6 = netip.PrefixFrom(fromAddr(s.IPv6.Addr()).add(off).toAddr(s.IPv6.Addr()), 128-p.BlockSizeBits)
		}
		return b, nil
	}
	return Block{}, fmt.Errorf("block %d of a pool of %d: %w", index, p.NumBlocks(), ErrNoSuchBlock)
}
