package ipam

import (
	"errors"
	"math/rand/v2"
	"testing"
)

func TestNodeSubnetNeverGivesItsNATLoopback(t *testing.T) {
	for _, tc := range []struct{ name, v4, v6 string }{
		{"IPv4 /29", "10.0.0.8/29", ""},
		{"IPv6 /125", "", "fd00::8/125"},
		{"dual stack /29", "10.0.0.8/29", "fd00::8/125"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := block(t, tc.v4, tc.v6)
			a := NewNodeAllocator()
			if err := a.AddBlock("default", "default-1", 1, b, true); err != nil {
				t.Fatal(err)
			}
			loop, _ := b.NATLoopback()
			given := 0
			for {
				al, err := a.Allocate("default")
				if errors.Is(err, ErrNoFreeAddress) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				given++
				if (loop.IPv4.IsValid() && al.IPv4 == loop.IPv4) || (loop.IPv6.IsValid() && al.IPv6 == loop.IPv6) {
					t.Fatalf("allocation %d is the NAT loopback %s", given, loop)
				}
			}
			if want := a.Blocks()[0]; given == 0 || want.Free != 0 {
				t.Fatalf("gave %d addresses, %d left free", given, want.Free)
			}
			// /29 dual: 8 - network - broadcast - loopback = 5; IPv6-only: 8 - loopback = 7.
			wantGiven := 5
			if tc.v4 == "" {
				wantGiven = 7
			}
			if given != wantGiven {
				t.Fatalf("gave %d addresses, want %d", given, wantGiven)
			}
		})
	}
}

func TestAllocatorDoesNotReuseAFreedAddressAtOnce(t *testing.T) {
	a := NewNodeAllocator()
	if err := a.AddBlock("p", "p-0", 0, block(t, "10.0.0.0/29", ""), false); err != nil {
		t.Fatal(err)
	}
	first, _ := a.Allocate("p")
	second, _ := a.Allocate("p")
	a.Free(first.Block, first.Offset)
	third, _ := a.Allocate("p")
	if third.Offset == first.Offset || third.Offset != second.Offset+1 {
		t.Fatalf("after freeing offset %d the next is %d, want %d", first.Offset, third.Offset, second.Offset+1)
	}
	// Offsets 1..6 are assignable: fill to the end, then wrap to the freed one.
	var last Allocation
	for i := 0; i < 3; i++ {
		last, _ = a.Allocate("p")
	}
	if last.Offset != 6 {
		t.Fatalf("last offset = %d, want 6", last.Offset)
	}
	wrapped, err := a.Allocate("p")
	if err != nil || wrapped.Offset != first.Offset {
		t.Fatalf("wrapped allocation = %+v, %v; want offset %d", wrapped, err, first.Offset)
	}
	if _, err := a.Allocate("p"); !errors.Is(err, ErrNoFreeAddress) {
		t.Fatalf("full block: %v", err)
	}
}

func TestFreeReportsAReleasableBlockExceptTheNodeSubnet(t *testing.T) {
	a := NewNodeAllocator()
	_ = a.AddBlock("default", "default-0", 0, block(t, "10.0.0.0/30", ""), true)
	_ = a.AddBlock("default", "default-5", 5, block(t, "10.0.0.20/30", ""), false)
	ns, _ := a.Allocate("default") // the node subnet's only free address
	other, _ := a.Allocate("default")
	if ns.Block != "default-0" || other.Block != "default-5" {
		t.Fatalf("allocations from %s and %s, want the node subnet first", ns.Block, other.Block)
	}
	if a.Free(ns.Block, ns.Offset) {
		t.Fatal("an empty node subnet was reported releasable")
	}
	if !a.Free(other.Block, other.Offset) {
		t.Fatal("an empty block was not reported releasable")
	}
	if a.Free(other.Block, other.Offset) {
		t.Fatal("freeing twice reported releasable again")
	}
}

func TestRestoreRejectsWhatCannotBeTaken(t *testing.T) {
	a := NewNodeAllocator()
	_ = a.AddBlock("default", "default-0", 0, block(t, "10.0.0.0/29", ""), true)
	if _, err := a.Restore("default-0", 3); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		block string
		off   int
	}{
		{"taken twice", "default-0", 3},
		{"the NAT loopback", "default-0", 6},
		{"the broadcast address", "default-0", 7},
		{"an unknown block", "default-9", 1},
	} {
		if _, err := a.Restore(tc.block, tc.off); err == nil {
			t.Errorf("%s: restored", tc.name)
		}
	}
	// After a restore the search continues after the restored offset.
	if al, _ := a.Allocate("default"); al.Offset != 4 {
		t.Fatalf("next offset = %d, want 4", al.Offset)
	}
}

// TestAllocatorNeverGivesAnAddressTwice runs random allocate/free sequences
// over several blocks and checks the allocator against a plain set.
func TestAllocatorNeverGivesAnAddressTwice(t *testing.T) {
	seed := uint64(7)
	rng := rand.New(rand.NewPCG(seed, 2))
	for iter := 0; iter < 200; iter++ {
		a := NewNodeAllocator()
		_ = a.AddBlock("p", "p-0", 0, block(t, "10.0.0.0/28", "fd00::/124"), true)
		_ = a.AddBlock("p", "p-1", 1, block(t, "10.0.0.16/28", "fd00::10/124"), false)
		live := map[string]Allocation{}
		for step := 0; step < 200; step++ {
			if rng.IntN(3) > 0 {
				al, err := a.Allocate("p")
				if errors.Is(err, ErrNoFreeAddress) {
					if len(live) != 13+14 { // 16-3 in the node subnet, 16-2 in the other
						t.Fatalf("seed %d iter %d: full with %d live allocations", seed, iter, len(live))
					}
					continue
				}
				k := al.IPv4.String()
				if _, dup := live[k]; dup {
					t.Fatalf("seed %d iter %d step %d: %s given twice", seed, iter, step, k)
				}
				live[k] = al
				continue
			}
			for k, al := range live {
				a.Free(al.Block, al.Offset)
				delete(live, k)
				break
			}
		}
	}
}

func TestDrainingBlockGivesNothingAndIsReleasedWhenEmpty(t *testing.T) {
	a := NewNodeAllocator()
	_ = a.AddBlock("default", "default-0", 0, block(t, "10.0.0.0/29", ""), true)
	al, _ := a.Allocate("default")
	a.Drain("default-0")
	if _, err := a.Allocate("default"); !errors.Is(err, ErrNoFreeAddress) {
		t.Fatalf("a draining block gave an address: %v", err)
	}
	if !a.Free(al.Block, al.Offset) {
		t.Fatal("a draining node subnet whose last address is freed is not releasable")
	}
}
