// Package proxy makes vcoild a replacement for kube-proxy: it wires the
// service processor to the dataplane's renderer (nftables on the Linux
// dataplane, NAT44-ED on the VPP dataplane) and the health check node
// ports, serves kube-proxy's health and status endpoints, and, on the Linux
// dataplane, applies kube-proxy's conntrack settings. It holds no service
// logic of its own; docs/services.md and docs/vpp.md describe the whole.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"runtime/debug"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/kernelns"
	"github.com/vcoil/vcoil/v2/pkg/routes"
	"github.com/vcoil/vcoil/v2/pkg/service"
	"github.com/vcoil/vcoil/v2/pkg/service/announce"
	"github.com/vcoil/vcoil/v2/pkg/service/conntrack"
	"github.com/vcoil/vcoil/v2/pkg/service/healthcheck"
	"github.com/vcoil/vcoil/v2/pkg/service/processor"
	"github.com/vcoil/vcoil/v2/pkg/service/renderer/cnat"
	"github.com/vcoil/vcoil/v2/pkg/service/renderer/nat44"
	"github.com/vcoil/vcoil/v2/pkg/service/renderer/nftables"
)

// LabelServiceProxy on a Node, with the value Disabled, keeps vcoild from
// serving services on that node (for a node-by-node migration from
// kube-proxy). vcoild reads it at start.
const (
	LabelServiceProxy = vcoilv2.LabelServiceProxy
	Disabled          = "disabled"
)

// Options configure the service proxy of one node.
type Options struct {
	NodeName string
	// Netns is the node's network namespace ("" = vcoild's own).
	Netns string
	// PodIfPrefix names the host side of every pod interface of the node.
	PodIfPrefix string
	// NodePortCIDRs restrict NodePorts to the node's addresses inside them;
	// empty means the node's primary addresses.
	NodePortCIDRs []netip.Prefix
	// MinSyncPeriod and SyncPeriod: the processor's timing.
	Processor processor.Options
	// HealthAddr and StatusAddr place kube-proxy's health (/healthz) and
	// status (/proxyMode) servers; empty disables one.
	HealthAddr, StatusAddr string
	// Conntrack settings, applied once at start (not with VPP: its NAT
	// sessions are not the kernel's connections).
	Conntrack conntrack.Config
	// RemoveKubeProxyTables makes CleanUp delete the nftables tables
	// kube-proxy leaves behind (for a migration).
	RemoveKubeProxyTables bool
	// VPP, when set, is the node's VPP dataplane: Services are rendered
	// into its NAT44-ED plugin (configured by NAT44) instead of the
	// kernel's nftables, and a VPP restart triggers a resync at once.
	VPP   vpp.Dataplane
	NAT44 nat44.Config
	// VPPRenderer chooses the VPP plugin that serves Services:
	// VPPRendererNAT44 (the default) or VPPRendererCnat (configured by
	// Cnat).
	VPPRenderer string
	Cnat        cnat.Config
	// AnnounceLoadBalancers makes the node announce the LoadBalancer
	// addresses it serves through LBExport (package announce).
	AnnounceLoadBalancers bool
	// LBExport places the announced addresses: the export table and the
	// LoadBalancer protocol (routes.DefaultLBProtocol); its Netns is
	// Options.Netns.
	LBExport routes.ExporterConfig
	// MemoryLimit, when set, gives the first sync more room under the
	// process's memory limit (vcoild's memlimit.Keeper): see
	// memoryReturner.
	MemoryLimit MemoryBooster
	Registry    prometheus.Registerer
	Log         logr.Logger
}

// MemoryBooster raises the process's memory limit until release is
// called.
type MemoryBooster interface {
	Boost() (release func())
}

// CacheOptions are the cache settings the processor needs (trimmed
// Services, EndpointSlices and Nodes; this node's Node only unless
// allNodes, which direct routing needs), to merge into the manager's.
func CacheOptions(nodeName string, allNodes bool) map[client.Object]cache.ByObject {
	opts := processor.CacheOptions(nodeName)
	if allNodes {
		for obj, o := range opts {
			if _, ok := obj.(*corev1.Node); ok {
				o.Field = nil
				opts[obj] = o
			}
		}
	}
	return opts
}

// DisabledOn says whether node carries LabelServiceProxy=disabled.
func DisabledOn(node *corev1.Node) bool {
	return node != nil && node.Labels[LabelServiceProxy] == Disabled
}

