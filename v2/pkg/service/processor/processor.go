package processor

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/nodeevents"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// ReasonServiceInvalid is the reason of the Warning Event on a Service that
// vcoil skips because it cannot represent it.
const ReasonServiceInvalid = "VcoilServiceInvalid"

// ReasonNodeInvalid is the reason of the Warning Event on this node's Node
// when part of it (the NAT loopback annotation) cannot be read.
const ReasonNodeInvalid = "VcoilNodeInvalid"

// ReasonServiceSyncFailed is the reason of the Warning Event on this
// node's Node when a renderer fails: once per distinct error until every
// renderer is in sync again (sync_events.go).
const ReasonServiceSyncFailed = "ServiceSyncFailed"

// Options configure a Processor.
type Options struct {
	// NodeName is the node vcoild runs on.
	NodeName string
	// NodePortCIDRs, when set, restrict NodePorts to the node's addresses
	// inside them (kube-proxy's --nodeport-addresses); LocalAddresses then
	// lists the node's interface addresses.
	NodePortCIDRs  []netip.Prefix
	LocalAddresses func() ([]netip.Addr, error)
	// Renderers receive the same calls, in this order.
	Renderers []service.Renderer
	// MinSyncPeriod and SyncPeriod default to constants.ServiceMinSyncPeriod
	// and constants.ServiceSyncPeriod.
	MinSyncPeriod, SyncPeriod time.Duration
	// Recorder, when set, gets the Warning Events on invalid Services.
	Recorder events.EventRecorder
	Log      logr.Logger
}

// Processor keeps the Services, EndpointSlices and this node's Node it is
// fed, and syncs the renderers with the model built from them, with
// kube-proxy's timing: changes are batched for at least MinSyncPeriod and
// sent as one Update; every SyncPeriod each renderer gets a full Resync; a
// renderer whose call failed gets a Resync at its next round, retried with a
// backoff from MinSyncPeriod to SyncPeriod.
//
// The input methods (SetService, ...) may be called from any goroutine; Run
// is the only caller of the renderers.
type Processor struct {
	opts           Options
	log            logr.Logger
	clock          func() time.Time
	nodeEvents     *nodeevents.Recorder
	kick           chan struct{}
	synced         chan struct{}
	syncedOnce     sync.Once
	renderFailures atomic.Uint64
	// resyncRequested makes the next step resync every renderer
	// (RequestResync).
	resyncRequested atomic.Bool

	mu         sync.Mutex
	services   map[service.ID]*corev1.Service
	slices     map[service.ID]map[string]*discoveryv1.EndpointSlice
	sliceOwner map[types.NamespacedName]service.ID
	node       *corev1.Node
	dirty      map[service.ID]struct{}
	nodeDirty  bool
	// pendingSince is when the oldest change not yet taken by a round
	// arrived; unsyncedSince when the oldest change taken by a round that
	// has not yet reached every renderer did (or when a renderer failed).
	pendingSince, unsyncedSince time.Time
	lastSync                    time.Time
	reported                    map[string]string // resourceVersion of the last Event, by reason and object

	// Owned by the loop (step).
	models     map[service.ID]*service.Service
	nodeInfo   NodeInfo
	nodeModel  service.Node
	haveNode   bool
	renderers  []*rendererState
	lastRound  time.Time
	lastResync time.Time
}

type rendererState struct {
	r          service.Renderer
	needResync bool
	failures   int
	retryAt    time.Time
}

