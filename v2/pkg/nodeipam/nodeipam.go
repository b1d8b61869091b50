// Package nodeipam is a node's side of address management against the
// apiserver: it holds the node's AddressBlocks in an ipam.NodeAllocator,
// acquires new blocks through BlockRequests when a pool's blocks are full
// (or, with a low watermark, before they are), releases blocks whose last
// address is freed (but the spare the watermark keeps), and acquires the node subnet
// and publishes its NAT loopback. It keeps no durable state of its own: the
// blocks live in the apiserver and the allocations in vcoild's checkpoint.
//
// Two things are never left for a restart to clean up: a block whose release
// the apiserver refused stays known (draining) and its release is tried
// again with backoff; and a BlockRequest answered after its caller stopped
// waiting gives its block to the pool when the pool needs one, and releases
// it otherwise.
package nodeipam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/ipam"
)

// Errors callers decide on. A *RequestFailedError wraps the first four.
var (
	ErrPoolNotFound  = errors.New("address pool not found")
	ErrPoolExhausted = errors.New("address pool exhausted")
	ErrPoolDeleting  = errors.New("address pool is being deleted")
	// ErrPoolNotForPods means the pool gives LoadBalancer addresses.
	ErrPoolNotForPods = errors.New("address pool does not serve pods")
	// ErrNotReady means the node subnet is not acquired yet.
	ErrNotReady = errors.New("node IPAM is not ready")
	// ErrTimeout means no block arrived in time; the caller may retry.
	ErrTimeout = errors.New("timed out waiting for an address block")
)

// RequestFailedError is a BlockRequest that vcoil-controller answered with
// Failed.
type RequestFailedError struct {
	Pool, Reason, Message string
}

func (e *RequestFailedError) Error() string {
	return fmt.Sprintf("block request for pool %q failed (%s): %s", e.Pool, e.Reason, e.Message)
}

// Unwrap maps the controller's reasons to this package's errors.
func (e *RequestFailedError) Unwrap() error {
	switch e.Reason {
	case vcoilv2.ReasonPoolNotFound:
		return ErrPoolNotFound
	case vcoilv2.ReasonPoolExhausted:
		return ErrPoolExhausted
	case vcoilv2.ReasonPoolDeleting:
		return ErrPoolDeleting
	case vcoilv2.ReasonPoolNotForPods:
		return ErrPoolNotForPods
	}
	return nil
}

// vcoild's permissions for node IPAM (role "daemon").
// +kubebuilder:rbac:groups=vcoil.io,resources=addressblocks,verbs=get;list;watch;update;patch;delete
// +kubebuilder:rbac:groups=vcoil.io,resources=blockrequests,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;patch

// Config of a node's IPAM.
type Config struct {
	NodeName string
	// RequestTimeout bounds the wait for one BlockRequest.
	RequestTimeout time.Duration
	// PollInterval is how often a pending BlockRequest is read from the cache.
	PollInterval time.Duration
	// ReleaseBackoff and ReleaseBackoffCap are the first and the longest
	// wait before a failed release of a block is tried again.
	ReleaseBackoff, ReleaseBackoffCap time.Duration
	// LowWatermark, a fraction of a block (0 < w < 1), makes the node ask
	// for a pool's next block ahead: when an allocation leaves the pool's
	// blocks with no more than LowWatermark × the block's addresses free,
	// a BlockRequest starts in the background, so that no allocation
	// waits for vcoil-controller while the pool has room. The last block
	// of a pool still in use is then kept when it empties, as the spare.
	// 0 turns it off: a block is requested when the pool is full.
	LowWatermark float64
	// Registry receives the prefetch and wait counters (nil: none).
	Registry prometheus.Registerer
}

// prefetchBackoff is how long a pool whose prefetch failed (exhausted,
// refused, timed out) is not prefetched again; an allocation that finds
// the pool full still asks at once.
const prefetchBackoff = 30 * time.Second

