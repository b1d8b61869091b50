package main

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/daemon"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/linux"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
	"github.com/vcoil/vcoil/v2/pkg/policy/enforcer"
	"github.com/vcoil/vcoil/v2/pkg/routes"
	"github.com/vcoil/vcoil/v2/pkg/service/proxy"
	"github.com/vcoil/vcoil/v2/pkg/service/renderer/cnat"
	"github.com/vcoil/vcoil/v2/pkg/service/renderer/nat44"
)

// check refuses the flags that no part checks itself, before anything is
// read or changed.
func (f flags) check() error {
	if f.nodeName == "" {
		return errors.New("--node-name (or $NODE_NAME) is required")
	}
	// Each exporter of the export table removes every route of its
	// protocol that it did not ask for: with one protocol, the blocks'
	// and the LoadBalancer addresses' would remove each other's.
	if p := f.services.lbExportProtocol; p == f.exportProtocol || p == constants.PodRouteProtocol {
		return fmt.Errorf("--lb-export-protocol %d: must differ from --export-protocol (%d) and from the pod routes' protocol (%d)", p, f.exportProtocol, constants.PodRouteProtocol)
	}
	if err := nodestate.CheckAddr(f.stateAddr); err != nil {
		return fmt.Errorf("--state-addr %q: %w", f.stateAddr, err)
	}
	// vcoild shares the node's network with its pods' gateways: a
	// profile endpoint on any other address lets a pod read vcoild's
	// internals and make it spend CPU on profiling.
	if err := nodestate.CheckAddr(f.pprofAddr); err != nil {
		return fmt.Errorf("--pprof-addr %q: %w", f.pprofAddr, err)
	}
	if w := f.blockLowWatermark; w < 0 || w >= 1 {
		return fmt.Errorf("--block-low-watermark %v: want a fraction of a block, 0 (off) up to below 1", w)
	}
	if f.vpp.maxACLRules < 1 {
		return fmt.Errorf("--vpp-acl-max-rules %d: want a positive number", f.vpp.maxACLRules)
	}
	return nil
}

// vppConfig is the VPP dataplane's configuration from the flags; a bad
// value names its flag.
func (f flags) vppConfig() (vpp.Config, error) {
	cfg := vpp.Config{
		APISocket: f.vpp.apiSocket, NodeNetns: f.netns, MTU: f.mtu, GSO: f.vpp.gso,
		Allocations:  daemon.Allocations{StateDir: f.stateDir},
		PodInterface: vpp.InterfaceType(f.vpp.podInterface), HostInterconnect: vpp.InterfaceType(f.vpp.hostInterconnect),
		Uplink: f.vpp.uplink, NATSessions: f.vpp.natSessions, StatsSocket: f.vpp.statsSocket,
		// The policies' ACLs are gone with a restarted VPP: its pods stay
		// down until the policy agent has set them again.
		HoldPodsForPolicies: f.policies.enabled,
	}
	for _, s := range f.vpp.uplinkAddresses {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return cfg, fmt.Errorf("--vpp-uplink-address %q: %w", s, err)
		}
		cfg.UplinkAddresses = append(cfg.UplinkAddresses, p)
	}
	for flag, s := range map[string]struct {
		in  string
		out *netip.Addr
	}{"--vpp-uplink-gateway-ipv4": {f.vpp.uplinkGatewayIPv4, &cfg.UplinkGatewayIPv4}, "--vpp-uplink-gateway-ipv6": {f.vpp.uplinkGatewayIPv6, &cfg.UplinkGatewayIPv6}} {
		if s.in == "" {
			continue
		}
		a, err := netip.ParseAddr(s.in)
		if err != nil {
			return cfg, fmt.Errorf("%s %q: %w", flag, s.in, err)
		}
		*s.out = a
	}
	if f.vpp.snat {
		switch {
		case f.vpp.uplink == "":
			return cfg, errors.New("--vpp-snat needs --vpp-uplink: replies come back through it")
		case !cfg.UplinkGatewayIPv4.IsValid():
			return cfg, errors.New("--vpp-snat needs --vpp-uplink-gateway-ipv4: translated traffic leaves through it")
		case len(f.vpp.clusterCIDRs) == 0:
			return cfg, errors.New("--vpp-snat needs --cluster-cidr: without it, traffic to other nodes' pods would be translated too")
		}
		cfg.SNAT = &vpp.SNATConfig{}
		for _, s := range f.vpp.clusterCIDRs {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return cfg, fmt.Errorf("--cluster-cidr %q: %w", s, err)
			}
			cfg.SNAT.ClusterCIDRs = append(cfg.SNAT.ClusterCIDRs, p)
		}
		if !slices.ContainsFunc(cfg.SNAT.ClusterCIDRs, func(p netip.Prefix) bool { return p.Addr().Is4() }) {
			return cfg, errors.New("--cluster-cidr has no IPv4 prefix: --vpp-snat translates IPv4 only")
		}
	}
	return cfg, nil
}

