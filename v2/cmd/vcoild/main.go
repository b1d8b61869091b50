// Command vcoild is vcoil's node daemon: it gives pods addresses from the
// node's blocks, wires them into the dataplane and exports block routes; and,
// as `vcoild install-cni`, installs the CNI binary and configuration on the
// node. See docs/vcoild.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	vcoilv2 "github.com/vcoil/vcoil/v2/api/v2"
	"github.com/vcoil/vcoil/v2/pkg/checkpoint"
	"github.com/vcoil/vcoil/v2/pkg/cniinstall"
	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/daemon"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/linux"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/egress"
	egressagent "github.com/vcoil/vcoil/v2/pkg/egress/agent"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/kubescheme"
	"github.com/vcoil/vcoil/v2/pkg/nodeevents"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
	statenft "github.com/vcoil/vcoil/v2/pkg/nodestate/nftables"
	"github.com/vcoil/vcoil/v2/pkg/policy/agent"
	policyrenderer "github.com/vcoil/vcoil/v2/pkg/policy/renderer"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer/acl"
	polnft "github.com/vcoil/vcoil/v2/pkg/policy/renderer/nftables"
	"github.com/vcoil/vcoil/v2/pkg/routes"
	"github.com/vcoil/vcoil/v2/pkg/service/conntrack"
	"github.com/vcoil/vcoil/v2/pkg/service/proxy"
	"github.com/vcoil/vcoil/v2/pkg/service/renderer/nat44"
)

type flags struct {
	nodeName, socket, stateDir, dataplane string
	netns                                 string
	metricsAddr, healthAddr               string
	stateAddr                             string
	mtu, podTable, podRulePriority        int
	exportTable, exportProtocol           int
	directRouting                         bool
	directTable, directRulePriority       int
	blockRequestTimeout                   time.Duration
	vpp                                   vppFlags
	services                              serviceFlags
	policies                              policyFlags
	egress                                bool
}

// policyFlags configure NetworkPolicy enforcement (docs/policy.md).
type policyFlags struct {
	enabled, logDrops bool
}

// serviceFlags configure the service proxy (docs/services.md, and
// docs/vpp.md for the VPP dataplane).
type serviceFlags struct {
	enabled, removeKubeProxyTables bool
	lbAnnounce                     bool
	lbExportProtocol               int
	nodePortAddresses              []string
	minSyncPeriod, syncPeriod      time.Duration
	healthAddr, statusAddr         string
	conntrack                      conntrack.Config
	// serviceCIDRs: the cluster's service network (used on the VPP
	// dataplane).
	serviceCIDRs []string
}

// vppFlags configure the VPP dataplane (--dataplane=vpp); docs/vpp.md.
type vppFlags struct {
	apiSocket, uplink, podInterface, hostInterconnect string
	statsSocket                                       string
	uplinkAddresses                                   []string
	uplinkGatewayIPv4, uplinkGatewayIPv6              string
	gso                                               bool
	natSessions                                       uint32
	localBackendWeight                                int
	snat                                              bool
	clusterCIDRs                                      []string
}

