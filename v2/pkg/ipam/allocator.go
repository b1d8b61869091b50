package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"sort"
)

// ErrNoFreeAddress means the node's blocks of a pool are full: the node must
// acquire another block.
var ErrNoFreeAddress = errors.New("no free address in the node's blocks of the pool")

// Allocation is one address (pair) given to a pod interface.
type Allocation struct {
	Pool   string
	Block  string // AddressBlock name
	Offset int
	IPv4   netip.Addr
	IPv6   netip.Addr
}

// NodeAllocator hands out addresses from the blocks a node owns. It is pure
// bookkeeping, not safe for concurrent use: vcoild guards it with a lock and
// does the I/O (BlockRequests, checkpoints) outside.
//
// Addresses are not reused at once: each block searches from just after the
// offset it gave last, wrapping around.
type NodeAllocator struct {
	blocks map[string]*nodeBlock // by AddressBlock name
}

type nodeBlock struct {
	pool       string
	name       string
	index      int64
	block      Block
	nodeSubnet bool
	used       []uint64 // one bit per offset: given to a pod or reserved
	reserved   map[int]bool
	inUse      int // offsets given to pods (not reserved ones)
	last       int // offset given last; the search starts after it
	draining   bool
}

// NewNodeAllocator returns an allocator without blocks.
func NewNodeAllocator() *NodeAllocator {
	return &NodeAllocator{blocks: map[string]*nodeBlock{}}
}

// AddBlock makes a block of pool available. A node subnet reserves its NAT
// loopback offsets. Adding a block that is already there is a no-op.
func (a *NodeAllocator) AddBlock(pool, name string, index int64, b Block, nodeSubnet bool) error {
	if _, ok := a.blocks[name]; ok {
		return nil
	}
	nb := &nodeBlock{
		pool: pool, name: name, index: index, block: b, nodeSubnet: nodeSubnet,
		used:     make([]uint64, (b.Size()+63)/64),
		reserved: map[int]bool{},
		last:     -1,
	}
	if nodeSubnet {
		if _, err := b.NATLoopback(); err != nil {
			return fmt.Errorf("node subnet %s: %w", name, err)
		}
		for _, off := range b.NATLoopbackOffsets() {
			nb.reserved[off] = true
			nb.set(off)
		}
	}
	a.blocks[name] = nb
	return nil
}

// RemoveBlock forgets a block; its allocations are gone with it.
func (a *NodeAllocator) RemoveBlock(name string) { delete(a.blocks, name) }

// Drain stops giving addresses from a block (its pool is being deleted); its
// allocations stay until they are freed, and then it is releasable, even a
// node subnet.
func (a *NodeAllocator) Drain(name string) {
	if nb, ok := a.blocks[name]; ok {
		nb.draining = true
	}
}

// Draining reports whether a block of the node gives no more addresses.
func (a *NodeAllocator) Draining(name string) bool {
	nb, ok := a.blocks[name]
	return ok && nb.draining
}

// InUse is the number of addresses of the block given to pods.
func (a *NodeAllocator) InUse(name string) int {
	if nb, ok := a.blocks[name]; ok {
		return nb.inUse
	}
	return 0
}

// HasBlock reports whether the node holds the block.
func (a *NodeAllocator) HasBlock(name string) bool { _, ok := a.blocks[name]; return ok }

// Allocate gives the next free address of pool: from the node subnet first,
// then from the blocks in index order. ErrNoFreeAddress means every block of
// the pool is full.
func (a *NodeAllocator) Allocate(pool string) (Allocation, error) {
	for _, nb := range a.poolBlocks(pool) {
		if nb.draining {
			continue
		}
		if off, ok := nb.next(); ok {
			nb.set(off)
			nb.inUse++
			nb.last = off
			return nb.allocation(off), nil
		}
	}
	return Allocation{}, fmt.Errorf("pool %q: %w", pool, ErrNoFreeAddress)
}

// Restore marks an allocation recorded before a restart as taken. It fails
// when the block is unknown, the offset cannot be given out, or it is taken.
func (a *NodeAllocator) Restore(block string, offset int) (Allocation, error) {
	nb, ok := a.blocks[block]
	if !ok {
		return Allocation{}, fmt.Errorf("restore offset %d: block %q is not the node's", offset, block)
	}
	if !nb.block.Assignable(offset) || nb.reserved[offset] {
		return Allocation{}, fmt.Errorf("restore offset %d of block %q: not assignable", offset, block)
	}
	if nb.isSet(offset) {
		return Allocation{}, fmt.Errorf("restore offset %d of block %q: already allocated", offset, block)
	}
	nb.set(offset)
	nb.inUse++
	if offset > nb.last {
		nb.last = offset
	}
	return nb.allocation(offset), nil
}

