package main

import (
	"context"
	"fmt"
	"maps"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/daemon"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/linux"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/egress"
	egressagent "github.com/vcoil/vcoil/v2/pkg/egress/agent"
	"github.com/vcoil/vcoil/v2/pkg/nodeevents"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
	statenft "github.com/vcoil/vcoil/v2/pkg/nodestate/nftables"
	"github.com/vcoil/vcoil/v2/pkg/policy/agent"
	"github.com/vcoil/vcoil/v2/pkg/policy/enforcer"
	"github.com/vcoil/vcoil/v2/pkg/routes"
	"github.com/vcoil/vcoil/v2/pkg/service/proxy"
)

// newDataplane builds the chosen dataplane and the routes it needs for the
// node's own blocks; either dataplane registers its metrics with reg.
func newDataplane(f flags, reg prometheus.Registerer) (dataplane.Dataplane, daemon.BlockExporter, error) {
	switch f.dataplane {
	case "linux":
		dp, err := linux.New(linux.Config{NodeNetns: f.netns, PodTable: f.podTable, PodRulePriority: f.podRulePriority, MTU: f.mtu, Registry: reg}, ctrl.Log.WithName("linux"))
		if err != nil {
			return nil, nil, fmt.Errorf("linux dataplane: %w", err)
		}
		local, err := routes.NewLocalBlocks(routes.LocalBlocksConfig{Netns: f.netns, Table: f.podTable, Protocol: f.exportProtocol}, ctrl.Log.WithName("local-blocks"))
		if err != nil {
			return nil, nil, err
		}
		return dp, local, nil
	case "vpp":
		cfg, err := f.vppConfig()
		if err != nil {
			return nil, nil, err
		}
		cfg.Registry = reg
		dp, err := vpp.New(cfg, ctrl.Log.WithName("vpp"))
		if err != nil {
			return nil, nil, fmt.Errorf("vpp dataplane: %w", err)
		}
		return dp, dp.Blocks(), nil
	}
	return nil, nil, fmt.Errorf("--dataplane %q: want linux or vpp", f.dataplane)
}

// blockRoutes are the routes of the blocks: the export table's (for BIRD)
// and, with --direct-routing, the direct routes to other nodes' blocks.
func (f flags) blockRoutes() (*routes.Exporter, daemon.DirectRouter, error) {
	exporter, err := routes.NewExporter(routes.ExporterConfig{Netns: f.netns, Table: f.exportTable, Protocol: f.exportProtocol}, ctrl.Log.WithName("export"))
	if err != nil {
		return nil, nil, err
	}
	if !f.directRouting {
		return exporter, nil, nil
	}
	direct, err := routes.NewDirectRouter(routes.DirectConfig{Netns: f.netns, Table: f.directTable, RulePriority: f.directRulePriority, Protocol: f.exportProtocol}, ctrl.Log.WithName("direct"))
	if err != nil {
		return nil, nil, err
	}
	return exporter, direct, nil
}

// serviceProxyOn decides whether vcoild serves Services on this node: the
// flag and the Node's vcoil.io/service-proxy label, read once at start
// from the apiserver.
func (f flags) serviceProxyOn(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme) (bool, error) {
	log := ctrl.Log.WithName("services")
	if !f.services.enabled {
		log.Info("not serving Services: --service-proxy=false")
		return false, nil
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return false, fmt.Errorf("apiserver client: %w", err)
	}
	return proxy.ServesNode(ctx, c, f.nodeName, log)
}

// cachesPods says the manager caches the node's own Pods: the policies
// and the egress side read them (and an ADD, from the same cache).
func (f flags) cachesPods() bool { return f.policies.enabled || f.egress }

