package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/vcoil/vcoil/v2/pkg/checkpoint"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/nodeevents"
	"github.com/vcoil/vcoil/v2/pkg/nodeipam"
)

// Options wire vcoild's parts into a manager.
type Options struct {
	NodeName  string
	Socket    string
	StateDir  string
	Dataplane dataplane.Dataplane
	// Routes: Exporter is required; Local and Direct may be nil.
	Exporter BlockExporter
	Local    BlockExporter
	Direct   DirectRouter
	// BlockRequestTimeout bounds the wait for one new block.
	BlockRequestTimeout time.Duration
	// BlockLowWatermark asks for a pool's next block ahead
	// (nodeipam.Config.LowWatermark; 0: off).
	BlockLowWatermark float64
	// Registry receives vcoild's metrics (controller-runtime's
	// metrics.Registry in vcoild).
	Registry prometheus.Registerer
	// Policies, when set, applies a new pod's network policies before its
	// ADD returns (package policy/agent).
	Policies PodPolicies
	// Egress, when set, sets up the tunnels of the Egresses a new pod
	// names before its ADD returns (package egress/agent).
	Egress PodEgress
	// CachesPods says the manager's cache holds the node's own Pods
	// (vcoild's policies or egress side configured it, with the policy
	// agent's TrimPod): an ADD then reads its pod from there first
	// (Config.PodCache). Unset, reading a Pod through the manager's client
	// would start a cache of every pod of the cluster.
	CachesPods bool
	// SweepInterval and SweepGrace run the sweep of pods whose network
	// namespace is gone (sweep.go); zero takes DefaultSweepInterval and
	// DefaultSweepGrace, a negative interval turns the sweep off.
	SweepInterval, SweepGrace time.Duration
}

// CheckpointDir is where vcoild keeps its checkpoint under its state
// directory (Options.StateDir, --state-dir).
func CheckpointDir(stateDir string) string { return filepath.Join(stateDir, "pods") }

// Daemon is a wired vcoild.
type Daemon struct {
	IPAM     *nodeipam.NodeIPAM
	Server   *Server
	Listener *Listener
	reader   client.Reader
	opts     Options
	log      logr.Logger
	// events records on the Node why vcoild holds (nil in tests that
	// build a Daemon by hand).
	events *nodeevents.Recorder
	// refused holds the error by which start refused state of a newer
	// format (formatversion.ErrNewer); readiness reports it.
	refused atomic.Pointer[error]
	// loaded is closed once start has loaded the node's blocks: only then
	// may the node subnet be looked for, or a restarted vcoild would ask for
	// a second one.
	loaded chan struct{}
	// recovered is closed once start has recovered the allocations: the
	// sweep reads the checkpoint only then.
	recovered chan struct{}
}

