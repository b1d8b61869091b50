package vpp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/memclnt"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

// Dataplane is vcoil's VPP dataplane: the pod contract of package
// dataplane, the routes of the node's blocks, and what the services
// renderer uses (NAT44 roles of interfaces, API channels, the service
// network's routes, interface ACL lists).
type Dataplane interface {
	dataplane.Dataplane
	NATRoles
	Services
	// Blocks routes the node's blocks (the daemon's BlockExporter).
	Blocks() BlockRoutes
	// ConnectionEvents tells what an operator must see about the
	// connection to VPP (lost, a new incarnation, its resync); vcoild
	// records them as Events on its Node.
	ConnectionEvents() <-chan ConnectionEvent
	// Close disconnects from VPP and stops the connection's supervision.
	// VPP keeps what it has.
	Close()
	// ReleasePods sets up the pod interfaces held down in this VPP
	// incarnation (Config.HoldPodsForPolicies) once the policy ACLs are in
	// it; the policy stack calls it after each full sync (hold.go).
	ReleasePods(ctx context.Context) error
	// PodInterfaces and StateSource are the dataplane's parts of the node
	// state (state.go).
	PodInterfaces(ctx context.Context) (map[dataplane.PodKey]nodestate.Interface, error)
	StateSource() nodestate.Source
}

// BlockRoutes routes the node's address blocks: in the node's kernel
// through the host interconnect into VPP, and in VPP to a drop, so that an
// address without a pod goes nowhere instead of back to the host.
type BlockRoutes interface {
	Sync(ctx context.Context, blocks []netip.Prefix) error
}

// driver is the Dataplane. It holds the desired state (pods, blocks, NAT
// roles) in memory and makes VPP and the kernel match it: call by call
// while connected, and whole after every (re)connection.
type driver struct {
	cfg    Config
	log    logr.Logger
	dial   dialer
	kernel kernel
	// mtuWarned: the uplink's MTU mismatch was logged once.
	mtuWarned bool

	startOnce sync.Once
	stop      context.CancelFunc
	done      chan struct{}

	// mu guards everything below and serialises all use of ch: a GoVPP
	// channel is not for concurrent requests, and a resync must see no pod
	// change under it.
	mu sync.Mutex
	ch channel
	// open opens more channels on ch's connection (Channel).
	open func(buffer int) (api.Channel, error)
	// pid is the VPP process ch talks to (from the control ping).
	pid uint32
	// incarnation counts the connections and VPP processes synced with
	// (Services); announced is the last one sent on resynced.
	incarnation Incarnation
	announced   Incarnation
	resynced    chan Incarnation
	// synced is true when VPP and the kernel match the desired state; ready
	// is closed then, and replaced when that ends.
	synced  bool
	ready   chan struct{}
	why     error // why not synced, for Healthy and ErrNotReady
	fatal   error // set when retrying cannot help (incompatible VPP)
	initial bool  // the first sync since start: adopt what VPP holds
	// lastResync is the last sync after a (re)connection, for the node
	// state (state.go).
	lastResync nodestate.Sync

	// events and metrics report the connection (events.go, metrics.go);
	// lastSyncError is the note of the last failed sync reported in this
	// incarnation.
	events        chan ConnectionEvent
	metrics       connectionMetrics
	lastSyncError string

	pods   map[dataplane.PodKey]*podState
	blocks []netip.Prefix
	// blocksKnown: Sync has told the blocks; before that they are left
	// alone, so that a restart does not drop the routes of existing pods.
	blocksKnown bool
	nodeRoles   map[NodeInterface]NATRole
	node        nodeState

	// podRolesKnown: SetPodNATRoles was called; before that, pods get no
	// role (services are off). backends are its IPv4 addresses.
	podRolesKnown bool
	backends      map[netip.Addr]bool
	// cnat is what the cnat service renderer asked of pods (SetCnatPods);
	// nil until it asks. cnatSynced: VPP holds all of it on this
	// connection (the last syncCnat succeeded).
	cnat       *CnatSNAT
	cnatSynced bool
	// serviceNet is SetServiceNetwork's desired state, once known.
	serviceNet      ServiceNetwork
	serviceNetKnown bool
	loggedIPv6      bool
	// acls are the owners' ACL lists per interface (node interfaces, and
	// pods by address, kept while the pod is not wired); aclsSent the
	// merged lists sent in this incarnation (absent: unknown, so that the
	// first list set is sent whatever VPP holds from an earlier vcoild).
	acls     map[ACLInterface]map[ACLOwner]ACLLists
	aclsSent map[ACLInterface]aclSent
	// guard is the pod guard's ACLs in this incarnation (guard.go).
	guard guardACLs
	// sources are the paths VPP's source tables hold, by interface, read
	// at each sync and kept since (source.go).
	sources sourcePaths
	// policiesIn is the last incarnation into which the policy owner set
	// its lists without an error, and released the one whose held pods
	// ReleasePods set up (hold.go).
	policiesIn Incarnation
	released   Incarnation
	// hostPortsOn: a pod wanted a hostPort since vcoild started, so the
	// uplink is a NAT frontend and NAT forwarding is on (hostport.go).
	hostPortsOn bool
	// kernelHostPortsDone are the hostPort DNATs the node's kernel was
	// last given (hostport_kernel.go), when kernelHostPortsKnown.
	kernelHostPortsDone  []HostPortDNAT
	kernelHostPortsKnown bool
}