func main() {
	var f flags
	zapOpts := zap.Options{}
	root := &cobra.Command{
		Use:          "vcoild",
		Short:        "vcoil's node daemon",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(*cobra.Command, []string) error {
			ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
			return run(ctrl.SetupSignalHandler(), f)
		},
	}
	fs := root.Flags()
	fs.StringVar(&f.nodeName, "node-name", os.Getenv("NODE_NAME"), "name of this node (default $NODE_NAME)")
	fs.StringVar(&f.socket, "socket", constants.DaemonSocket, "UNIX socket of the CNI gRPC service")
	fs.StringVar(&f.stateDir, "state-dir", constants.DaemonStateDir, "directory of the allocation checkpoint")
	fs.StringVar(&f.dataplane, "dataplane", "linux", "dataplane: linux or vpp")
	fs.StringVar(&f.netns, "netns", "", "network namespace (path) holding the node's network, when it is not vcoild's own: for tests and the local cluster, where vcoild runs beside the node")
	fs.StringVar(&f.metricsAddr, "metrics-addr", constants.DaemonMetricsAddr, "address of the Prometheus /metrics endpoint")
	fs.StringVar(&f.healthAddr, "health-addr", constants.DaemonHealthAddr, "address of /healthz and /readyz")
	fs.StringVar(&f.stateAddr, "state-addr", constants.DaemonStateAddr, "loopback address (127.0.0.0/8 or ::1) and port serving the node's state to kubectl-vcoil through a port-forward; empty disables it")
	fs.IntVar(&f.mtu, "mtu", 0, "MTU of pod interfaces; 0 takes the node uplink's (a conflist's mtu overrides both)")
	fs.IntVar(&f.podTable, "pod-table", constants.PodTable, "routing table of the host routes to pods (Linux dataplane)")
	fs.IntVar(&f.podRulePriority, "pod-rule-priority", constants.PodRulePriority, "priority of the rule that looks up the pod table")
	fs.IntVar(&f.exportTable, "export-table", routes.DefaultExportTable, "routing table the node's blocks are exported to, for BIRD")
	fs.IntVar(&f.exportProtocol, "export-protocol", routes.DefaultProtocol, "route protocol number marking vcoil's routes")
	fs.BoolVar(&f.directRouting, "direct-routing", false, "route other nodes' blocks via their InternalIP (nodes on one L2 network, no routing daemon)")
	fs.IntVar(&f.directTable, "direct-table", routes.DefaultDirectTable, "routing table of the direct routes")
	fs.IntVar(&f.directRulePriority, "direct-rule-priority", routes.DefaultDirectRulePriority, "priority of the rule that looks up the direct table")
	fs.DurationVar(&f.blockRequestTimeout, "block-request-timeout", constants.BlockRequestTimeout, "how long an ADD waits for a new address block")
	fs.StringVar(&f.vpp.apiSocket, "vpp-api-socket", vpp.DefaultAPISocket, "VPP's binary API socket (VPP dataplane)")
	fs.StringVar(&f.vpp.statsSocket, "vpp-stats-socket", "", "VPP's stats socket (startup.conf statseg { socket-name }); when set, each policy ACL's hit counters are exported as metrics")
	fs.StringVar(&f.vpp.podInterface, "vpp-pod-interface", string(vpp.Auto), "pod interface type: tap (needs /dev/vhost-net), af_packet (a veth) or auto (tap where /dev/vhost-net exists, else af_packet)")
	fs.StringVar(&f.vpp.hostInterconnect, "vpp-host-interconnect", "", "host interconnect type: tap, af_packet or auto (default: the pod interface's)")
	fs.BoolVar(&f.vpp.gso, "vpp-gso", false, "generic segmentation offload on TAPs")
	fs.StringVar(&f.vpp.uplink, "vpp-uplink", "", "name of the VPP interface towards the node's network (host-eth1, a DPDK NIC); empty: none")
	fs.StringSliceVar(&f.vpp.uplinkAddresses, "vpp-uplink-address", nil, "prefix to put on the uplink (repeatable)")
	fs.StringVar(&f.vpp.uplinkGatewayIPv4, "vpp-uplink-gateway-ipv4", "", "VPP's IPv4 default route via this gateway on the uplink (default: through the host)")
	fs.StringVar(&f.vpp.uplinkGatewayIPv6, "vpp-uplink-gateway-ipv6", "", "VPP's IPv6 default route via this gateway on the uplink (default: through the host)")
	fs.Uint32Var(&f.vpp.natSessions, "vpp-nat-sessions", constants.VPPNATSessions, "size of VPP's NAT44-ED session table (per worker thread), for the service proxy")
	fs.BoolVar(&f.vpp.snat, "vpp-snat", false, "VPP dataplane: translate pods' IPv4 traffic to destinations outside --cluster-cidr to the uplink's address (needs --vpp-uplink, --vpp-uplink-gateway-ipv4 and --cluster-cidr)")
	fs.StringSliceVar(&f.vpp.clusterCIDRs, "cluster-cidr", nil, "the cluster's address ranges (pod CIDRs, node networks, service CIDRs; repeatable): destinations that --vpp-snat never translates and that never go through an Egress (besides the AddressPools' subnets and the ServiceCIDRs, which vcoild reads itself)")
	fs.IntVar(&f.vpp.localBackendWeight, "vpp-local-backend-weight", constants.VPPLocalBackendWeight, "weight (1..255) of a service's backends on this node against remote ones (1: even, as kube-proxy)")
	f.services.conntrack = conntrack.DefaultConfig()
	fs.BoolVar(&f.policies.enabled, "network-policies", true, "enforce NetworkPolicies on this node's pods; false leaves them to another agent")
	fs.BoolVar(&f.policies.logDrops, "policy-log-drops", false, "log packets that NetworkPolicies deny to the kernel log (nftables), at most ten a second")
	fs.BoolVar(&f.egress, "egress", true, "set up the tunnels of the Egresses that this node's pods name (annotation egress.vcoil.io/<namespace>); false leaves them unserved")
	fs.BoolVar(&f.services.enabled, "service-proxy", true, "render Services into the dataplane (replacing kube-proxy); false leaves them to another proxy")
	fs.StringSliceVar(&f.services.serviceCIDRs, "service-cidr", nil, "the cluster's service CIDR (repeatable); on VPP, routed from the node into VPP so that the node's own processes reach cluster IPs")
	fs.BoolVar(&f.services.removeKubeProxyTables, "remove-kube-proxy-tables", false, "at start, delete the nftables tables kube-proxy leaves behind (for a migration)")
	fs.BoolVar(&f.services.lbAnnounce, "lb-announce", true, "announce the LoadBalancer addresses this node serves, as /32 and /128 routes in --export-table (for BIRD); false withdraws them")
	fs.IntVar(&f.services.lbExportProtocol, "lb-export-protocol", routes.DefaultLBProtocol, "route protocol number marking the announced LoadBalancer addresses in --export-table; must differ from --export-protocol and from the pod routes' (31)")
	fs.StringSliceVar(&f.services.nodePortAddresses, "nodeport-addresses", nil, "CIDRs whose node addresses serve NodePorts (default: the node's primary address of each family)")
	fs.DurationVar(&f.services.minSyncPeriod, "service-min-sync-period", constants.ServiceMinSyncPeriod, "least time between two syncs of the service rules; changes arriving sooner are batched")
	fs.DurationVar(&f.services.syncPeriod, "service-sync-period", constants.ServiceSyncPeriod, "period of the full resync of the service rules")
	fs.StringVar(&f.services.healthAddr, "proxy-health-addr", constants.ProxyHealthAddr, "address of the proxy health server (/healthz, /livez, as kube-proxy's); empty disables it")
	fs.StringVar(&f.services.statusAddr, "proxy-status-addr", constants.ProxyStatusAddr, "address of /proxyMode (as kube-proxy's metrics address); empty disables it")
	fs.IntVar(&f.services.conntrack.MaxPerCore, "conntrack-max-per-core", constants.ConntrackMaxPerCore, "nf_conntrack_max = max(this x CPUs, --conntrack-min); 0 leaves it")
	fs.IntVar(&f.services.conntrack.Min, "conntrack-min", constants.ConntrackMin, "least nf_conntrack_max")
	fs.DurationVar(&f.services.conntrack.TCPEstablishedTimeout, "conntrack-tcp-timeout-established", constants.ConntrackTCPEstablishedTimeout, "nf_conntrack_tcp_timeout_established; 0 leaves it")
	fs.DurationVar(&f.services.conntrack.TCPCloseWaitTimeout, "conntrack-tcp-timeout-close-wait", constants.ConntrackTCPCloseWaitTimeout, "nf_conntrack_tcp_timeout_close_wait; 0 leaves it")
	fs.DurationVar(&f.services.conntrack.UDPTimeout, "conntrack-udp-timeout", constants.ConntrackUDPTimeout, "nf_conntrack_udp_timeout; 0 leaves it")
	fs.DurationVar(&f.services.conntrack.UDPStreamTimeout, "conntrack-udp-timeout-stream", constants.ConntrackUDPStreamTimeout, "nf_conntrack_udp_timeout_stream; 0 leaves it")
	fs.BoolVar(&f.services.conntrack.TCPBeLiberal, "conntrack-tcp-be-liberal", constants.ConntrackTCPBeLiberal, "set nf_conntrack_tcp_be_liberal; false leaves it")
	goFlags := flag.NewFlagSet("", flag.ContinueOnError)
	zapOpts.BindFlags(goFlags)
	fs.AddGoFlagSet(goFlags)
	fs.AddGoFlagSet(flag.CommandLine) // --kubeconfig
	root.AddCommand(installCommand())
	if err := root.Execute(); err != nil {
		os.Exit(1)
	}
}