// lbExport places the announced LoadBalancer addresses: the blocks' export
// table, the LoadBalancer protocol.
func (f flags) lbExport() routes.ExporterConfig {
	return routes.ExporterConfig{Netns: f.netns, Table: f.exportTable, Protocol: f.services.lbExportProtocol, What: proxy.LBRoutes}
}

// options are the service proxy's options from the flags; dp is the VPP
// dataplane when vcoild runs on it (nil on Linux). A bad value names its
// flag.
func (s serviceFlags) options(f flags, dp vpp.Dataplane) (proxy.Options, error) {
	o := proxy.Options{
		NodeName: f.nodeName, Netns: f.netns, PodIfPrefix: linux.HostIfPrefix,
		HealthAddr: s.healthAddr, StatusAddr: s.statusAddr,
		Conntrack: s.conntrack, Registry: metrics.Registry, Log: ctrl.Log.WithName("services"),
		RemoveKubeProxyTables: s.removeKubeProxyTables,
	}
	o.Conntrack.Netns = f.netns
	o.AnnounceLoadBalancers, o.LBExport = s.lbAnnounce, f.lbExport()
	o.Processor.MinSyncPeriod, o.Processor.SyncPeriod = s.minSyncPeriod, s.syncPeriod
	for _, c := range s.nodePortAddresses {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return o, fmt.Errorf("--nodeport-addresses %q: %w", c, err)
		}
		o.NodePortCIDRs = append(o.NodePortCIDRs, p.Masked())
	}
	if dp == nil {
		return o, nil
	}
	o.VPP, o.PodIfPrefix = dp, ""
	if w := f.vpp.localBackendWeight; w < 1 || w > 255 {
		return o, fmt.Errorf("--vpp-local-backend-weight %d: want 1..255", w)
	}
	o.NAT44 = nat44.Config{LocalWeight: uint8(f.vpp.localBackendWeight), Registry: metrics.Registry}
	for _, in := range s.serviceCIDRs {
		p, err := netip.ParsePrefix(in)
		if err != nil {
			return o, fmt.Errorf("--service-cidr %q: %w", in, err)
		}
		o.NAT44.ServiceCIDRs = append(o.NAT44.ServiceCIDRs, p.Masked())
	}
	switch f.vpp.serviceRenderer {
	case "", proxy.VPPRendererNAT44:
		o.VPPRenderer = proxy.VPPRendererNAT44
	case proxy.VPPRendererCnat:
		o.VPPRenderer = proxy.VPPRendererCnat
		o.Cnat = cnat.Config{ServiceCIDRs: o.NAT44.ServiceCIDRs, Registry: metrics.Registry}
		for _, in := range f.vpp.cnatForeignVIPs {
			p, err := netip.ParsePrefix(in)
			if err != nil {
				return o, fmt.Errorf("--vpp-cnat-foreign-vips %q: %w", in, err)
			}
			o.Cnat.ForeignVIPs = append(o.Cnat.ForeignVIPs, p.Masked())
		}
	default:
		return o, fmt.Errorf("--vpp-service-renderer %q: want nat44 or cnat", f.vpp.serviceRenderer)
	}
	return o, nil
}

// policyOptions are the policy enforcement's options from the flags; dp
// is the VPP dataplane when vcoild runs on it (nil on Linux), whose
// restarts the policies resync after.
func (f flags) policyOptions(dp vpp.Dataplane, restarts enforcer.Restarts) enforcer.Options {
	o := enforcer.Options{
		NodeName: f.nodeName, Netns: f.netns, PodIfPrefix: linux.HostIfPrefix, LogDrops: f.policies.logDrops,
		Registry: metrics.Registry, Log: ctrl.Log.WithName("policies"),
		Known: func() (map[types.NamespacedName][]netip.Addr, error) {
			return daemon.KnownPodAddresses(f.stateDir)
		},
	}
	if dp != nil {
		o.VPP, o.StatsSocket, o.Restarts, o.MaxACLRules = dp, f.vpp.statsSocket, restarts, f.vpp.maxACLRules
	}
	return o
}

// egressClusterCIDRs are the destinations that never go through an
// Egress, from --cluster-cidr and --service-cidr.
func (f flags) egressClusterCIDRs() ([]netip.Prefix, error) {
	var cidrs []netip.Prefix
	for _, s := range slices.Concat(f.vpp.clusterCIDRs, f.services.serviceCIDRs) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("--cluster-cidr or --service-cidr %q: %w", s, err)
		}
		cidrs = append(cidrs, p.Masked())
	}
	return cidrs, nil
}