// newManager is the controller manager with a cache of what the parts
// that run on this node read.
func (f flags) newManager(cfg *rest.Config, scheme *runtime.Scheme, services bool) (ctrl.Manager, error) {
	byObject := map[client.Object]cache.ByObject{
		// Only this node's requests; every block (for direct routes).
		&vcoilv2.BlockRequest{}: {Label: labels.SelectorFromSet(labels.Set{vcoilv2.LabelNode: f.nodeName})},
	}
	if f.cachesPods() {
		// The node's own Pods, trimmed to what the policies and the egress
		// side read (the other nodes' pods come as PodEndpoints).
		maps.Copy(byObject, agent.CacheOptions(f.nodeName))
	}
	if services {
		maps.Copy(byObject, proxy.CacheOptions(f.nodeName, f.directRouting))
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: f.metricsAddr},
		HealthProbeBindAddress: f.healthAddr,
		PprofBindAddress:       f.pprofAddr,
		Cache: cache.Options{
			ByObject: byObject,
			// No part of vcoild reads who wrote which field, and the
			// managed fields are often the largest part of a small object
			// (a PodEndpoint, a NetworkPolicy, a Namespace) of which
			// vcoild caches every one of the cluster. The types with their
			// own trim above drop them there.
			DefaultTransform: cache.TransformStripManagedFields(),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	return mgr, nil
}

// parts are what runs on this node beside the daemon (services, policies,
// egress): their node state sources, and what the daemon tells of a pod's
// ADD and DEL.
type parts struct {
	state    []nodestate.Named
	policies daemon.PodPolicies
	egress   daemon.PodEgress
}

// setupParts adds the parts the flags turn on to mgr; serviceOpts are the
// service proxy's (used when services is set), vppDP the VPP dataplane
// (nil on Linux).
func (f flags) setupParts(ctx context.Context, mgr ctrl.Manager, services bool, serviceOpts proxy.Options, vppDP vpp.Dataplane) (parts, error) {
	var p parts
	// A VPP restart concerns both the services and the policies: the
	// dataplane announces it on one channel, which restarts fans out.
	var restarts *vpp.Restarts
	if vppDP != nil {
		restarts = vpp.NewRestarts(vppDP, nodeevents.New(mgr.GetEventRecorder("vcoild"), f.nodeName), ctrl.Log.WithName("vpp-restarts"))
		serviceOpts.VPP = restarts.Subscribe()
		if err := mgr.Add(restarts); err != nil {
			return p, err
		}
	}
	if services {
		if serviceOpts.VPP != nil && len(serviceOpts.NAT44.ServiceCIDRs) == 0 {
			ctrl.Log.WithName("setup").Info("no --service-cidr: the node's own processes (the kubelet's probes, hostNetwork pods) will not reach Services through VPP")
		}
		s, err := proxy.Setup(ctx, mgr, serviceOpts)
		if err != nil {
			return p, err
		}
		if err := mgr.AddReadyzCheck("services", proxy.ReadyCheck(s)); err != nil {
			return p, err
		}
		p.state = append(p.state, nodestate.Named{Name: "services", Source: s.StateSource()})
	}
	policyOpts := f.policyOptions(vppDP, restarts)
	if err := enforcer.CleanUp(ctx, policyOpts, f.policies.enabled); err != nil {
		return p, fmt.Errorf("--network-policies=false: %w", err)
	}
	if f.policies.enabled {
		a, err := enforcer.Setup(ctx, mgr, policyOpts)
		if err != nil {
			return p, err
		}
		p.policies = a
		p.state = append(p.state, nodestate.Named{Name: "policies", Source: a.StateSource()})
		if err := mgr.AddReadyzCheck("policies", a.Ready); err != nil {
			return p, err
		}
	}
	if f.egress {
		a, err := f.setupEgress(ctx, mgr)
		if err != nil {
			return p, err
		}
		p.egress = a
		p.state = append(p.state, nodestate.Named{Name: "egress", Source: a.StateSource()})
		if err := mgr.AddReadyzCheck("egress", a.Ready); err != nil {
			return p, err
		}
	}
	return p, nil
}

// setupEgress runs the client side of Egresses: the tunnels in the pods'
// netns (docs/egress.md).
func (f flags) setupEgress(ctx context.Context, mgr ctrl.Manager) (*egressagent.Agent, error) {
	cidrs, err := f.egressClusterCIDRs()
	if err != nil {
		return nil, err
	}
	return egressagent.Setup(ctx, mgr, egressagent.Options{
		NodeName: f.nodeName, Apply: egress.ApplyClient, FoU: egress.FoUAvailable,
		Reader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("vcoild"),
		ClusterCIDRs: cidrs, Log: ctrl.Log.WithName("egress"),
		Known: func() (map[types.NamespacedName]egressagent.Pod, error) {
			known, err := daemon.KnownPodNetns(f.stateDir)
			if err != nil {
				return nil, err
			}
			out := make(map[types.NamespacedName]egressagent.Pod, len(known))
			for k, p := range known {
				out[k] = egressagent.Pod(p)
			}
			return out, nil
		},
	})
}

// addStateServer serves the node's state on --state-addr (nothing when it
// is empty): the daemon's pods and blocks with their dataplane interfaces,
// the parts that run on this node, VPP's objects on VPP, and vcoil's
// nftables tables in the node's namespace.
func addStateServer(mgr ctrl.Manager, f flags, dp dataplane.Dataplane, d *daemon.Daemon, parts []nodestate.Named) error {
	sources := []nodestate.Named{{Name: "daemon", Source: d.StateSource()}}
	if l, ok := dp.(daemon.InterfaceLister); ok {
		sources = append(sources, nodestate.Named{Name: "interfaces", Source: daemon.PodInterfaces(l)})
	}
	sources = append(sources, parts...)
	if v, ok := dp.(vpp.Dataplane); ok {
		sources = append(sources, nodestate.Named{Name: "vpp", Source: v.StateSource()})
	}
	sources = append(sources, nodestate.Named{Name: "nftables", Source: statenft.Source(f.netns, []statenft.Table{
		{Family: "inet", Name: constants.PolicyTable},
		{Family: "inet", Name: constants.ServiceTable},
		{Family: "ip", Name: vpp.ServiceTable},
		{Family: "ip", Name: vpp.HostPortTable},
	})})
	srv, err := nodestate.NewServer(nodestate.ServerConfig{
		Addr: f.stateAddr, Flag: "--state-addr", Node: f.nodeName, Dataplane: dp.Name(),
		Sources: sources, Log: ctrl.Log.WithName("state"),
	})
	if err != nil {
		return err
	}
	return mgr.Add(srv)
}