// New returns a Processor with nothing in it yet.
func New(opts Options) (*Processor, error) {
	if opts.NodeName == "" {
		return nil, errors.New("service processor: node name is required")
	}
	if len(opts.Renderers) == 0 {
		return nil, errors.New("service processor: no renderer")
	}
	if len(opts.NodePortCIDRs) > 0 && opts.LocalAddresses == nil {
		return nil, errors.New("service processor: NodePort CIDRs need the node's local addresses")
	}
	if opts.MinSyncPeriod <= 0 {
		opts.MinSyncPeriod = constants.ServiceMinSyncPeriod
	}
	if opts.SyncPeriod <= 0 {
		opts.SyncPeriod = constants.ServiceSyncPeriod
	}
	if opts.MinSyncPeriod > opts.SyncPeriod {
		return nil, fmt.Errorf("service processor: min sync period %v is longer than the sync period %v", opts.MinSyncPeriod, opts.SyncPeriod)
	}
	p := &Processor{
		opts:       opts,
		log:        opts.Log,
		clock:      time.Now,
		nodeEvents: nodeevents.New(opts.Recorder, opts.NodeName),
		kick:       make(chan struct{}, 1),
		synced:     make(chan struct{}),
		services:   map[service.ID]*corev1.Service{},
		slices:     map[service.ID]map[string]*discoveryv1.EndpointSlice{},
		sliceOwner: map[types.NamespacedName]service.ID{},
		dirty:      map[service.ID]struct{}{},
		reported:   map[string]string{},
		models:     map[service.ID]*service.Service{},
		nodeInfo:   NodeInfo{Name: opts.NodeName},
	}
	for _, r := range opts.Renderers {
		p.renderers = append(p.renderers, &rendererState{r: r})
	}
	return p, nil
}

// SetService adds or replaces a Service.
func (p *Processor) SetService(svc *corev1.Service) {
	id := service.ID{Namespace: svc.Namespace, Name: svc.Name}
	p.mu.Lock()
	p.services[id] = svc
	p.markLocked(id)
	p.mu.Unlock()
	p.wake()
}

// DeleteService removes a Service.
func (p *Processor) DeleteService(namespace, name string) {
	id := service.ID{Namespace: namespace, Name: name}
	p.mu.Lock()
	delete(p.services, id)
	delete(p.reported, ReasonServiceInvalid+" "+id.String())
	p.markLocked(id)
	p.mu.Unlock()
	p.wake()
}

// SetEndpointSlice adds or replaces an EndpointSlice. A slice without the
// kubernetes.io/service-name label belongs to no Service.
func (p *Processor) SetEndpointSlice(s *discoveryv1.EndpointSlice) {
	nn := types.NamespacedName{Namespace: s.Namespace, Name: s.Name}
	p.mu.Lock()
	p.removeSliceLocked(nn)
	if name := s.Labels[discoveryv1.LabelServiceName]; name != "" {
		id := service.ID{Namespace: s.Namespace, Name: name}
		if p.slices[id] == nil {
			p.slices[id] = map[string]*discoveryv1.EndpointSlice{}
		}
		p.slices[id][s.Name] = s
		p.sliceOwner[nn] = id
		p.markLocked(id)
	}
	p.mu.Unlock()
	p.wake()
}

// DeleteEndpointSlice removes an EndpointSlice.
func (p *Processor) DeleteEndpointSlice(namespace, name string) {
	p.mu.Lock()
	p.removeSliceLocked(types.NamespacedName{Namespace: namespace, Name: name})
	p.mu.Unlock()
	p.wake()
}

func (p *Processor) removeSliceLocked(nn types.NamespacedName) {
	id, ok := p.sliceOwner[nn]
	if !ok {
		return
	}
	delete(p.sliceOwner, nn)
	delete(p.slices[id], nn.Name)
	if len(p.slices[id]) == 0 {
		delete(p.slices, id)
	}
	p.markLocked(id)
}

// SetNode sets this node's Node; Nodes of other names are ignored.
func (p *Processor) SetNode(n *corev1.Node) {
	if n.Name != p.opts.NodeName {
		return
	}
	p.mu.Lock()
	p.node = n
	p.nodeDirty = true
	p.pendingLocked()
	p.mu.Unlock()
	p.wake()
}

// DeleteNode forgets this node's Node when name is this node's; other
// Nodes' deletions are ignored (vcoild may cache every Node).
func (p *Processor) DeleteNode(name string) {
	if name != p.opts.NodeName {
		return
	}
	p.mu.Lock()
	p.node = nil
	p.nodeDirty = true
	p.pendingLocked()
	p.mu.Unlock()
	p.wake()
}

func (p *Processor) markLocked(id service.ID) {
	p.dirty[id] = struct{}{}
	p.pendingLocked()
}

func (p *Processor) pendingLocked() {
	if p.pendingSince.IsZero() {
		p.pendingSince = p.clock()
	}
}