// podState is a desired pod and what the driver knows of its wiring on the
// current connection.
type podState struct {
	pod  dataplane.Pod // with the MTU resolved
	role NATRole
	// roleUnknown: the pod was found wired in VPP on the first sync since
	// vcoild started, and VPP may hold NAT features role does not say.
	roleUnknown bool
	// wired is true when swIfIndex on this connection is the pod's
	// interface, set up completely.
	wired     bool
	swIfIndex uint32
	vppName   string
	hostMAC   string
	// failed is the last error wiring the pod during a resync.
	failed error
	// hostPorts are the static mappings of the pod's hostPorts that VPP
	// holds on this connection.
	hostPorts []hostPortMapping
	// held: the pod's interface is wired but left admin-down until
	// ReleasePods (hold.go).
	held bool
}

// New returns the VPP dataplane for cfg. It checks the configuration; it
// neither connects, reads cfg.Allocations nor changes anything before Init.
func New(cfg Config, log logr.Logger) (Dataplane, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("vpp dataplane config: %w", err)
	}
	d := newDriver(cfg, log, socketDialer(cfg.APISocket, cfg.RequestTimeout), &netlinkKernel{nodeNetns: cfg.NodeNetns})
	if cfg.Registry != nil {
		if err := d.metrics.register(cfg.Registry); err != nil {
			return nil, fmt.Errorf("vpp dataplane: register metrics: %w", err)
		}
		if err := cfg.Registry.Register(newSourceDropCollector(d)); err != nil {
			return nil, fmt.Errorf("vpp dataplane: register metrics: %w", err)
		}
	}
	return d, nil
}

func newDriver(cfg Config, log logr.Logger, dial dialer, k kernel) *driver {
	d := &driver{
		cfg: cfg, log: log, dial: dial, kernel: k,
		ready: make(chan struct{}), why: errors.New("not started: Init was not called"), initial: true,
		pods: map[dataplane.PodKey]*podState{}, nodeRoles: map[NodeInterface]NATRole{},
		done: make(chan struct{}), resynced: make(chan Incarnation, 1),
		acls: map[ACLInterface]map[ACLOwner]ACLLists{}, aclsSent: map[ACLInterface]aclSent{},
		events: make(chan ConnectionEvent, connectionEventBuffer), metrics: newConnectionMetrics(),
	}
	if cfg.SNAT != nil {
		// SNAT's replies come back through the uplink's outside feature,
		// with or without the services renderer.
		d.nodeRoles[Uplink] = NATFrontend
	}
	return d
}

func (d *driver) Name() string { return "vpp" }

func (d *driver) Blocks() BlockRoutes { return blockRoutes{d} }

// Init starts the connection's supervision (once) and waits until VPP is
// connected and the node and vcoild's pods (Config.Allocations) are synced. It fails at
// once for what retrying cannot fix: a TAP without /dev/vhost-net, a VPP
// that does not know vcoil's messages.
func (d *driver) Init(ctx context.Context) error {
	var startErr error
	d.startOnce.Do(func() { startErr = d.start(ctx) })
	if startErr != nil {
		return startErr
	}
	d.log.Info("waiting for VPP to be connected and synced", "socket", d.cfg.APISocket)
	for {
		d.mu.Lock()
		ready, fatal := d.ready, d.fatal
		d.mu.Unlock()
		if fatal != nil {
			return fatal
		}
		select {
		case <-ready:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("wait for VPP at %s: %w", d.cfg.APISocket, errors.Join(ctx.Err(), d.notReady()))
		case <-time.After(time.Second):
			// Look at fatal again.
		}
	}
}