func installCommand() *cobra.Command {
	opts := cniinstall.Options{}
	var dataplane string
	cmd := &cobra.Command{
		Use:   "install-cni",
		Short: "install the vcoil CNI binary (and the plugins it chains) and " + constants.CNIConfName + " on this node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			portmap := opts.Conflist.PortMap
			if err := opts.Conflist.ForDataplane(dataplane); err != nil {
				return fmt.Errorf("--dataplane: %w", err)
			}
			if cmd.Flags().Changed("portmap") {
				if portmap && opts.Conflist.HostPorts {
					return errors.New("--portmap: the VPP dataplane serves hostPorts itself (portmap's rules in the node's kernel never see pod traffic); leave it out with --dataplane=vpp")
				}
				opts.Conflist.PortMap = portmap
			}
			res, err := cniinstall.Install(opts)
			if err != nil {
				return err
			}
			for _, b := range res.Binaries {
				fmt.Fprintln(cmd.OutOrStdout(), "installed", b)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "wrote", res.Conflist)
			for _, e := range res.Earlier {
				fmt.Fprintf(cmd.OutOrStdout(), "warning: %s sorts before %s: the runtime uses it instead of vcoil\n", e, opts.ConfName)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&opts.SourceDir, "source-dir", constants.CNISourceDir, "directory holding the binaries to install (vcoil, portmap, ...)")
	fs.StringVar(&opts.BinDir, "bin-dir", constants.CNIBinDir, "the node's CNI binary directory")
	fs.StringVar(&opts.ConfDir, "conf-dir", constants.CNIConfDir, "the node's CNI configuration directory")
	fs.StringVar(&opts.ConfName, "conf-name", constants.CNIConfName, "file name of vcoil's conflist")
	fs.StringVar(&opts.Conflist.Socket, "socket", constants.DaemonSocket, "vcoild's socket, written into the conflist")
	fs.IntVar(&opts.Conflist.MTU, "mtu", 0, "MTU written into the conflist; 0 lets vcoild choose")
	fs.StringVar(&opts.Conflist.CNIVersion, "cni-version", constants.CNIVersion, "cniVersion of the conflist")
	fs.StringVar(&opts.Conflist.Name, "network-name", constants.CNINetworkName, "network name of the conflist")
	fs.StringVar(&dataplane, "dataplane", "linux", "the dataplane vcoild runs on this node (linux or vpp): on linux the portmap plugin is chained for hostPort, on vpp vcoil gets the portMappings capability and serves hostPorts in VPP")
	fs.BoolVar(&opts.Conflist.PortMap, "portmap", true, "chain the portmap plugin for hostPort (--dataplane=linux; false leaves hostPorts unserved)")
	return cmd
}

func run(ctx context.Context, f flags) error {
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
	log := ctrl.Log.WithName("setup")
	scheme, err := kubescheme.New()
	if err != nil {
		return err
	}
	dp, local, err := newDataplane(f, metrics.Registry)
	if err != nil {
		return err
	}
	vppDP, _ := dp.(vpp.Dataplane)
	// The service proxy's flags are checked before anything is read or
	// changed, whether this node serves Services or not.
	serviceOpts, err := f.services.options(f, vppDP)
	if err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	exporter, err := routes.NewExporter(routes.ExporterConfig{Netns: f.netns, Table: f.exportTable, Protocol: f.exportProtocol}, ctrl.Log.WithName("export"))
	if err != nil {
		return err
	}
	var direct daemon.DirectRouter
	if f.directRouting {
		d, err := routes.NewDirectRouter(routes.DirectConfig{Netns: f.netns, Table: f.directTable, RulePriority: f.directRulePriority, Protocol: f.exportProtocol}, ctrl.Log.WithName("direct"))
		if err != nil {
			return err
		}
		direct = d
	}

	services, err := serviceProxyOn(ctx, cfg, scheme, f)
	if err != nil {
		return err
	}
	byObject := map[client.Object]cache.ByObject{
		// Only this node's requests; every block (for direct routes).
		&vcoilv2.BlockRequest{}: {Label: labels.SelectorFromSet(labels.Set{vcoilv2.LabelNode: f.nodeName})},
	}
	if f.policies.enabled || f.egress {
		// Pods trimmed to what the policies and the egress side read.
		maps.Copy(byObject, agent.CacheOptions())
	}
	if services {
		maps.Copy(byObject, proxy.CacheOptions(f.nodeName, f.directRouting))
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: f.metricsAddr},
		HealthProbeBindAddress: f.healthAddr,
		Cache:                  cache.Options{ByObject: byObject},
	})
	if err != nil {
		return fmt.Errorf("create manager: %w", err)
	}
	if err := proxy.RemoveTables(ctx, f.netns, !services && f.dataplane == "linux", f.services.removeKubeProxyTables, ctrl.Log.WithName("services")); err != nil {
		return err
	}
	if !services && vppDP != nil {
		// A VPP node that stopped serving drops the service network an
		// earlier vcoild made (service routes, sinks, the nftables table):
		// the dataplane's first sync removes it.
		if err := vppDP.SetServiceNetwork(ctx, vpp.ServiceNetwork{}); err != nil {
			return err
		}
	}
	if !services || !f.services.lbAnnounce {
		// A node that stopped serving (or announcing) must stop attracting
		// the traffic of what it announced before.
		if err := proxy.WithdrawLoadBalancers(ctx, f.lbExport(), ctrl.Log.WithName("services")); err != nil {
			return err
		}
	}
	// A VPP restart concerns both the services and the policies: the
	// dataplane announces it on one channel, which restarts fans out.
	restarts := &vppRestarts{}
	if vppDP != nil {
		restarts.dp = vppDP
		restarts.events = nodeevents.New(mgr.GetEventRecorder("vcoild"), f.nodeName)
		restarts.services = make(chan vpp.Incarnation, 1)
		serviceOpts.VPP = restartsOf{Dataplane: vppDP, ch: restarts.services}
		if err := mgr.Add(restarts); err != nil {
			return err
		}
	}
	// parts are the node state's sources of the parts that run on this
	// node (services, policies, egress).
	var parts []nodestate.Named
	if services {
		if serviceOpts.VPP != nil && len(serviceOpts.NAT44.ServiceCIDRs) == 0 {
			log.Info("no --service-cidr: the node's own processes (the kubelet's probes, hostNetwork pods) will not reach Services through VPP")
		}
		p, err := proxy.Setup(ctx, mgr, serviceOpts)
		if err != nil {
			return err
		}
		if err := mgr.AddReadyzCheck("services", proxy.ReadyCheck(p)); err != nil {
			return err
		}
		parts = append(parts, nodestate.Named{Name: "services", Source: p.StateSource()})
	}
	var policies daemon.PodPolicies
	if !f.policies.enabled && vppDP == nil {
		// Rules an earlier vcoild left would go on filtering.
		if err := polnft.RemoveTable(ctx, f.netns, ""); err != nil {
			return fmt.Errorf("--network-policies=false: %w", err)
		}
	}
	if f.policies.enabled {
		a, err := setupPolicies(ctx, mgr, f, vppDP)
		if err != nil {
			return err
		}
		policies = a
		parts = append(parts, nodestate.Named{Name: "policies", Source: a.StateSource()})
		if err := mgr.AddReadyzCheck("policies", a.Ready); err != nil {
			return err
		}
		if vppDP != nil {
			restarts.policies = a
		}
	}
	var egressClients daemon.PodEgress
	if f.egress {
		a, err := setupEgress(ctx, mgr, f)
		if err != nil {
			return err
		}
		egressClients = a
		parts = append(parts, nodestate.Named{Name: "egress", Source: a.StateSource()})
		if err := mgr.AddReadyzCheck("egress", a.Ready); err != nil {
			return err
		}
	}
	d, err := daemon.Setup(mgr, daemon.Options{
		NodeName: f.nodeName, Socket: f.socket, StateDir: f.stateDir,
		Dataplane: dp, Exporter: exporter, Local: local, Direct: direct,
		BlockRequestTimeout: f.blockRequestTimeout,
		Registry:            metrics.Registry,
		Policies:            policies,
		Egress:              egressClients,
	})
	if err != nil {
		return err
	}
	if err := addStateServer(mgr, f, dp, d, parts); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	log.Info("starting vcoild", "node", f.nodeName, "dataplane", dp.Name(), "socket", f.socket, "services", services)
	return mgr.Start(ctx)
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