// Lookup finds the block and offset of an address among the node's blocks.
func (a *NodeAllocator) Lookup(addr netip.Addr) (block string, offset int, ok bool) {
	for _, nb := range a.blocks {
		if off, in := nb.block.Offset(addr); in {
			return nb.name, off, true
		}
	}
	return "", 0, false
}

// Free returns an allocation. It reports whether the block is now unused and
// may be released (never for a node subnet, unless it drains). Freeing what
// is not allocated is a no-op.
func (a *NodeAllocator) Free(block string, offset int) (releasable bool) {
	nb, ok := a.blocks[block]
	if !ok || offset < 0 || offset >= nb.block.Size() || nb.reserved[offset] || !nb.isSet(offset) {
		return false
	}
	nb.used[offset/64] &^= 1 << (offset % 64)
	nb.inUse--
	return nb.inUse == 0 && (!nb.nodeSubnet || nb.draining)
}

// PoolFree reports the addresses of pool still to give (its blocks that
// do not drain) and how many addresses its largest such block gives;
// inUse counts the pool's addresses given, draining blocks included.
func (a *NodeAllocator) PoolFree(pool string) (free, blockSize, inUse int) {
	for _, nb := range a.blocks {
		if nb.pool != pool {
			continue
		}
		inUse += nb.inUse
		if nb.draining {
			continue
		}
		f := nb.free()
		free += f
		blockSize = max(blockSize, f+nb.inUse)
	}
	return free, blockSize, inUse
}

// PoolOf is the pool of a block of the node ("" for none).
func (a *NodeAllocator) PoolOf(block string) string {
	if nb, ok := a.blocks[block]; ok {
		return nb.pool
	}
	return ""
}

// FreeOf is the number of addresses a block of the node still gives (0
// for a draining or unknown one).
func (a *NodeAllocator) FreeOf(block string) int {
	nb, ok := a.blocks[block]
	if !ok || nb.draining {
		return 0
	}
	return nb.free()
}

// BlockUsage describes a block of the node.
type BlockUsage struct {
	Pool       string
	Name       string
	Index      int64
	Block      Block
	NodeSubnet bool
	Draining   bool
	InUse      int
	// Free is the number of addresses still to give.
	Free int
}

// Blocks lists the node's blocks, by pool then index.
func (a *NodeAllocator) Blocks() []BlockUsage {
	out := make([]BlockUsage, 0, len(a.blocks))
	for _, nb := range a.blocks {
		out = append(out, BlockUsage{
			Pool: nb.pool, Name: nb.name, Index: nb.index, Block: nb.block, NodeSubnet: nb.nodeSubnet,
			Draining: nb.draining, InUse: nb.inUse, Free: nb.free(),
		})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Pool != out[j].Pool {
			return out[i].Pool < out[j].Pool
		}
		return out[i].Index < out[j].Index
	})
	return out
}

// poolBlocks are pool's blocks in allocation order: the node subnet first,
// then by index.
func (a *NodeAllocator) poolBlocks(pool string) []*nodeBlock {
	var out []*nodeBlock
	for _, nb := range a.blocks {
		if nb.pool == pool {
			out = append(out, nb)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].nodeSubnet != out[j].nodeSubnet {
			return out[i].nodeSubnet
		}
		return out[i].index < out[j].index
	})
	return out
}

// next finds the first assignable free offset after last, wrapping.
func (nb *nodeBlock) next() (int, bool) {
	size := nb.block.Size()
	for i := 1; i <= size; i++ {
		off := (nb.last + i) % size
		if off < 0 {
			off += size
		}
		if !nb.isSet(off) && nb.block.Assignable(off) {
			return off, true
		}
	}
	return 0, false
}

func (nb *nodeBlock) free() int {
	n := nb.block.Size()
	if nb.block.IPv4.IsValid() && n >= 4 {
		n -= 2 // network and broadcast
	}
	for off := range nb.reserved {
		if nb.block.Assignable(off) {
			n--
		}
	}
	return n - nb.inUse
}

func (nb *nodeBlock) set(off int)        { nb.used[off/64] |= 1 << (off % 64) }
func (nb *nodeBlock) isSet(off int) bool { return nb.used[off/64]&(1<<(off%64)) != 0 }

func (nb *nodeBlock) allocation(off int) Allocation {
	v4, v6 := nb.block.Addr(off)
	return Allocation{Pool: nb.pool, Block: nb.name, Offset: off, IPv4: v4, IPv6: v6}
}