// NodeIPAM is the node's address manager. Safe for concurrent use.
//
// The lock guards only the allocator's bookkeeping. Waiting for a block is
// done outside it, once per pool (later callers wait on the same
// acquisition), so that a slow BlockRequest of one pool stalls neither other
// pools, nor frees, nor allocations that find a free address.
type NodeIPAM struct {
	// Client reads the manager's cache (blocks of this node, its requests)
	// and writes to the apiserver; Reader reads the apiserver directly.
	client client.Client
	reader client.Reader
	cfg    Config
	log    logr.Logger

	mu         sync.Mutex
	alloc      *ipam.NodeAllocator
	acquiring  map[string]*acquisition // by pool
	nodeUID    string
	nodeSubnet string // AddressBlock name; "" until acquired
	loopback   ipam.NATLoopback
	subnetCIDR ipam.Block
	// waiting are the BlockRequests a caller waits for, by name: the
	// request controller leaves them to it.
	waiting map[string]bool
	// abandoned are the node's BlockRequests nobody waits for any more:
	// those this NodeIPAM stopped waiting for, and those an earlier vcoild
	// left (found by the request controller's initial list). Only these are
	// adopted or released when answered, and reused by the next wait: a
	// request of another NodeIPAM of the node (a test's "restart") is not
	// this one's to take.
	abandoned map[string]bool
	// releasing are the blocks being released, drained in the allocator
	// until the apiserver has deleted them.
	releasing map[string]bool
	// releases is the block controller's queue, once it runs; a failed
	// release goes back into it, rate limited.
	releases workqueue.TypedRateLimitingInterface[reconcile.Request]
	// prefetchAfter holds the pools whose prefetch failed, until when
	// they are not prefetched again.
	prefetchAfter map[string]time.Time
	metrics       *metrics
}

type acquisition struct {
	done chan struct{}
	err  error
	// prefetch: started by the watermark, not by an allocation that
	// found the pool full.
	prefetch bool
}

// New returns a NodeIPAM without blocks; call Load, then EnsureNodeSubnet.
func New(c client.Client, reader client.Reader, cfg Config, log logr.Logger) *NodeIPAM {
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 30 * time.Second
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 50 * time.Millisecond
	}
	if cfg.ReleaseBackoff <= 0 {
		cfg.ReleaseBackoff = time.Second
	}
	if cfg.ReleaseBackoffCap < cfg.ReleaseBackoff {
		cfg.ReleaseBackoffCap = max(5*time.Minute, cfg.ReleaseBackoff)
	}
	return &NodeIPAM{
		client: c, reader: reader, cfg: cfg, log: log,
		alloc:     ipam.NewNodeAllocator(),
		acquiring: map[string]*acquisition{},
		waiting:   map[string]bool{},
		abandoned: map[string]bool{},
		releasing: map[string]bool{},

		prefetchAfter: map[string]time.Time{},
		metrics:       newMetrics(cfg.Registry, log),
	}
}