// setupPolicies runs the NetworkPolicy stack with the dataplane's renderer:
// nftables on the Linux dataplane, VPP's ACLs on VPP.
func setupPolicies(ctx context.Context, mgr ctrl.Manager, f flags, vppDP vpp.Dataplane) (*agent.Agent, error) {
	log := ctrl.Log.WithName("policies")
	var r policyrenderer.Renderer
	name := "nftables"
	if vppDP != nil {
		ar, err := acl.New(vppDP, acl.Config{Registry: metrics.Registry, StatsSocket: f.vpp.statsSocket}, log.WithName("acl"))
		if err != nil {
			return nil, fmt.Errorf("network policies: %w", err)
		}
		r, name = ar, "vpp-acl"
	} else {
		nr, err := polnft.New(polnft.Config{Netns: f.netns, LogDrops: f.policies.logDrops, Registry: metrics.Registry, Log: log.WithName("nftables")})
		if err != nil {
			return nil, fmt.Errorf("network policies: %w", err)
		}
		r = nr
	}
	return agent.Setup(ctx, mgr, agent.Options{
		NodeName: f.nodeName, Renderer: r, RendererName: name,
		Reader: mgr.GetAPIReader(), Log: log,
		Known: func() (map[types.NamespacedName][]netip.Addr, error) {
			return knownPods(daemon.CheckpointDir(f.stateDir))
		},
	})
}