func (d *driver) start(ctx context.Context) error {
	if err := d.cfg.checkVhostNet(); err != nil {
		return err
	}
	d.loadAllocations()
	// The supervision outlives Init's context, which bounds only the wait
	// (a caller may give Init a deadline); Close ends it.
	ctx, d.stop = context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer close(d.done)
		d.supervise(ctx)
	}()
	return nil
}

// loadAllocations makes vcoild's pods desired, with their namespaces: after
// a VPP restart their TAPs must be made again in them.
func (d *driver) loadAllocations() {
	if d.cfg.Allocations == nil {
		return
	}
	allocated, err := d.cfg.Allocations.Pods()
	if err != nil {
		d.log.Error(err, "some of vcoild's allocations cannot be read; their pods are recovered from VPP's tags only")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, p := range allocated {
		// Without the MTU: the sync resolves it as for a pod found in VPP.
		pod := dataplane.Pod{PodKey: p.PodKey, Netns: p.Netns, Namespace: p.Namespace, Name: p.Name, IPv4: p.IPv4, IPv6: p.IPv6,
			PortMappings: p.PortMappings, SourcePrefixes: p.SourcePrefixes}
		if validateKey(pod.PodKey) != nil || (!pod.IPv4.IsValid() && !pod.IPv6.IsValid()) {
			continue
		}
		// The roles its hostPorts need; the services renderer's come with
		// its first SetPodNATRoles.
		d.pods[pod.PodKey] = &podState{pod: pod, role: d.hostPortRole(pod)}
	}
}

// Close stops the supervision and disconnects.
func (d *driver) Close() {
	if d.stop == nil {
		return
	}
	d.stop()
	<-d.done
}

// Healthy fails while VPP is unreachable or not synced, so that readiness
// drops and the runtime sees STATUS fail.
func (d *driver) Healthy(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return d.notReady()
}

// notReady is nil when synced, else the reason.
func (d *driver) notReady() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.synced {
		return nil
	}
	if d.fatal != nil {
		return d.fatal
	}
	return fmt.Errorf("%w: %v", ErrNotReady, d.why)
}

// lockReady waits (at most ReadyWait, and no longer than ctx) until VPP is
// synced and returns with d.mu held.
func (d *driver) lockReady(ctx context.Context) error {
	deadline := time.NewTimer(d.cfg.ReadyWait)
	defer deadline.Stop()
	for {
		d.mu.Lock()
		if d.synced {
			return nil
		}
		ready, why := d.ready, d.why
		if d.fatal != nil {
			why = d.fatal
		}
		d.mu.Unlock()
		select {
		case <-ready:
		case <-ctx.Done():
			return fmt.Errorf("%w (%v): %w", ErrNotReady, why, ctx.Err())
		case <-deadline.C:
			return fmt.Errorf("%w after %s: %v", ErrNotReady, d.cfg.ReadyWait, why)
		}
	}
}

// setNotReady marks the state unsynced for reason; the caller holds d.mu.
func (d *driver) setNotReady(reason error) {
	if d.synced {
		d.synced = false
		d.ready = make(chan struct{})
	}
	d.why = reason
	for _, p := range d.pods {
		p.wired = false
	}
}

// setReady marks the state synced; the caller holds d.mu.
func (d *driver) setReady() {
	if !d.synced {
		d.synced = true
		d.why = nil
		close(d.ready)
	}
}

// supervise connects, syncs, and watches VPP with a control ping until ctx
// ends. A failed ping is a lost VPP (reconnect); another PID in the reply
// is a restarted VPP (resync). CNI calls wait meanwhile.
func (d *driver) supervise(ctx context.Context) {
	backoff := newBackoff()
	for ctx.Err() == nil {
		conn, err := d.dial(ctx)
		if err != nil {
			d.mu.Lock()
			d.setNotReady(fmt.Errorf("VPP at %s is unreachable: %w", d.cfg.APISocket, err))
			d.metrics.connected.Set(0)
			d.mu.Unlock()
			delay := backoff.next()
			d.log.Info("VPP is unreachable; retrying", "socket", d.cfg.APISocket, "error", err.Error(), "retryIn", delay.String())
			_ = wait(ctx, delay)
			continue
		}
		if err := checkMessages(conn.ch); err != nil {
			conn.close()
			d.mu.Lock()
			d.fatal = err
			d.setNotReady(err)
			d.metrics.connected.Set(0)
			d.mu.Unlock()
			d.log.Error(err, "VPP is incompatible; retrying in case it is replaced", "socket", d.cfg.APISocket)
			_ = wait(ctx, 30*time.Second)
			continue
		}
		d.mu.Lock()
		d.fatal = nil
		d.mu.Unlock()
		d.serve(ctx, conn)
		conn.close()
		backoff.reset()
	}
	d.mu.Lock()
	d.setNotReady(errors.New("vcoild is stopping"))
	d.ch, d.open = nil, nil
	d.metrics.connected.Set(0)
	d.mu.Unlock()
}