// Setup adds the service proxy to mgr: the processor with the dataplane's
// renderer (nftables, or NAT44 with opts.VPP) and the health check
// renderer (and the LoadBalancer announcer, with the AddressPool watch it
// needs), the health and status servers. It returns the processor, whose
// Synced channel tells when the first sync completed.
func Setup(ctx context.Context, mgr manager.Manager, opts Options) (*processor.Processor, error) {
	log := opts.Log
	r, how, release, err := dataplaneRenderer(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("service proxy: %w", err)
	}
	popts := opts.Processor
	popts.NodeName = opts.NodeName
	popts.NodePortCIDRs = opts.NodePortCIDRs
	popts.Log = log.WithName("processor")
	if len(opts.NodePortCIDRs) > 0 {
		popts.LocalAddresses = func() ([]netip.Addr, error) { return localAddresses(opts.Netns) }
	}
	// The health check ports need the processor's health, and the processor
	// needs the renderers: the proxy health server reads the processor
	// through a late-bound view.
	view := &syncView{}
	health := healthcheck.NewProxyHealthServer(healthcheck.ProxyHealthConfig{
		Addr: opts.HealthAddr, Netns: opts.Netns,
		NodeEligible: healthcheck.NodeEligibility(mgr.GetClient(), opts.NodeName),
	}, view, log)
	checks := healthcheck.NewServiceHealthServer(healthcheck.ServiceHealthConfig{Netns: opts.Netns}, health, log)
	// Rendered keeps what the dataplane's renderer applied, for the
	// node's state (Processor.StateSource).
	popts.Renderers = []service.Renderer{processor.NewRendered(r, how), checks}
	if opts.AnnounceLoadBalancers {
		a, err := newAnnouncer(mgr, r, opts)
		if err != nil {
			release()
			return nil, fmt.Errorf("service proxy: %w", err)
		}
		// The gate takes the renderer's place: the announcer, last,
		// announces only what the renderer rendered successfully.
		popts.Renderers = []service.Renderer{processor.NewRendered(a.gate, how), checks, a.announcer}
	}
	p, err := processor.Setup(mgr, popts)
	if err != nil {
		release()
		return nil, err
	}
	view.p = p
	ret := memoryReturner{p: p}
	if opts.MemoryLimit != nil {
		ret.release = opts.MemoryLimit.Boost()
	}
	runnables := []manager.Runnable{checks, releaser(release), ret}
	if opts.VPP != nil {
		runnables = append(runnables, resyncOnVPPRestart{dp: opts.VPP, p: p, log: log.WithName("vpp-restarts")})
	}
	if opts.HealthAddr != "" {
		runnables = append(runnables, health)
	}
	if opts.StatusAddr != "" {
		runnables = append(runnables, healthcheck.NewProxyStatusServer(healthcheck.ProxyStatusConfig{Addr: opts.StatusAddr, Netns: opts.Netns}, log))
	}
	for _, r := range runnables {
		if err := mgr.Add(r); err != nil {
			return nil, fmt.Errorf("service proxy: %w", err)
		}
	}
	return p, nil
}

// The VPP service renderers (Options.VPPRenderer).
const (
	VPPRendererNAT44 = "nat44"
	VPPRendererCnat  = "cnat"
)

// dataplaneRenderer is the renderer of the node's dataplane, how it
// renders, and what releases it: NAT44 on VPP; else nftables, after the
// conntrack settings it relies on.
func dataplaneRenderer(ctx context.Context, opts Options) (service.Renderer, service.Rendering, func(), error) {
	log := opts.Log
	if opts.VPP != nil && opts.VPPRenderer == VPPRendererCnat {
		cfg := opts.Cnat
		if cfg.Registry == nil {
			cfg.Registry = opts.Registry
		}
		r, err := cnat.New(opts.VPP, cfg, log.WithName("cnat"))
		if err != nil {
			return nil, service.Rendering{}, nil, err
		}
		return r, r.Rendering(), func() {}, nil
	}
	if opts.VPP != nil {
		cfg := opts.NAT44
		if cfg.Registry == nil {
			cfg.Registry = opts.Registry
		}
		r, err := nat44.New(opts.VPP, cfg, log.WithName("nat44"))
		if err != nil {
			return nil, service.Rendering{}, nil, err
		}
		return r, r.Rendering(), func() {}, nil
	}
	if err := conntrack.Apply(ctx, opts.Conntrack, conntrack.Files("/"), log.WithName("conntrack")); err != nil {
		return nil, service.Rendering{}, nil, err
	}
	nft, err := nftables.New(nftables.Config{
		Netns: opts.Netns, PodIfPrefix: opts.PodIfPrefix, Registry: opts.Registry,
		DropInvalid: new(!opts.Conntrack.TCPBeLiberal),
	}, log.WithName("nftables"))
	if err != nil {
		return nil, service.Rendering{}, nil, err
	}
	return nft, nftables.Rendering(), nft.Close, nil
}