// Load reads the node's blocks from the apiserver into the allocator. Blocks
// being deleted are loaded as draining: their addresses stay allocated, none
// is given anew.
func (m *NodeIPAM) Load(ctx context.Context) error {
	node := &corev1.Node{}
	if err := m.reader.Get(ctx, client.ObjectKey{Name: m.cfg.NodeName}, node); err != nil {
		return fmt.Errorf("get node %q: %w", m.cfg.NodeName, err)
	}
	var blocks vcoilv2.AddressBlockList
	if err := m.reader.List(ctx, &blocks, client.MatchingLabels{vcoilv2.LabelNode: m.cfg.NodeName}); err != nil {
		return fmt.Errorf("list address blocks of node %q: %w", m.cfg.NodeName, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nodeUID = string(node.UID)
	for i := range blocks.Items {
		if err := m.addBlockLocked(&blocks.Items[i]); err != nil {
			return err
		}
	}
	return nil
}

// addBlockLocked puts an AddressBlock into the allocator.
func (m *NodeIPAM) addBlockLocked(b *vcoilv2.AddressBlock) error {
	parsed, err := ipam.ParseBlock(ptr.Deref(b.IPv4, ""), ptr.Deref(b.IPv6, ""))
	if err != nil {
		return fmt.Errorf("address block %q: %w", b.Name, err)
	}
	pool := b.Labels[vcoilv2.LabelPool]
	nodeSubnet := b.NodeSubnet && pool == vcoilv2.DefaultPool
	if err := m.alloc.AddBlock(pool, b.Name, b.Index, parsed, nodeSubnet); err != nil {
		return err
	}
	if !b.DeletionTimestamp.IsZero() {
		m.alloc.Drain(b.Name)
	}
	if nodeSubnet && m.nodeSubnet == "" && b.DeletionTimestamp.IsZero() {
		l, err := parsed.NATLoopback()
		if err != nil {
			return fmt.Errorf("node subnet %q: %w", b.Name, err)
		}
		m.nodeSubnet, m.loopback, m.subnetCIDR = b.Name, l, parsed
	}
	return nil
}

// Restore marks an allocation recorded in the checkpoint as taken.
func (m *NodeIPAM) Restore(block string, offset int) (ipam.Allocation, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.alloc.Restore(block, offset)
}

// Lookup finds the block and offset of an address of the node's blocks.
func (m *NodeIPAM) Lookup(addr netip.Addr) (string, int, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.alloc.Lookup(addr)
}

// ReleaseUnused releases every block without allocations (except the node
// subnet): at start, after the checkpoint was restored, as Coil does.
// A release the apiserver refuses is logged and tried again with backoff
// (the block controller's queue); the error is not the caller's to handle.
func (m *NodeIPAM) ReleaseUnused(ctx context.Context) error {
	m.mu.Lock()
	var unused []string
	for _, b := range m.alloc.Blocks() {
		if b.InUse == 0 && (!b.NodeSubnet || b.Draining) && !m.releasing[b.Name] {
			unused = append(unused, b.Name)
			m.retireBlockLocked(b.Name)
		}
	}
	m.mu.Unlock()
	for _, name := range unused {
		m.releaseOrRetry(ctx, name)
	}
	return nil
}

// EnsureNodeSubnet acquires the node subnet (the node's first block of the
// default pool) unless the node has it, and publishes its NAT loopback on the
// Node. It returns ErrPoolNotFound while there is no default pool.
func (m *NodeIPAM) EnsureNodeSubnet(ctx context.Context) error {
	m.mu.Lock()
	have := m.nodeSubnet != ""
	m.mu.Unlock()
	if !have {
		name, err := m.requestBlock(ctx, vcoilv2.DefaultPool)
		if err != nil {
			return fmt.Errorf("acquire the node subnet: %w", err)
		}
		m.mu.Lock()
		ok := m.nodeSubnet == name
		m.mu.Unlock()
		if !ok {
			// The controller marks a node's first default block; a block
			// that came unmarked means the node had a node subnet that is
			// being deleted. Keep the block and try again later.
			return fmt.Errorf("acquire the node subnet: block %q is not marked as node subnet: %w", name, ErrNotReady)
		}
		m.log.Info("acquired the node subnet", "block", name, "natLoopback", m.NATLoopback().String())
	}
	return m.publishLoopback(ctx)
}

// publishLoopback writes the NAT loopback into the Node's annotation.
func (m *NodeIPAM) publishLoopback(ctx context.Context) error {
	want := m.NATLoopback().String()
	node := &corev1.Node{}
	if err := m.reader.Get(ctx, client.ObjectKey{Name: m.cfg.NodeName}, node); err != nil {
		return fmt.Errorf("get node %q: %w", m.cfg.NodeName, err)
	}
	if node.Annotations[vcoilv2.AnnotationNATLoopback] == want {
		return nil
	}
	patch := client.MergeFrom(node.DeepCopy())
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	node.Annotations[vcoilv2.AnnotationNATLoopback] = want
	if err := m.client.Patch(ctx, node, patch); err != nil {
		return fmt.Errorf("annotate node %q with its NAT loopback: %w", m.cfg.NodeName, err)
	}
	return nil
}

// Ready returns ErrNotReady until the node subnet is acquired.
func (m *NodeIPAM) Ready() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.nodeSubnet == "" {
		return ErrNotReady
	}
	return nil
}

// NATLoopback is the node subnet's NAT loopback (zero before Ready).
func (m *NodeIPAM) NATLoopback() ipam.NATLoopback {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.loopback
}

// NodeSubnet is the node subnet's block (zero before Ready).
func (m *NodeIPAM) NodeSubnet() ipam.Block {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.subnetCIDR
}

// Blocks describes the node's blocks and their use.
func (m *NodeIPAM) Blocks() []ipam.BlockUsage {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.alloc.Blocks()
}

// Allocate gives an address of pool, acquiring a new block when the node's
// blocks of the pool are full.
func (m *NodeIPAM) Allocate(ctx context.Context, pool string) (ipam.Allocation, error) {
	// Each round allocates, or waits for the pool's next block. Many callers
	// may share one block and some may lose the race for its addresses
	// several times, so the bound is a time, not a number of rounds.
	deadline := time.Now().Add(2 * m.cfg.RequestTimeout)
	counted := false
	for time.Now().Before(deadline) {
		m.mu.Lock()
		if m.nodeSubnet == "" {
			m.mu.Unlock()
			return ipam.Allocation{}, ErrNotReady
		}
		a, err := m.alloc.Allocate(pool)
		if err == nil {
			prefetch := m.prefetchLocked(pool)
			m.mu.Unlock()
			if prefetch != nil {
				go m.acquire(pool, prefetch)
			}
			return a, nil
		}
		if !errors.Is(err, ipam.ErrNoFreeAddress) {
			m.mu.Unlock()
			return ipam.Allocation{}, err
		}
		acq, started := m.acquiring[pool]
		if !started {
			acq = &acquisition{done: make(chan struct{})}
			m.acquiring[pool] = acq
		}
		m.mu.Unlock()
		if !counted {
			m.metrics.waited(pool, acq.prefetch)
			counted = true
		}

		if !started {
			go m.acquire(pool, acq)
		}
		select {
		case <-acq.done:
		case <-ctx.Done():
			return ipam.Allocation{}, fmt.Errorf("allocate from pool %q: %w", pool, ctx.Err())
		}
		if acq.err != nil {
			return ipam.Allocation{}, acq.err
		}
	}
	return ipam.Allocation{}, fmt.Errorf("allocate from pool %q: %w", pool, ErrTimeout)
}

// acquire runs one BlockRequest for pool on behalf of every waiter. It is
// not tied to a caller's context: callers that give up do not cancel the
// block the others wait for.
func (m *NodeIPAM) acquire(pool string, acq *acquisition) {
	ctx, cancel := context.WithTimeout(context.Background(), m.cfg.RequestTimeout+5*time.Second)
	defer cancel()
	block, err := m.requestBlock(ctx, pool)
	acq.err = err
	m.mu.Lock()
	delete(m.acquiring, pool)
	if acq.prefetch {
		if err != nil {
			m.prefetchAfter[pool] = time.Now().Add(prefetchBackoff)
		} else {
			delete(m.prefetchAfter, pool)
		}
	}
	m.mu.Unlock()
	if acq.prefetch {
		m.metrics.prefetched(pool, err)
		if err != nil {
			m.log.Info("cannot get the next address block ahead; an allocation that finds the pool full asks again", "pool", pool, "error", err.Error())
		} else {
			m.log.V(1).Info("got the next address block ahead", "pool", pool, "block", block)
		}
	}
	close(acq.done)
}

// prefetchLocked starts the acquisition of pool's next block when its free
// addresses are at the low watermark or below (Config.LowWatermark) and
// none is under way; the caller runs acquire with what it returns.
func (m *NodeIPAM) prefetchLocked(pool string) *acquisition {
	if m.cfg.LowWatermark <= 0 {
		return nil
	}
	if _, ok := m.acquiring[pool]; ok {
		return nil
	}
	if time.Now().Before(m.prefetchAfter[pool]) {
		return nil
	}
	free, size, _ := m.alloc.PoolFree(pool)
	if float64(free) > m.cfg.LowWatermark*float64(size) {
		return nil
	}
	acq := &acquisition{done: make(chan struct{}), prefetch: true}
	m.acquiring[pool] = acq
	return acq
}

// keepSpareLocked tells whether block, of pool, whose last address was
// just freed, stays as the pool's spare (Config.LowWatermark): the pool
// still has addresses in use and, without it, would be at its low
// watermark.
func (m *NodeIPAM) keepSpareLocked(pool, block string) bool {
	if m.cfg.LowWatermark <= 0 || block == m.nodeSubnet || m.alloc.Draining(block) {
		// A draining block (its pool is being deleted) goes.
		return false
	}
	free, size, inUse := m.alloc.PoolFree(pool)
	if inUse == 0 {
		return false
	}
	without := free - m.alloc.FreeOf(block)
	return float64(without) <= m.cfg.LowWatermark*float64(size)
}

// requestBlock waits for a BlockRequest of pool (an unanswered one of an
// earlier wait, else a new one), adds its block to the allocator and deletes
// the request. It returns the block's name. A request that is not answered
// in time is kept: the request controller adopts or releases its block when
// it is answered (reconcileRequest).
func (m *NodeIPAM) requestBlock(ctx context.Context, pool string) (string, error) {
	br, err := m.pendingRequest(ctx, pool)
	if err != nil {
		return "", err
	}
	start := time.Now()
	keep := false
	defer func() {
		if !keep {
			// The request has served its purpose.
			if err := m.client.Delete(context.Background(), br); client.IgnoreNotFound(err) != nil {
				m.log.Error(err, "cannot delete block request", "request", br.Name)
			}
		}
		m.mu.Lock()
		delete(m.waiting, br.Name)
		if keep {
			m.abandoned[br.Name] = true
		}
		m.mu.Unlock()
		if keep {
			// An answer that came while the caller still waited was left
			// to it by the request controller: take it now.
			ctx, cancel := context.WithTimeout(context.Background(), m.cfg.RequestTimeout)
			defer cancel()
			if err := m.reconcileRequest(ctx, br.Name); err != nil {
				m.log.Error(err, "cannot handle the block request left unanswered; the request controller tries again", "request", br.Name)
			}
		}
	}()

	err = wait.PollUntilContextTimeout(ctx, m.cfg.PollInterval, m.cfg.RequestTimeout, true, func(ctx context.Context) (bool, error) {
		err := m.client.Get(ctx, client.ObjectKeyFromObject(br), br)
		if apierrors.IsNotFound(err) {
			return false, nil // not in the cache yet
		}
		return err == nil && br.Done(), err
	})
	if err != nil {
		keep = wait.Interrupted(err) || ctx.Err() != nil
		if wait.Interrupted(err) {
			return "", fmt.Errorf("block request %q for pool %q unanswered after %s: %w", br.Name, pool, m.cfg.RequestTimeout, ErrTimeout)
		}
		return "", fmt.Errorf("wait for block request %q: %w", br.Name, err)
	}
	if c := br.FailedCondition(); c != nil {
		return "", &RequestFailedError{Pool: pool, Reason: c.Reason, Message: c.Message}
	}

	block := &vcoilv2.AddressBlock{}
	if err := m.reader.Get(ctx, client.ObjectKey{Name: br.Status.AddressBlockName}, block); err != nil {
		return "", fmt.Errorf("get address block %q of request %q: %w", br.Status.AddressBlockName, br.Name, err)
	}
	m.mu.Lock()
	err = m.addBlockLocked(block)
	m.mu.Unlock()
	if err != nil {
		return "", err
	}
	m.log.Info("acquired address block", "pool", pool, "block", block.Name, "ipv4", ptr.Deref(block.IPv4, ""),
		"ipv6", ptr.Deref(block.IPv6, ""), "waited", time.Since(start).String())
	return block.Name, nil
}

// pendingRequest is the BlockRequest to wait for: an unanswered request of
// pool that nobody waits for (abandoned by an earlier wait), so
// that a node asks for one block of a pool at a time however often its
// callers give up; else a new request. It is marked as waited for.
func (m *NodeIPAM) pendingRequest(ctx context.Context, pool string) (*vcoilv2.BlockRequest, error) {
	var pending vcoilv2.BlockRequestList
	if err := m.client.List(ctx, &pending, client.MatchingLabels{vcoilv2.LabelNode: m.cfg.NodeName, vcoilv2.LabelPool: pool}); err != nil {
		return nil, fmt.Errorf("list block requests of pool %q: %w", pool, err)
	}
	m.mu.Lock()
	for i := range pending.Items {
		br := &pending.Items[i]
		if m.abandoned[br.Name] && !m.waiting[br.Name] && !br.Done() && br.DeletionTimestamp.IsZero() && br.Spec.NodeName == m.cfg.NodeName {
			m.waiting[br.Name] = true
			m.mu.Unlock()
			return br, nil
		}
	}
	uid := m.nodeUID
	m.mu.Unlock()
	br := &vcoilv2.BlockRequest{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: m.cfg.NodeName + "-" + pool + "-",
			Labels:       map[string]string{vcoilv2.LabelNode: m.cfg.NodeName, vcoilv2.LabelPool: pool},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Node", Name: m.cfg.NodeName, UID: types.UID(uid),
			}},
		},
		Spec: vcoilv2.BlockRequestSpec{NodeName: m.cfg.NodeName, PoolName: pool},
	}
	if err := m.client.Create(ctx, br); err != nil {
		return nil, fmt.Errorf("create block request for pool %q: %w", pool, err)
	}
	m.mu.Lock()
	m.waiting[br.Name] = true
	m.mu.Unlock()
	return br, nil
}