// setupEgress runs the client side of Egresses: the tunnels in the pods'
// netns (docs/egress.md).
func setupEgress(ctx context.Context, mgr ctrl.Manager, f flags) (*egressagent.Agent, error) {
	var cidrs []netip.Prefix
	for _, s := range slices.Concat(f.vpp.clusterCIDRs, f.services.serviceCIDRs) {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("--cluster-cidr or --service-cidr %q: %w", s, err)
		}
		cidrs = append(cidrs, p.Masked())
	}
	return egressagent.Setup(ctx, mgr, egressagent.Options{
		NodeName: f.nodeName, Apply: egress.ApplyClient, FoU: egress.FoUAvailable,
		Reader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("vcoild"),
		ClusterCIDRs: cidrs, Log: ctrl.Log.WithName("egress"),
		Known: func() (map[types.NamespacedName]egressagent.Pod, error) {
			entries, err := checkpointEntries(daemon.CheckpointDir(f.stateDir))
			if err != nil {
				return nil, err
			}
			out := map[types.NamespacedName]egressagent.Pod{}
			for _, e := range entries {
				if e.Name == "" || e.Netns == "" {
					continue
				}
				p := egressagent.Pod{Netns: e.Netns}
				for _, a := range []netip.Addr{e.IPv4, e.IPv6} {
					if a.IsValid() {
						p.IPs = append(p.IPs, a)
					}
				}
				out[types.NamespacedName{Namespace: e.Namespace, Name: e.Name}] = p
			}
			return out, nil
		},
	})
}