// resyncOnVPPRestart makes the processor resync its renderers as soon as
// the VPP dataplane synced a new incarnation (VPP restarted, or vcoild
// reconnected): the NAT44 renderer's mappings are gone with the old VPP,
// and the periodic resync may be long.
type resyncOnVPPRestart struct {
	dp  vpp.Dataplane
	p   *processor.Processor
	log logr.Logger
}

func (r resyncOnVPPRestart) Start(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case inc := <-r.dp.Resynced():
			r.log.Info("VPP synced a new incarnation; resyncing the services", "incarnation", inc)
			r.p.RequestResync()
		}
	}
}

type announcer struct {
	gate      *announce.Gate
	announcer *announce.Announcer
}

func newAnnouncer(mgr manager.Manager, r service.Renderer, opts Options) (announcer, error) {
	cfg := opts.LBExport
	cfg.Netns = opts.Netns
	if cfg.Protocol == 0 {
		cfg.Protocol = routes.DefaultLBProtocol
	}
	if cfg.What == "" {
		cfg.What = LBRoutes
	}
	log := opts.Log.WithName("announce")
	exporter, err := routes.NewExporter(cfg, log)
	if err != nil {
		return announcer{}, err
	}
	gate := announce.NewGate(r)
	a := announce.New(exporter, gate, log)
	if err := announce.SetupPoolWatch(mgr, a, log); err != nil {
		return announcer{}, err
	}
	return announcer{gate: gate, announcer: a}, nil
}

// LBRoutes names the exported LoadBalancer address routes in logs.
const LBRoutes = "LoadBalancer address"

// WithdrawLoadBalancers removes the LoadBalancer address routes of the
// protocol from the export table of cfg, for a node that does not announce
// them (it does not serve Services, or --lb-announce=false): the routing
// daemon then stops attracting their traffic to it. The protocol must be
// the LoadBalancer addresses' own: every route of it in the table goes.
func WithdrawLoadBalancers(ctx context.Context, cfg routes.ExporterConfig, log logr.Logger) error {
	if cfg.Protocol == 0 {
		cfg.Protocol = routes.DefaultLBProtocol
	}
	if cfg.What == "" {
		cfg.What = LBRoutes
	}
	e, err := routes.NewExporter(cfg, log)
	if err != nil {
		return fmt.Errorf("withdraw LoadBalancer addresses: %w", err)
	}
	if err := e.Sync(ctx, nil); err != nil {
		return fmt.Errorf("withdraw LoadBalancer addresses: %w", err)
	}
	return nil
}

// ReadyCheck fails until the processor's first sync completed, so that a
// node is not ready before its services work (kube-proxy's readiness).
func ReadyCheck(p *processor.Processor) func(*http.Request) error {
	return func(*http.Request) error {
		select {
		case <-p.Synced():
			return nil
		default:
			return errors.New("services not synced yet")
		}
	}
}

// CleanUp removes at start what an earlier vcoild (or kube-proxy) left in
// the node's network that this one will not keep up; serving says whether
// this node serves Services (Setup follows). A node that does not serve
// them drops vcoil's own service table (Linux) or the service network it
// made in VPP and the node's kernel (VPP: the dataplane's first sync
// removes it), and a node that does not announce LoadBalancer addresses
// withdraws those it announced before, which would go on attracting their
// traffic. kube-proxy's tables go with opts.RemoveKubeProxyTables, served
// or not.
func CleanUp(ctx context.Context, opts Options, serving bool) error {
	if err := removeTables(ctx, opts.Netns, !serving && opts.VPP == nil, opts.RemoveKubeProxyTables, opts.Log); err != nil {
		return err
	}
	if !serving && opts.VPP != nil {
		if err := opts.VPP.SetServiceNetwork(ctx, vpp.ServiceNetwork{}); err != nil {
			return err
		}
	}
	if !serving || !opts.AnnounceLoadBalancers {
		cfg := opts.LBExport
		cfg.Netns = opts.Netns
		if err := WithdrawLoadBalancers(ctx, cfg, opts.Log); err != nil {
			return err
		}
	}
	return nil
}

