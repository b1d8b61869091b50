// Package enforcer makes vcoild enforce NetworkPolicies on its node: it
// chooses the dataplane's renderer (nftables on the Linux dataplane, VPP's
// ACLs on the VPP dataplane), wires it and the policy agent into the
// manager, and on VPP has the agent render again into each new VPP. It is
// the policy side's counterpart of the service proxy's Setup (package
// service/proxy) and holds no policy logic of its own.
//
// It is a package of its own rather than part of package agent: the agent
// knows only the renderer interface, so that it runs (and is tested) with
// any renderer, and it stays free of the dataplanes that the renderers
// import; this package is where the two meet.
package enforcer

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/policy/agent"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer/acl"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer/nftables"
)

// Restarts is where the agent asks to render again into each new VPP
// incarnation (vpp.Restarts).
type Restarts interface {
	OnRestart(vpp.Resync)
}

// HeldPods are the pods the VPP dataplane holds down in a new VPP
// incarnation until the policies' ACLs are in it (vpp.Dataplane, with
// vpp.Config.HoldPodsForPolicies).
type HeldPods interface {
	ReleasePods(ctx context.Context) error
}

// Options configure the policy enforcement of one node.
type Options struct {
	NodeName string
	// Netns is the node's network namespace ("" = vcoild's own), where
	// the nftables renderer keeps its table.
	Netns string
	// PodIfPrefix starts the name of every pod's node-side interface (the
	// Linux dataplane's HostIfPrefix): the nftables renderer drops what
	// comes out of one with a source no local pod may use.
	PodIfPrefix string
	// LogDrops logs the packets the policies deny to the kernel log
	// (nftables only).
	LogDrops bool
	// VPP, when set, is the node's VPP dataplane: the policies are
	// rendered into its ACLs instead of the kernel's nftables, with the
	// ACLs' hit counters read from StatsSocket when it is set, the agent
	// resyncs through Restarts after a VPP restart, and after each of its
	// full syncs the pods VPP holds down come up (HeldPods).
	VPP         vpp.Dataplane
	StatsSocket string
	// MaxACLRules bounds the ACL rules of the policies in VPP (the ACL
	// renderer's Config.MaxRules; 0: its default).
	MaxACLRules int
	Restarts    Restarts
	// Known lists the local pods this node's vcoild gave addresses to (the
	// agent's Options.Known).
	Known    func() (map[types.NamespacedName][]netip.Addr, error)
	Registry prometheus.Registerer
	Log      logr.Logger
}

// Setup adds the policy agent with the dataplane's renderer to mgr and
// returns it.
func Setup(ctx context.Context, mgr manager.Manager, opts Options) (*agent.Agent, error) {
	r, name, err := dataplaneRenderer(opts)
	if err != nil {
		return nil, fmt.Errorf("network policies: %w", err)
	}
	var after func(context.Context) error
	if opts.VPP != nil {
		after = releaseAfterSync(opts.VPP)
	}
	a, err := agent.Setup(ctx, mgr, agent.Options{
		NodeName: opts.NodeName, Renderer: r, RendererName: name,
		Reader: mgr.GetAPIReader(), Log: opts.Log, Known: opts.Known,
		AfterResync: after,
	})
	if err != nil {
		return nil, err
	}
	if opts.VPP != nil && opts.Restarts != nil {
		// VPP's ACLs are gone with the VPP that held them.
		opts.Restarts.OnRestart(vpp.Resync{What: "network policies", Retry: "the policy agent retries with backoff (1s doubling to 1 min) and its readiness fails until a resync succeeds", Do: a.Resync})
	}
	return a, nil
}

// releaseAfterSync is the agent's AfterResync on VPP: after the first
// sync and after each resync, the pods held down in VPP's incarnation come
// up, their ACLs being in it. Its failure (the sync went into an older
// incarnation, or VPP refused) fails the sync, which the agent retries
// with backoff while its readiness fails: the pods stay down meanwhile.
func releaseAfterSync(held HeldPods) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := held.ReleasePods(ctx); err != nil {
			return fmt.Errorf("bring up the pods VPP holds down for their policies: %w", err)
		}
		return nil
	}
}

// dataplaneRenderer is the renderer of the node's dataplane and its name:
// VPP's ACLs on VPP, else nftables.
func dataplaneRenderer(opts Options) (renderer.Renderer, string, error) {
	if opts.VPP != nil {
		r, err := acl.New(opts.VPP, acl.Config{Registry: opts.Registry, StatsSocket: opts.StatsSocket, MaxRules: opts.MaxACLRules}, opts.Log.WithName("acl"))
		if err != nil {
			return nil, "", err
		}
		return r, "vpp-acl", nil
	}
	r, err := nftables.New(nftables.Config{Netns: opts.Netns, PodIfPrefix: opts.PodIfPrefix, LogDrops: opts.LogDrops, Registry: opts.Registry, Log: opts.Log.WithName("nftables")})
	if err != nil {
		return nil, "", err
	}
	return r, "nftables", nil
}

// CleanUp removes at start what an earlier vcoild left that this one will
// not keep up: on the Linux dataplane, when it does not enforce policies,
// the nftables table of the policies, whose rules would go on filtering.
func CleanUp(ctx context.Context, opts Options, enforcing bool) error {
	if enforcing || opts.VPP != nil {
		return nil
	}
	return nftables.RemoveTable(ctx, opts.Netns, "")
}