// checkpointEntries reads the checkpoint for the agents' first view of
// the node's pods. Files of a newer format are left to the daemon, which
// holds and reports them (docs/operations.md, "Formats and upgrades"): an
// agent failing here would make vcoild exit before it could say why.
func checkpointEntries(dir string) ([]checkpoint.Entry, error) {
	store, err := checkpoint.Open(dir)
	if err != nil {
		return nil, err
	}
	entries, err := store.Load()
	if err != nil && !errors.Is(err, formatversion.ErrNewer) {
		return nil, err
	}
	return entries, nil
}

// knownPods reads the pods' addresses from vcoild's checkpoint.
func knownPods(dir string) (map[types.NamespacedName][]netip.Addr, error) {
	entries, err := checkpointEntries(dir)
	if err != nil {
		return nil, err
	}
	out := map[types.NamespacedName][]netip.Addr{}
	for _, e := range entries {
		if e.Name == "" {
			continue
		}
		key := types.NamespacedName{Namespace: e.Namespace, Name: e.Name}
		for _, a := range []netip.Addr{e.IPv4, e.IPv6} {
			if a.IsValid() && !slices.Contains(out[key], a) {
				out[key] = append(out[key], a)
			}
		}
	}
	return out, nil
}

// vppRestarts reads the VPP dataplane's announcements of a new
// incarnation and hands each to the service proxy (its own channel) and to
// the policy agent, each of which must render again into the new VPP. It
// records the dataplane's connection events as Events on the Node.
type vppRestarts struct {
	dp       vpp.Dataplane
	services chan vpp.Incarnation
	policies *agent.Agent
	events   *nodeevents.Recorder
}