// Free returns an allocation and releases its block when it was the block's
// last address (never the node subnet). A release the apiserver refuses is logged
// and tried again with backoff, the block kept (draining) meanwhile.
func (m *NodeIPAM) Free(ctx context.Context, a ipam.Allocation) error {
	m.mu.Lock()
	pool := m.alloc.PoolOf(a.Block)
	var release []string
	if m.alloc.Free(a.Block, a.Offset) && !m.releasing[a.Block] && !m.keepSpareLocked(pool, a.Block) {
		release = append(release, a.Block)
	}
	if _, _, inUse := m.alloc.PoolFree(pool); inUse == 0 && m.cfg.LowWatermark > 0 {
		// The pool's last address: the spare goes too.
		for _, b := range m.alloc.Blocks() {
			if b.Pool == pool && b.Name != a.Block && b.InUse == 0 && !b.NodeSubnet && !m.releasing[b.Name] {
				release = append(release, b.Name)
			}
		}
	}
	for _, name := range release {
		m.retireBlockLocked(name)
	}
	m.mu.Unlock()
	for _, name := range release {
		m.releaseOrRetry(ctx, name)
	}
	return nil
}

// retireBlockLocked stops a block from giving addresses before it is
// released. It stays in the allocator, draining, until the apiserver has
// deleted it: a release that fails is tried again, not forgotten.
func (m *NodeIPAM) retireBlockLocked(name string) {
	m.alloc.Drain(name)
	m.releasing[name] = true
	if name == m.nodeSubnet {
		m.nodeSubnet, m.loopback, m.subnetCIDR = "", ipam.NATLoopback{}, ipam.Block{}
	}
}