// Setup registers vcoild's runnables, controllers and health checks with mgr:
// the CNI listener (which first initialises the dataplane, loads the node's
// blocks and recovers the allocations), the node subnet keeper, the block
// and route controllers. vcoild's main and the tests use the same wiring.
func Setup(mgr ctrl.Manager, opts Options) (*Daemon, error) {
	log := ctrl.Log.WithName("vcoild")
	store, err := checkpoint.Open(CheckpointDir(opts.StateDir))
	if err != nil {
		return nil, err
	}
	im := nodeipam.New(mgr.GetClient(), mgr.GetAPIReader(), nodeipam.Config{
		NodeName: opts.NodeName, RequestTimeout: opts.BlockRequestTimeout,
		LowWatermark: opts.BlockLowWatermark, Registry: opts.Registry,
	}, log.WithName("ipam"))
	if err := im.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up the node block controller: %w", err)
	}
	metrics, err := NewMetrics(opts.Registry, im)
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	nodeEvents := nodeevents.New(mgr.GetEventRecorder("vcoild"), opts.NodeName)
	var podCache client.Reader
	if opts.CachesPods {
		podCache = mgr.GetClient()
	}
	srv := NewServer(Config{
		IPAM: im, Dataplane: opts.Dataplane, Store: store, Namespaces: mgr.GetClient(),
		NodeName: opts.NodeName, Metrics: metrics, Log: log.WithName("cni"),
		Policies: opts.Policies, Egress: opts.Egress,
		Recorder: mgr.GetEventRecorder("vcoild"), Pods: mgr.GetAPIReader(), PodCache: podCache, NodeEvents: nodeEvents,
	})
	d := &Daemon{IPAM: im, Server: srv, reader: mgr.GetAPIReader(), opts: opts, log: log, loaded: make(chan struct{}),
		recovered: make(chan struct{}), events: nodeEvents}
	d.Listener = &Listener{Server: srv, Socket: opts.Socket, Before: d.start}
	if err := mgr.Add(d.Listener); err != nil {
		return nil, err
	}
	if err := mgr.Add(manager.RunnableFunc(d.keepNodeSubnet)); err != nil {
		return nil, err
	}
	if opts.SweepInterval >= 0 {
		if err := mgr.Add(manager.RunnableFunc(d.sweep)); err != nil {
			return nil, err
		}
	}
	if err := (&RouteSync{
		Client: mgr.GetClient(), NodeName: opts.NodeName,
		Exporter: opts.Exporter, Local: opts.Local, Direct: opts.Direct, Log: log.WithName("routes"),
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up route sync: %w", err)
	}
	for name, check := range map[string]func(*http.Request) error{
		"grpc":      func(*http.Request) error { return d.Listener.Serving() },
		"apiserver": d.apiserverReachable,
		"dataplane": func(r *http.Request) error { return opts.Dataplane.Healthy(r.Context()) },
		"ipam":      func(*http.Request) error { return im.Ready() },
		"formats":   func(*http.Request) error { return d.Refused() },
	} {
		if err := mgr.AddReadyzCheck(name, check); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// start prepares the node before the socket opens: the dataplane's node
// set-up, the node's blocks, the allocations of the checkpoint, and the
// release of blocks nobody uses. Steps that need the apiserver are retried
// until it answers.
func (d *Daemon) start(ctx context.Context) error {
	if err := d.opts.Dataplane.Init(ctx); err != nil {
		err = fmt.Errorf("initialise the %s dataplane: %w", d.opts.Dataplane.Name(), err)
		if errors.Is(err, formatversion.ErrNewer) {
			return d.refuse(ctx, err)
		}
		return err
	}
	if err := d.retry(ctx, "load the node's address blocks", d.IPAM.Load); err != nil {
		return err
	}
	close(d.loaded)
	rep, err := d.Server.Recover(ctx)
	if errors.Is(err, formatversion.ErrNewer) {
		return d.refuse(ctx, err)
	}
	if err != nil {
		// Pods whose state could not be rebuilt keep running; the errors are
		// for the operator, and GC or DEL will clean up.
		d.log.Error(err, "recovery was incomplete")
	}
	d.log.Info("recovered allocations", "restored", rep.Restored, "adopted", rep.Adopted, "stale", rep.Stale, "tornDown", rep.TornDown, "held", rep.Held)
	if err := d.IPAM.ReleaseUnused(ctx); err != nil {
		d.log.Error(err, "cannot release unused blocks")
	}
	close(d.recovered)
	return nil
}

// sweep runs the sweep of vanished pods once the allocations are recovered.
func (d *Daemon) sweep(ctx context.Context) error {
	select {
	case <-d.recovered:
	case <-ctx.Done():
		return nil
	}
	interval, grace := d.opts.SweepInterval, d.opts.SweepGrace
	if interval == 0 {
		interval = DefaultSweepInterval
	}
	if grace <= 0 {
		grace = DefaultSweepGrace
	}
	d.Server.RunSweeper(ctx, interval, grace)
	return nil
}

// ReasonNewerStateFormat is the Warning Event on the Node of a vcoild that
// holds because the node's state is of a newer format than its own.
const ReasonNewerStateFormat = "NewerStateFormat"

// refuse holds vcoild when the node's state is of a newer format than it
// knows (a downgrade): it changes nothing and never serves CNI requests,
// says why in its log and in its readiness ("formats" check) until it is
// stopped, rather than exiting into a restart loop whose reason scrolls
// away. The error ends the listener at shutdown.
func (d *Daemon) refuse(ctx context.Context, err error) error {
	d.refused.Store(&err)
	// The reason is on the Node too: controller-runtime's /readyz withholds
	// it, and the log scrolls away.
	d.events.Warning(ReasonNewerStateFormat, "Start", err.Error()+"; this vcoild changes nothing and serves no pods")
	d.log.Error(err, "the node's state was written by a newer vcoild; this vcoild changes nothing and serves no pods until a vcoild of that version or newer runs")
	<-ctx.Done()
	return err
}

// Refused is the error by which vcoild refused the node's state (nil when
// it did not): state of a newer format than this vcoild's.
func (d *Daemon) Refused() error {
	if err := d.refused.Load(); err != nil {
		return *err
	}
	return nil
}

// keepNodeSubnet acquires the node subnet (or finds it) and publishes its NAT
// loopback once the node's blocks are loaded, and acquires it again if it is
// lost (its pool was deleted), retrying while there is no default pool.
func (d *Daemon) keepNodeSubnet(ctx context.Context) error {
	select {
	case <-d.loaded:
	case <-ctx.Done():
		return nil
	}
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Cap: 30 * time.Second, Steps: 1 << 30}
	first := true
	for {
		delay := 10 * time.Second
		if first || d.IPAM.Ready() != nil {
			if err := d.IPAM.EnsureNodeSubnet(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				delay = backoff.Step()
				d.log.Error(err, "no node subnet yet; pods cannot get addresses", "retryIn", delay.String())
			} else {
				first = false
				backoff.Duration = time.Second
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
	}
}

func (d *Daemon) retry(ctx context.Context, what string, f func(context.Context) error) error {
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Cap: 30 * time.Second, Steps: 1 << 30}
	for {
		err := f(ctx)
		if err == nil {
			return nil
		}
		delay := backoff.Step()
		d.log.Error(err, "retrying", "step", what, "retryIn", delay.String())
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// apiserverReachable reads the node's own Node object from the apiserver,
// not from the cache: readiness must fail when the apiserver is gone.
func (d *Daemon) apiserverReachable(r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	return d.reader.Get(ctx, client.ObjectKey{Name: d.opts.NodeName}, &corev1.Node{})
}