// ServesNode says whether the service proxy serves Node nodeName: not when
// the Node is labelled LabelServiceProxy=Disabled. It reads the Node once,
// at start, retrying for up to two minutes while it cannot.
func ServesNode(ctx context.Context, c client.Reader, nodeName string, log logr.Logger) (bool, error) {
	var node corev1.Node
	var last error
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		last = c.Get(ctx, client.ObjectKey{Name: nodeName}, &node)
		if last != nil {
			log.Info("reading this node's Node for its service proxy label; retrying", "node", nodeName, "error", last.Error())
		}
		return last == nil, nil
	})
	if err != nil && last != nil {
		err = last
	}
	if err != nil {
		return false, fmt.Errorf("read Node %q: %w", nodeName, err)
	}
	if DisabledOn(&node) {
		log.Info("not serving Services: the Node is labelled "+LabelServiceProxy+"="+Disabled, "node", nodeName)
		return false, nil
	}
	return true, nil
}

// removeTables deletes what a service proxy left in the node's namespace:
// vcoil's own table (when vcoil does not serve services there) and, when
// kubeProxy is set, kube-proxy's nftables tables (for a migration).
func removeTables(ctx context.Context, netns string, own, kubeProxy bool, log logr.Logger) error {
	if own {
		nft, err := nftables.New(nftables.Config{Netns: netns, PodIfPrefix: "-"}, log)
		if err != nil {
			return err
		}
		defer nft.Close()
		if err := nft.Remove(ctx); err != nil {
			return err
		}
	}
	if kubeProxy {
		if err := nftables.RemoveKubeProxyTables(ctx, netns); err != nil {
			return err
		}
		log.Info("removed kube-proxy's nftables tables")
	}
	return nil
}

// syncView forwards the health server's questions to the processor once
// it exists.
type syncView struct{ p *processor.Processor }

func (v *syncView) LastSync() time.Time {
	if v.p == nil {
		return time.Time{}
	}
	return v.p.LastSync()
}

func (v *syncView) PendingSince() time.Time {
	if v.p == nil {
		return time.Time{}
	}
	return v.p.PendingSince()
}

// memoryReturner hands the memory of the first sync back to the OS once it
// completed. That sync decodes every Service and EndpointSlice, builds
// every model and writes the whole table (at ten thousand services several
// times the heap that stays live), and the Go runtime keeps what it freed
// mapped, returning it only over minutes: without this, vcoild's RSS after
// a start stays near its peak (at 10,000 Services x 10 endpoints, 229 MB
// instead of 152 in the memory benchmark). It costs one garbage
// collection, once.
//
// It also ends the first sync's boost of the memory limit (release). The
// limit keeps vcoild's heap near what stays live, but the first sync
// allocates several times that at once: at 10,000 Services x 10 endpoints
// 82 MB stay live under the DaemonSet's 120 MiB, and the collector ran
// again and again during the sync: in the lab's services benchmark the
// full sync took 3.0 and 3.8 s, and 2.3 s with the limit doubled (peak
// RSS 208 instead of 156 MB). Doubled, the peak stays bounded; the limit
// holds again from the end of the sync on.
type memoryReturner struct {
	p *processor.Processor
	// release ends the boost of the memory limit; nil: none.
	release func()
}

func (m memoryReturner) Start(ctx context.Context) error {
	select {
	case <-ctx.Done():
	case <-m.p.Synced():
	}
	if m.release != nil {
		m.release()
	}
	if ctx.Err() == nil {
		debug.FreeOSMemory()
	}
	return nil
}

// releaser releases the renderer (the nftables renderer's namespace) when
// the manager stops.
type releaser func()

func (r releaser) Start(ctx context.Context) error {
	<-ctx.Done()
	r()
	return nil
}

func localAddresses(netns string) ([]netip.Addr, error) {
	n, err := kernelns.Open(netns)
	if err != nil {
		return nil, err
	}
	defer n.Close()
	addrs, err := n.NL.AddrList(nil, 0)
	if err != nil {
		return nil, fmt.Errorf("addresses of %s: %w", n.Path, err)
	}
	var out []netip.Addr
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}