// release releases a retired block and forgets it once the apiserver has
// deleted it.
func (m *NodeIPAM) release(ctx context.Context, name string) error {
	if err := m.releaseBlock(ctx, name); err != nil {
		return err
	}
	m.mu.Lock()
	if m.releasing[name] && m.alloc.InUse(name) == 0 {
		m.alloc.RemoveBlock(name)
	}
	delete(m.releasing, name)
	m.mu.Unlock()
	return nil
}

// releaseOrRetry releases a retired block; when that fails, the block
// controller tries again with backoff (Config.ReleaseBackoff).
func (m *NodeIPAM) releaseOrRetry(ctx context.Context, name string) {
	err := m.release(ctx, name)
	if err == nil {
		return
	}
	m.log.Error(err, "cannot release address block; it gives no addresses and its release is tried again", "block", name)
	m.mu.Lock()
	q := m.releases
	m.mu.Unlock()
	if q != nil {
		q.AddRateLimited(reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
	}
	// Before the controller runs, it queues every retired block when it
	// starts (SetupWithManager).
}

// releaseBlock removes vcoil's finalizer from an AddressBlock and deletes it.
func (m *NodeIPAM) releaseBlock(ctx context.Context, name string) error {
	b := &vcoilv2.AddressBlock{}
	if err := m.reader.Get(ctx, client.ObjectKey{Name: name}, b); err != nil {
		return client.IgnoreNotFound(err)
	}
	if b.Labels[vcoilv2.LabelNode] != m.cfg.NodeName {
		return fmt.Errorf("release address block %q: it belongs to node %q", name, b.Labels[vcoilv2.LabelNode])
	}
	if controllerutil.ContainsFinalizer(b, vcoilv2.Finalizer) {
		patch := client.MergeFrom(b.DeepCopy())
		controllerutil.RemoveFinalizer(b, vcoilv2.Finalizer)
		if err := m.client.Patch(ctx, b, patch); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("release address block %q: %w", name, err)
		}
	}
	if err := m.client.Delete(ctx, b); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete address block %q: %w", name, err)
	}
	m.log.Info("released address block", "block", name)
	return nil
}
