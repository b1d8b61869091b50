package nodeipam

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/ipam"
)

// startWatermarked runs a NodeIPAM of node-1 with low watermark w and its
// own metrics registry.
func startWatermarked(t *testing.T, w float64) (*NodeIPAM, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m := startNodeConfig(t, "node-1", nil, 5*time.Second, func(c *Config) { c.LowWatermark, c.Registry = w, reg })
	if err := m.EnsureNodeSubnet(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m, reg
}

// settled waits until no acquisition of pool is under way.
func settled(t *testing.T, m *NodeIPAM, pool string) {
	t.Helper()
	poll.Eventually(t, 10*time.Second, func() error {
		m.mu.Lock()
		defer m.mu.Unlock()
		if _, ok := m.acquiring[pool]; ok {
			return errors.New("an acquisition is under way")
		}
		return nil
	})
}

func poolBlocks(t *testing.T, pool string) int {
	t.Helper()
	var blocks vcoilv2.AddressBlockList
	if err := env.Client.List(context.Background(), &blocks, client.MatchingLabels{vcoilv2.LabelPool: pool}); err != nil {
		t.Fatal(err)
	}
	return len(blocks.Items)
}

// TestTheNextBlockIsAskedForAheadOfTheLowWatermark: with a low watermark,
// allocations at the pace of pods never wait for vcoil-controller but the
// very first (the pool had no block): each time a pool's free addresses
// fall to the watermark its next block is asked for in the background. A
// block emptied while the pool is in use stays as the spare when the pool
// would be at its watermark without it; the blocks all go once the pool's
// last address is freed.
func TestTheNextBlockIsAskedForAheadOfTheLowWatermark(t *testing.T) {
	cleanAPIServer(t)
	startController(t)
	env.CreateNode(t, "node-1", "")
	createPool(t, "default", 3, "10.61.0.0/24", "")
	createPool(t, "small", 3, "10.62.0.0/24", "")
	m, reg := startWatermarked(t, 0.5) // /29: 6 addresses, ahead at 3 free
	ctx := context.Background()
	var allocs []ipam.Allocation
	for range 20 {
		a, err := m.Allocate(ctx, "small")
		if err != nil {
			t.Fatal(err)
		}
		allocs = append(allocs, a)
		settled(t, m, "small")
	}
	waits := testutil.ToFloat64(m.metrics.waits.WithLabelValues("small", "request"))
	joined := testutil.ToFloat64(m.metrics.waits.WithLabelValues("small", "prefetch"))
	ahead := testutil.ToFloat64(m.metrics.prefetches.WithLabelValues("small", "ok"))
	if waits != 1 || joined != 0 {
		t.Fatalf("allocations that waited for a block: %v (request), %v (prefetch); want only the first", waits, joined)
	}
	// 20 addresses take 4 blocks (24 addresses, 4 free: above the
	// watermark of 3); three of them came ahead.
	if ahead != 3 || poolBlocks(t, "small") != 4 {
		t.Fatalf("%v blocks asked for ahead, %d blocks; want 3 and 4", ahead, poolBlocks(t, "small"))
	}
	if n := testutil.CollectAndCount(reg, "vcoil_node_allocation_waits_total", "vcoil_node_block_prefetches_total"); n == 0 {
		t.Fatal("the counters are not in the registry")
	}
	// Freeing the last block's two addresses empties it; without it the
	// pool would have 0 free addresses: it stays.
	for _, a := range allocs[18:] {
		if err := m.Free(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	if n := poolBlocks(t, "small"); n != 4 {
		t.Fatalf("%d blocks after the last block emptied, want 4 (the spare kept)", n)
	}
	// Every address freed: every block goes.
	for _, a := range allocs[:18] {
		if err := m.Free(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	poll.Eventually(t, 10*time.Second, func() error {
		if n := poolBlocks(t, "small"); n != 0 {
			return fmt.Errorf("%d blocks of pool small left", n)
		}
		return nil
	})
}

// TestAFailedPrefetchBacksOff: a pool that cannot give another block is
// asked once ahead, not at every allocation, and its addresses are all
// given; the allocation that finds it full gets the controller's answer.
func TestAFailedPrefetchBacksOff(t *testing.T) {
	cleanAPIServer(t)
	startController(t)
	env.CreateNode(t, "node-1", "")
	createPool(t, "default", 3, "10.63.0.0/24", "")
	createPool(t, "tiny", 3, "10.64.0.0/29", "") // one block of 6 addresses
	m, _ := startWatermarked(t, 0.5)
	ctx := context.Background()
	for i := range 6 {
		if _, err := m.Allocate(ctx, "tiny"); err != nil {
			t.Fatalf("allocation %d: %v", i, err)
		}
		settled(t, m, "tiny")
	}
	if n := testutil.ToFloat64(m.metrics.prefetches.WithLabelValues("tiny", "failed")); n != 1 {
		t.Fatalf("%v failed prefetches, want 1 (then backing off)", n)
	}
	if _, err := m.Allocate(ctx, "tiny"); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("allocation from the full pool: %v, want ErrPoolExhausted", err)
	}
}

// TestADrainingBlockIsNoSpare: a block of a pool being deleted is
// released when it empties, though the pool, still in use, would keep an
// empty block as its spare.
func TestADrainingBlockIsNoSpare(t *testing.T) {
	cleanAPIServer(t)
	startController(t)
	env.CreateNode(t, "node-1", "")
	createPool(t, "default", 3, "10.65.0.0/24", "")
	createPool(t, "doomed", 3, "10.66.0.0/24", "")
	m, _ := startWatermarked(t, 0.5)
	ctx := context.Background()
	var allocs []ipam.Allocation
	for range 7 { // a full block and one address of the next
		a, err := m.Allocate(ctx, "doomed")
		if err != nil {
			t.Fatal(err)
		}
		allocs = append(allocs, a)
		settled(t, m, "doomed")
	}
	last := allocs[6]
	if last.Block == allocs[0].Block {
		t.Fatalf("the 7th address is in the first block %s", last.Block)
	}
	if err := env.Client.Delete(ctx, &vcoilv2.AddressBlock{ObjectMeta: metav1.ObjectMeta{Name: last.Block}}); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 5*time.Second, func() error {
		if m.alloc.Draining(last.Block) {
			return nil
		}
		return fmt.Errorf("block %s is not draining", last.Block)
	})
	if err := m.Free(ctx, last); err != nil {
		t.Fatal(err)
	}
	poll.Eventually(t, 10*time.Second, func() error {
		if found, _ := blockOf(m, last.Block); found {
			return fmt.Errorf("the draining block %s is kept", last.Block)
		}
		return nil
	})
}