// serve syncs VPP through conn and pings it until the connection is lost.
// A new connection or VPP process is a new incarnation: what renderers
// made belongs to the old one, and the ACL lists start empty.
func (d *driver) serve(ctx context.Context, conn connection) {
	ch := conn.ch
	backoff := newBackoff()
	needSync := true
	for ctx.Err() == nil {
		d.mu.Lock()
		pid, err := ping(ch)
		if err != nil {
			d.setNotReady(fmt.Errorf("lost VPP (pid %d) at %s: %w", d.pid, d.cfg.APISocket, err))
			d.ch, d.open = nil, nil
			if ctx.Err() == nil {
				d.connectionLost(err)
			}
			d.mu.Unlock()
			d.log.Info("lost the connection to VPP; reconnecting", "pid", d.pid, "error", err.Error())
			return
		}
		if d.ch != ch || pid != d.pid {
			if d.pid != 0 && pid != d.pid {
				d.log.Info("VPP restarted; replaying the desired state", "oldPid", d.pid, "pid", pid)
			} else {
				d.log.Info("connected to VPP", "pid", pid, "socket", d.cfg.APISocket)
			}
			oldPid := d.pid
			d.ch, d.open, d.pid = ch, conn.open, pid
			d.incarnation++
			d.newIncarnation(oldPid, pid)
			d.resetACLs()
			d.setNotReady(fmt.Errorf("syncing with VPP (pid %d)", pid))
			needSync = true
		}
		d.metrics.connected.Set(1)
		if needSync {
			start := time.Now()
			if err := d.resync(ctx); err != nil {
				d.why = fmt.Errorf("sync with VPP (pid %d): %w", pid, err)
				if errors.Is(err, formatversion.ErrNewer) {
					// Init returns it: vcoild holds instead of serving
					// pods over a newer vcoild's VPP objects.
					d.fatal = d.why
				}
				if ctx.Err() == nil {
					d.syncFailed(pid, err)
				}
				d.mu.Unlock()
				delay := backoff.next()
				d.log.Error(err, "sync with VPP failed; retrying", "pid", pid, "retryIn", delay.String())
				_ = wait(ctx, delay)
				continue
			}
			needSync = false
			d.fatal = nil
			backoff.reset()
			d.initial = false
			d.setReady()
			d.announce()
			took := time.Since(start)
			d.syncDone(pid, took)
			d.log.Info("synced with VPP", "pid", pid, "incarnation", d.incarnation, "pods", len(d.pods), "took", took.String())
		}
		d.mu.Unlock()
		_ = wait(ctx, d.cfg.PingInterval)
	}
}

// ping asks VPP for its PID.
func ping(ch channel) (uint32, error) {
	reply := &memclnt.ControlPingReply{}
	if err := vppapi.Call(ch, &memclnt.ControlPing{}, reply); err != nil {
		return 0, err
	}
	return reply.VpePID, nil
}

type backoff struct{ d time.Duration }

func newBackoff() *backoff { return &backoff{} }

func (b *backoff) next() time.Duration {
	switch {
	case b.d == 0:
		b.d = 500 * time.Millisecond
	case b.d < 10*time.Second:
		b.d *= 2
	}
	return b.d
}

func (b *backoff) reset() { b.d = 0 }

// ListPods returns the desired pods: vcoild's allocations, those SetupPod
// wired, and, after the first sync, those VPP held with vcoil's tags.
func (d *driver) ListPods(ctx context.Context) ([]dataplane.Pod, error) {
	if err := d.lockReady(ctx); err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	defer d.mu.Unlock()
	pods := make([]dataplane.Pod, 0, len(d.pods))
	for _, p := range d.pods {
		pod := p.pod
		pod.MTU = 0
		pods = append(pods, pod)
	}
	slices.SortFunc(pods, func(a, b dataplane.Pod) int { return compareKeys(a.PodKey, b.PodKey) })
	return pods, nil
}