func (p *Processor) wake() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// RequestResync makes the next round, which it starts at once, a full
// Resync of every renderer, whatever the sync periods say: a renderer's
// target lost its state (VPP restarted) and must be rebuilt now rather than
// at the next periodic resync. It may be called from any goroutine; calls
// before the round starts make one resync.
func (p *Processor) RequestResync() {
	p.resyncRequested.Store(true)
	p.wake()
}

// LastSync is when the last round that left every renderer in sync
// completed; zero before the first.
func (p *Processor) LastSync() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastSync
}

// PendingSince is when the oldest change that has not reached every
// renderer arrived (or when a renderer failed); zero when the renderers are
// in sync. kube-proxy's /healthz fails when this is older than twice the
// sync period.
func (p *Processor) PendingSince() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return earliest(p.pendingSince, p.unsyncedSince)
}

// earliest of two times, where zero means none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// Synced is closed once every renderer has completed its first sync.
func (p *Processor) Synced() <-chan struct{} { return p.synced }

// RenderFailures counts the renderer calls that failed.
func (p *Processor) RenderFailures() uint64 { return p.renderFailures.Load() }

// Run syncs the renderers until ctx ends. Its first call to them is a
// Resync, so it must be called only once the processor holds the complete
// contents of the caches (Setup does so); otherwise the first Resync would
// remove services that merely had not been fed yet.
func (p *Processor) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.kick:
		case <-timer.C:
		}
		next := p.step(ctx)
		timer.Reset(next.Sub(p.clock()))
	}
}

// step does the round due at the processor's clock, if any, and returns
// when the next one is due.
func (p *Processor) step(ctx context.Context) time.Time {
	now := p.clock()
	p.mu.Lock()
	pending := len(p.dirty) > 0 || p.nodeDirty
	p.mu.Unlock()
	requested := p.resyncRequested.Swap(false)
	full := requested || p.lastResync.IsZero() || !now.Before(p.lastResync.Add(p.opts.SyncPeriod))
	update := pending && !now.Before(p.lastRound.Add(p.opts.MinSyncPeriod))
	retry := slices.ContainsFunc(p.renderers, func(r *rendererState) bool { return r.needResync && !now.Before(r.retryAt) })
	if !full && !update && !retry {
		return p.nextRound(pending)
	}

	changes := p.collect()
	var state *service.State
	for i, r := range p.renderers {
		var err error
		switch {
		case full || (r.needResync && !now.Before(r.retryAt)):
			if state == nil {
				state = p.state()
			}
			err = r.r.Resync(ctx, state)
			if err != nil {
				err = fmt.Errorf("resync service renderer %d (%d services): %w", i, len(state.Services), err)
			}
		case r.needResync, changes.Empty():
			continue
		default:
			err = r.r.Update(ctx, changes)
			if err != nil {
				err = fmt.Errorf("update service renderer %d (%d upserts, %d deletes): %w", i, len(changes.Upsert), len(changes.Delete), err)
			}
		}
		if err != nil {
			r.needResync = true
			r.failures++
			backoff := p.opts.MinSyncPeriod << min(r.failures-1, 20)
			r.retryAt = now.Add(min(backoff, p.opts.SyncPeriod))
			p.renderFailures.Add(1)
			p.log.Error(err, "Service renderer failed; it will be resynced", "retryIn", r.retryAt.Sub(now))
			p.reportSyncFailure(err)
			continue
		}
		r.needResync, r.failures, r.retryAt = false, 0, time.Time{}
	}
	p.lastRound = now
	if full {
		p.lastResync = now
	}

	inSync := !slices.ContainsFunc(p.renderers, func(r *rendererState) bool { return r.needResync })
	p.mu.Lock()
	if inSync {
		p.unsyncedSince = time.Time{}
		p.lastSync = p.clock()
	} else if p.unsyncedSince.IsZero() {
		p.unsyncedSince = now
	}
	pending = len(p.dirty) > 0 || p.nodeDirty
	p.mu.Unlock()
	if inSync {
		p.syncedOnce.Do(func() { close(p.synced) })
		p.nodeEvents.Recovered(ReasonServiceSyncFailed)
	}
	return p.nextRound(pending)
}