func (v *vppRestarts) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("vpp-restarts")
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-v.dp.ConnectionEvents():
			if e.Warning {
				v.events.Warning(e.Reason, "Resync", e.Note)
			} else {
				v.events.Normal(e.Reason, "Resync", e.Note)
			}
		case inc := <-v.dp.Resynced():
			// Only the latest matters: replace one the proxy did not read.
			select {
			case <-v.services:
			default:
			}
			v.services <- inc
			if v.policies != nil {
				log.Info("VPP synced a new incarnation; resyncing the network policies", "incarnation", inc)
				if err := v.policies.Resync(ctx); err != nil {
					log.Error(err, "cannot resync the network policies after a VPP restart; pods' ADDs and the next change retry")
					v.events.Warning(vpp.ReasonResyncFailed, "Resync", fmt.Sprintf(
						"network policies not resynced into VPP (incarnation %d): %v; the next policy change or pod ADD retries", inc, err))
				}
			}
		}
	}
}

// restartsOf is the VPP dataplane with the service proxy's own channel of
// new incarnations.
type restartsOf struct {
	vpp.Dataplane
	ch chan vpp.Incarnation
}

func (r restartsOf) Resynced() <-chan vpp.Incarnation { return r.ch }

// newDataplane builds the chosen dataplane and the routes it needs for the
// node's own blocks; the VPP dataplane registers its metrics with reg.
func newDataplane(f flags, reg prometheus.Registerer) (dataplane.Dataplane, daemon.BlockExporter, error) {
	switch f.dataplane {
	case "linux":
		dp, err := linux.New(linux.Config{NodeNetns: f.netns, PodTable: f.podTable, PodRulePriority: f.podRulePriority, MTU: f.mtu}, ctrl.Log.WithName("linux"))
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

// vppConfig is the VPP dataplane's configuration from the flags; a bad
// value names its flag.
func (f flags) vppConfig() (vpp.Config, error) {
	cfg := vpp.Config{
		APISocket: f.vpp.apiSocket, NodeNetns: f.netns, MTU: f.mtu, GSO: f.vpp.gso,
		Allocations:  daemon.Allocations{StateDir: f.stateDir},
		PodInterface: vpp.InterfaceType(f.vpp.podInterface), HostInterconnect: vpp.InterfaceType(f.vpp.hostInterconnect),
		Uplink: f.vpp.uplink, NATSessions: f.vpp.natSessions,
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

// serviceProxyOn decides whether vcoild serves Services on this node: the
// flag and the Node's vcoil.io/service-proxy label, read once at start
// from the apiserver.
func serviceProxyOn(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, f flags) (bool, error) {
	log := ctrl.Log.WithName("services")
	if !f.services.enabled {
		log.Info("not serving Services: --service-proxy=false")
		return false, nil
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return false, fmt.Errorf("apiserver client: %w", err)
	}
	var node corev1.Node
	var last error
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		last = c.Get(ctx, client.ObjectKey{Name: f.nodeName}, &node)
		if last != nil {
			log.Info("reading this node's Node for its service proxy label; retrying", "node", f.nodeName, "error", last.Error())
		}
		return last == nil, nil
	})
	if err != nil && last != nil {
		err = last
	}
	if err != nil {
		return false, fmt.Errorf("read Node %q: %w", f.nodeName, err)
	}
	if proxy.DisabledOn(&node) {
		log.Info("not serving Services: the Node is labelled "+proxy.LabelServiceProxy+"="+proxy.Disabled, "node", f.nodeName)
		return false, nil
	}
	return true, nil
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
	return o, nil
}
