package scale

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/constants"
)

// simNode is a simulated node as its vcoild would see it: its blocks of
// Pool and the addresses left in them.
type simNode struct {
	mu     sync.Mutex
	name   string
	uid    string
	blocks []netip.Prefix
	free   []netip.Addr
	seq    int
}

// take returns a free address of the node, or false when its blocks are
// full.
func (n *simNode) take() (netip.Addr, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.free) == 0 {
		return netip.Addr{}, false
	}
	a := n.free[len(n.free)-1]
	n.free = n.free[:len(n.free)-1]
	return a, true
}

func (n *simNode) release(a netip.Addr) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.free = append(n.free, a)
}

// addBlock makes a block's addresses free; the block's last address is
// left out, as vcoild reserves it when the block is a node subnet.
func (n *simNode) addBlock(p netip.Prefix) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.blocks = append(n.blocks, p)
	size := 1 << (32 - p.Bits())
	for i := size - 2; i >= 0; i-- {
		n.free = append(n.free, addrPlus(p.Addr(), i))
	}
}

// requestBlock asks for one more block for the node and waits for it, as
// vcoild does: the BlockRequest is created, the answer read, the request
// deleted. It returns when the request was created and when it was seen
// Complete.
func (s *Sim) requestBlock(ctx context.Context, n *simNode, w *brWatch) (created, done time.Time, err error) {
	n.mu.Lock()
	n.seq++
	br := NewBlockRequest(n.name, typesUID(n.uid), n.seq)
	n.mu.Unlock()
	ch := w.expect(br.Name)
	created = time.Now()
	if err := createRetry(ctx, s.o.Client, br); err != nil {
		return created, time.Time{}, err
	}
	// The watch sees the answer as it comes; a read every 2 s covers the
	// moments the watch is being restarted.
	var got *vcoilv2.BlockRequest
	poll := time.NewTicker(2 * time.Second)
	defer poll.Stop()
	for got == nil {
		select {
		case got = <-ch:
			done = w.doneAt(br.Name)
		case <-poll.C:
			cur := &vcoilv2.BlockRequest{}
			if err := s.o.Client.Get(ctx, client.ObjectKeyFromObject(br), cur); err == nil && cur.Done() {
				got, done = cur, time.Now()
				w.forget(br.Name)
			}
		case <-ctx.Done():
			return created, time.Time{}, fmt.Errorf("BlockRequest %s: %w", br.Name, ctx.Err())
		}
	}
	if !got.Completed() {
		c := got.FailedCondition()
		return created, done, fmt.Errorf("BlockRequest %s failed: %s: %s", br.Name, c.Reason, c.Message)
	}
	blk := &vcoilv2.AddressBlock{}
	if err := s.o.Client.Get(ctx, client.ObjectKey{Name: got.Status.AddressBlockName}, blk); err != nil {
		return created, done, fmt.Errorf("AddressBlock %s of %s: %w", got.Status.AddressBlockName, br.Name, err)
	}
	if blk.IPv4 == nil {
		return created, done, fmt.Errorf("AddressBlock %s has no IPv4 prefix", blk.Name)
	}
	p, err := netip.ParsePrefix(*blk.IPv4)
	if err != nil {
		return created, done, fmt.Errorf("AddressBlock %s: %w", blk.Name, err)
	}
	n.addBlock(p)
	if err := s.o.Client.Delete(ctx, br); err != nil && !apierrors.IsNotFound(err) {
		return created, done, fmt.Errorf("delete BlockRequest %s: %w", br.Name, err)
	}
	return created, done, nil
}

// brWatch watches the benchmark's BlockRequests and hands each one, once
// done (Complete or Failed), to whoever expects it, noting when it was
// seen done.
type brWatch struct {
	mu      sync.Mutex
	waiters map[string]chan *vcoilv2.BlockRequest
	seen    map[string]time.Time
}

func startBRWatch(ctx context.Context, cl client.WithWatch) (*brWatch, error) {
	w := &brWatch{waiters: map[string]chan *vcoilv2.BlockRequest{}, seen: map[string]time.Time{}}
	wi, err := cl.Watch(ctx, &vcoilv2.BlockRequestList{}, client.HasLabels{BenchLabel})
	if err != nil {
		return nil, fmt.Errorf("watch BlockRequests: %w", err)
	}
	go func() {
		// The apiserver ends a watch after half an hour or so: it is
		// opened again until ctx ends.
		for ctx.Err() == nil {
			w.consume(wi)
			for ctx.Err() == nil {
				if wi, err = cl.Watch(ctx, &vcoilv2.BlockRequestList{}, client.HasLabels{BenchLabel}); err == nil {
					break
				}
				time.Sleep(time.Second)
			}
		}
	}()
	return w, nil
}

// forget drops a waiter that was answered by a read.
func (w *brWatch) forget(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.waiters, name)
}

// consume hands out the done requests of one watch until it ends.
func (w *brWatch) consume(wi watch.Interface) {
	defer wi.Stop()
	for ev := range wi.ResultChan() {
		if ev.Type != watch.Added && ev.Type != watch.Modified {
			continue
		}
		br, ok := ev.Object.(*vcoilv2.BlockRequest)
		if !ok || !br.Done() {
			continue
		}
		now := time.Now()
		w.mu.Lock()
		if _, dup := w.seen[br.Name]; !dup {
			w.seen[br.Name] = now
			if ch, ok := w.waiters[br.Name]; ok {
				ch <- br
				delete(w.waiters, br.Name)
			}
		}
		w.mu.Unlock()
	}
}