func (p *Processor) nextRound(pending bool) time.Time {
	next := p.lastResync.Add(p.opts.SyncPeriod)
	if pending {
		next = minTime(next, p.lastRound.Add(p.opts.MinSyncPeriod))
	}
	for _, r := range p.renderers {
		if r.needResync {
			next = minTime(next, r.retryAt)
		}
	}
	return next
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// collect takes the pending changes: it rebuilds the node and every dirty
// Service and returns what differs from the models the renderers were last
// given, which it then holds as current.
func (p *Processor) collect() *service.Changes {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unsyncedSince = earliest(p.unsyncedSince, p.pendingSince)
	p.pendingSince = time.Time{}

	changes := &service.Changes{}
	// The node's addresses can change without a Node event (--nodeport-
	// addresses reads the interfaces), so the node is rebuilt every round.
	if n, ok := p.buildNodeLocked(); ok && (!p.haveNode || !reflect.DeepEqual(n, p.nodeModel)) {
		p.nodeModel, p.haveNode = n, true
		changes.Node = &n
	}
	p.nodeDirty = false
	if info := p.nodeInfoLocked(); info != p.nodeInfo {
		// Zone hints and local endpoints depend on these: rebuild all.
		p.nodeInfo = info
		for id := range p.services {
			p.dirty[id] = struct{}{}
		}
		for id := range p.models {
			p.dirty[id] = struct{}{}
		}
	}

	for id := range p.dirty {
		m := p.buildLocked(id)
		old, had := p.models[id]
		switch {
		case m == nil && had:
			delete(p.models, id)
			changes.Delete = append(changes.Delete, id)
		case m != nil && (!had || !reflect.DeepEqual(m, old)):
			p.models[id] = m
			changes.Upsert = append(changes.Upsert, m)
		}
	}
	clear(p.dirty)
	slices.SortFunc(changes.Upsert, func(a, b *service.Service) int { return a.ID.Compare(b.ID) })
	slices.SortFunc(changes.Delete, service.ID.Compare)
	return changes
}

func (p *Processor) nodeInfoLocked() NodeInfo {
	if p.node == nil {
		return NodeInfo{Name: p.opts.NodeName}
	}
	return NodeInfoOf(p.node)
}

// buildNodeLocked returns the node model, or false when it cannot be built
// now (the local addresses cannot be read) and the previous one stays.
func (p *Processor) buildNodeLocked() (service.Node, bool) {
	node := p.node
	if node == nil {
		node = &corev1.Node{}
		node.Name = p.opts.NodeName
	}
	var local []netip.Addr
	if len(p.opts.NodePortCIDRs) > 0 {
		var err error
		if local, err = p.opts.LocalAddresses(); err != nil {
			p.log.Error(err, "Cannot read the node's addresses; NodePort addresses unchanged")
			return service.Node{}, false
		}
	}
	n, err := NodeModel(node, p.opts.NodePortCIDRs, local)
	if err != nil && p.node != nil {
		p.reportLocked(p.node, ReasonNodeInvalid, err)
	}
	return n, true
}

// buildLocked returns the model of a Service, or nil when vcoil does not
// serve it (gone, ignored, or invalid: then an Event says why).
func (p *Processor) buildLocked(id service.ID) *service.Service {
	svc := p.services[id]
	if svc == nil {
		return nil
	}
	var epSlices []*discoveryv1.EndpointSlice
	for _, s := range p.slices[id] {
		epSlices = append(epSlices, s)
	}
	m, err := Build(svc, epSlices, p.nodeInfo)
	if err != nil {
		p.reportLocked(svc, ReasonServiceInvalid, err)
		return nil
	}
	return m
}

// reportLocked logs err and records a Warning Event on obj, once per
// resourceVersion so that periodic rebuilds do not flood the apiserver.
func (p *Processor) reportLocked(obj client.Object, reason string, err error) {
	key := reason + " " + obj.GetNamespace() + "/" + obj.GetName()
	if p.reported[key] == obj.GetResourceVersion() {
		return
	}
	p.reported[key] = obj.GetResourceVersion()
	p.log.Error(err, "Skipped what vcoil cannot represent", "reason", reason)
	if p.opts.Recorder != nil {
		p.opts.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, reason, "Render", "%v", err)
	}
}

// state is the whole current state, in a map of its own: renderers may keep
// it.
func (p *Processor) state() *service.State {
	s := &service.State{Node: p.nodeModel, Services: make(map[service.ID]*service.Service, len(p.models))}
	for id, m := range p.models {
		s.Services[id] = m
	}
	return s
}
