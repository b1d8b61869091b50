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
	"os"
	"time"

	"github.com/spf13/cobra"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/vcoil/vcoil/v2/pkg/cniinstall"
	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/daemon"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/informerlist"
	"github.com/vcoil/vcoil/v2/pkg/kubescheme"
	"github.com/vcoil/vcoil/v2/pkg/memlimit"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer/acl"
	"github.com/vcoil/vcoil/v2/pkg/routes"
	"github.com/vcoil/vcoil/v2/pkg/service/conntrack"
	"github.com/vcoil/vcoil/v2/pkg/service/proxy"
)

type flags struct {
	nodeName, socket, stateDir, dataplane string
	netns                                 string
	metricsAddr, healthAddr               string
	stateAddr, pprofAddr                  string
	mtu, podTable, podRulePriority        int
	exportTable, exportProtocol           int
	directRouting                         bool
	directTable, directRulePriority       int
	blockRequestTimeout                   time.Duration
	blockLowWatermark                     float64
	podSweepInterval, podSweepGrace       time.Duration
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
	maxACLRules                                       int
	uplinkAddresses                                   []string
	uplinkGatewayIPv4, uplinkGatewayIPv6              string
	gso                                               bool
	natSessions                                       uint32
	localBackendWeight                                int
	serviceRenderer                                   string
	cnatForeignVIPs                                   []string
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
			// Before any client exists: the informers fill their caches
			// with a LIST, which brings a node's Services into the kernel
			// about a second sooner after a restart (package informerlist).
			lists := informerlist.UseLists(os.LookupEnv)
			ctrl.Log.WithName("setup").Info("how the informers fill their caches", "list", lists, "switch", informerlist.EnvVar)
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
	fs.StringVar(&f.pprofAddr, "pprof-addr", "", "loopback address (127.0.0.0/8 or ::1) and port serving Go's profiles (/debug/pprof/), to find where vcoild's CPU and memory go; empty (the default) disables it")
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
	fs.Float64Var(&f.blockLowWatermark, "block-low-watermark", constants.BlockLowWatermark, "ask for a pool's next address block ahead when its free addresses fall to this fraction of a block (0 < w < 1; 0: only when the pool is full), so that ADDs do not wait for vcoil-controller")
	fs.DurationVar(&f.podSweepInterval, "pod-sweep-interval", daemon.DefaultSweepInterval, "how often vcoild looks for pods whose network namespace is gone without a DEL; negative turns the sweep off")
	fs.DurationVar(&f.podSweepGrace, "pod-sweep-grace", daemon.DefaultSweepGrace, "how long a pod's network namespace must have been seen gone before the sweep releases its address")
	fs.StringVar(&f.vpp.apiSocket, "vpp-api-socket", vpp.DefaultAPISocket, "VPP's binary API socket (VPP dataplane)")
	fs.IntVar(&f.vpp.maxACLRules, "vpp-acl-max-rules", acl.DefaultMaxRules, "the most ACL rules the network policies may take in VPP, all ACLs together: a change needing more is refused (logged, readiness fails) rather than let VPP run out of memory; VPP's stats segment needs about 16 bytes per rule and thread with --vpp-stats-socket (docs/policy.md)")
	fs.StringVar(&f.vpp.statsSocket, "vpp-stats-socket", "", "VPP's stats socket (startup.conf statseg { socket-name }); when set, each policy ACL's hit counters are exported as metrics, and the router advertisements and redirects the pod guard drops are counted in vcoil_source_validation_drops_total")
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
	fs.StringVar(&f.vpp.serviceRenderer, "vpp-service-renderer", "nat44", "VPP plugin that serves Services: nat44 (IPv4) or cnat (both families; docs/vpp-services.md)")
	fs.StringSliceVar(&f.vpp.cnatForeignVIPs, "vpp-cnat-foreign-vips", nil, "CIDRs of cnat translation VIPs that vcoild leaves to others (with --vpp-service-renderer=cnat)")
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

// run checks the flags, builds the dataplane, cleans up what an earlier
// vcoild left and will not be kept up, wires the parts the flags turn on
// and the daemon into the manager, and runs it until ctx ends. Nothing is
// changed on the node before every flag was checked.
func run(ctx context.Context, f flags) error {
	if err := f.check(); err != nil {
		return err
	}
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
	exporter, direct, err := f.blockRoutes()
	if err != nil {
		return err
	}
	// Every flag is checked: before any part starts (and cleans up), state
	// of a newer format holds them all.
	if newer := f.newerState(ctx); newer != nil {
		return f.hold(ctx, cfg, scheme, newer)
	}
	services, err := f.serviceProxyOn(ctx, cfg, scheme)
	if err != nil {
		return err
	}
	mgr, err := f.newManager(cfg, scheme, services)
	if err != nil {
		return err
	}
	if err := proxy.CleanUp(ctx, serviceOpts, services); err != nil {
		return err
	}
	// The memory limit follows the live heap once the cluster outgrows
	// GOMEMLIMIT (package memlimit); the service proxy's first sync gets
	// twice the room.
	limit := memlimit.New(ctrl.Log.WithName("memory"))
	if err := mgr.Add(limit); err != nil {
		return err
	}
	serviceOpts.MemoryLimit = limit
	// Checkpoint files that cannot be decoded are set aside before the
	// agents read the checkpoint; the daemon holds their addresses.
	aside, err := daemon.SetAsideCorrupt(f.stateDir)
	if err != nil {
		return err
	}
	if len(aside) > 0 {
		ctrl.Log.WithName("setup").Info("set aside checkpoint files that cannot be decoded", "files", aside)
	}
	parts, err := f.setupParts(ctx, mgr, services, serviceOpts, vppDP)
	if err != nil {
		return err
	}
	d, err := daemon.Setup(mgr, daemon.Options{
		NodeName: f.nodeName, Socket: f.socket, StateDir: f.stateDir,
		Dataplane: dp, Exporter: exporter, Local: local, Direct: direct,
		BlockRequestTimeout: f.blockRequestTimeout, BlockLowWatermark: f.blockLowWatermark, Registry: metrics.Registry,
		SweepInterval: f.podSweepInterval, SweepGrace: f.podSweepGrace,
		Policies: parts.policies, Egress: parts.egress, CachesPods: f.cachesPods(),
	})
	if err != nil {
		return err
	}
	if err := addStateServer(mgr, f, dp, d, parts.state); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	ctrl.Log.WithName("setup").Info("starting vcoild", "node", f.nodeName, "dataplane", dp.Name(), "socket", f.socket, "services", services)
	return mgr.Start(ctx)
}