func (w *brWatch) expect(name string) <-chan *vcoilv2.BlockRequest {
	ch := make(chan *vcoilv2.BlockRequest, 1)
	w.mu.Lock()
	w.waiters[name] = ch
	w.mu.Unlock()
	return ch
}

func (w *brWatch) doneAt(name string) time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen[name]
}

// leader returns the identity holding vcoil-controller's leader Lease.
func leader(ctx context.Context, cl client.Client) (string, error) {
	l := &coordinationv1.Lease{}
	if err := cl.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: constants.ControllerLeaderElectionID}, l); err != nil {
		return "", fmt.Errorf("vcoil-controller's Lease: %w", err)
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}

// failover kills vcoil-controller's leader: its pod is deleted without
// grace, as a node failure would take it, so that the standby must wait
// for the Lease to expire.
func failover(ctx context.Context, cl client.Client) (string, error) {
	id, err := leader(ctx, cl)
	if err != nil {
		return "", err
	}
	var pods corev1.PodList
	if err := cl.List(ctx, &pods, client.InNamespace("kube-system"), client.MatchingLabels{"app.kubernetes.io/name": "vcoil-controller"}); err != nil {
		return "", err
	}
	// The identity is the pod's host name, then an underscore and a unique
	// suffix; vcoil-controller runs in the host's network namespace, so
	// its host name is its node's (one replica per node: their ports).
	host, _, _ := strings.Cut(id, "_")
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp == nil && (p.Spec.NodeName == host || p.Name == host) {
			if err := cl.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil {
				return "", fmt.Errorf("delete the leader pod %s: %w", p.Name, err)
			}
			return p.Name, nil
		}
	}
	return "", fmt.Errorf("no vcoil-controller pod holds the Lease (holder %q)", id)
}

// checkBlocks counts the pool's blocks independently of vcoil-controller:
// every AddressBlock of the pool, its prefix inside the pool and unique,
// its node existing, and the pool's status agreeing with the count. It
// returns the number of blocks per node.
func checkBlocks(ctx context.Context, cl client.Client, nodes map[string]bool) (map[string]int, error) {
	var blocks vcoilv2.AddressBlockList
	if err := cl.List(ctx, &blocks, client.MatchingLabels{vcoilv2.LabelPool: Pool}); err != nil {
		return nil, fmt.Errorf("list the AddressBlocks of %s: %w", Pool, err)
	}
	var errs []error
	perNode := map[string]int{}
	seen := map[netip.Prefix]string{}
	indexes := map[int64]string{}
	for _, b := range blocks.Items {
		node := b.Labels[vcoilv2.LabelNode]
		if b.IPv4 == nil {
			errs = append(errs, fmt.Errorf("block %s has no prefix", b.Name))
			continue
		}
		p, err := netip.ParsePrefix(*b.IPv4)
		if err != nil || !PoolSubnet.Contains(p.Addr()) || p.Bits() != 32-blockBits {
			errs = append(errs, fmt.Errorf("block %s: prefix %s is not a /%d of %s", b.Name, *b.IPv4, 32-blockBits, PoolSubnet))
			continue
		}
		if other, dup := seen[p]; dup {
			errs = append(errs, fmt.Errorf("prefix %s given twice: blocks %s and %s", p, other, b.Name))
		}
		if other, dup := indexes[b.Index]; dup {
			errs = append(errs, fmt.Errorf("index %d given twice: blocks %s and %s", b.Index, other, b.Name))
		}
		seen[p], indexes[b.Index] = b.Name, b.Name
		if !nodes[node] {
			errs = append(errs, fmt.Errorf("block %s belongs to %q, which is no node of the benchmark (leaked)", b.Name, node))
		}
		perNode[node]++
	}
	pool := &vcoilv2.AddressPool{}
	if err := cl.Get(ctx, client.ObjectKey{Name: Pool}, pool); err != nil {
		errs = append(errs, err)
	} else if pool.Status.BlocksAllocated != int64(len(blocks.Items)) {
		errs = append(errs, fmt.Errorf("pool %s says %d blocks allocated, %d AddressBlocks exist", Pool, pool.Status.BlocksAllocated, len(blocks.Items)))
	}
	return perNode, errors.Join(errs...)
}

// waitPoolStatus waits until the pool's status counts n blocks (its
// status is written after the blocks).
func waitPoolStatus(ctx context.Context, cl client.Client, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pool := &vcoilv2.AddressPool{}
		err := cl.Get(ctx, client.ObjectKey{Name: Pool}, pool)
		if err == nil && pool.Status.BlocksAllocated == int64(n) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pool %s status: %d blocks allocated after %s, want %d (%v)", Pool, pool.Status.BlocksAllocated, timeout, n, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func percentileMS(d []time.Duration, p int) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	r := (p*len(s) + 99) / 100
	return float64(s[max(r, 1)-1]) / float64(time.Millisecond)
}
