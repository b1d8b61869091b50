// Package constants holds the defaults of every vcoil program in one place, so
// that flags, manifests and documentation agree.
package constants

import "time"

// vcoil-controller.
const (
	ControllerMetricsAddr = ":9386"
	ControllerHealthAddr  = ":9387"
	ControllerWebhookPort = 9443
	ControllerCertDir     = "/run/vcoil-controller/certs"
	// ControllerLeaderElectionID names the Lease the replicas compete for.
	ControllerLeaderElectionID = "vcoil-controller-leader"
	// ControllerNamespace is used when POD_NAMESPACE is unset.
	ControllerNamespace = "kube-system"
	// NodeGCInterval is the period of the sweep for deleted nodes' blocks.
	NodeGCInterval = 10 * time.Minute
	// BlockRequestConcurrency is the number of BlockRequests answered at
	// once. An answer is several apiserver round trips, so a thousand
	// nodes asking together queue behind few; the reconciles of one
	// instance choose different blocks (controllers.BlockRequestReconciler).
	BlockRequestConcurrency = 16

	WebhookCertSecret       = "vcoil-webhook-cert"
	WebhookService          = "vcoil-webhook-service"
	MutatingWebhookConfig   = "vcoil-mutating-webhook-configuration"
	ValidatingWebhookConfig = "vcoil-validating-webhook-configuration"
)

// vcoild and the CNI installation.
const (
	// DaemonSocket is vcoild's gRPC socket, where the vcoil CNI binary calls.
	DaemonSocket      = "/run/vcoild.sock"
	DaemonStateDir    = "/var/lib/vcoil"
	DaemonMetricsAddr = ":9388"
	DaemonHealthAddr  = ":9389"
	// DaemonStateAddr serves the node's state (package nodestate) to
	// kubectl-vcoil. It must be a loopback address: the plugin reaches it
	// through the apiserver with a port-forward to the vcoild pod, which
	// the apiserver authenticates and authorizes, so the DaemonSet exposes
	// no port for it. DaemonStatePort is its port; change both together.
	DaemonStateAddr = "127.0.0.1:9390"
	DaemonStatePort = 9390
	// BlockRequestTimeout bounds vcoild's wait for one new address block.
	BlockRequestTimeout = 30 * time.Second
	// BlockLowWatermark is the fraction of a block whose free addresses
	// left in a pool make vcoild ask for the pool's next block ahead.
	BlockLowWatermark = 0.5

	CNIBinDir   = "/opt/cni/bin"
	CNIConfDir  = "/etc/cni/net.d"
	CNIConfName = "10-vcoil.conflist"
	// CNIVersion of the installed conflist: 1.0.0, which every runtime of
	// Kubernetes' supported versions reads (containerd 1.6 refuses 1.1.0
	// results). Runtimes that speak 1.1.0 get its STATUS and GC verbs with
	// install-cni --cni-version=1.1.0.
	CNIVersion     = "1.0.0"
	CNINetworkName = "vcoil"
	// CNISourceDir holds, in vcoil's image, the CNI binaries to install.
	CNISourceDir = "/opt/vcoil/cni/bin"
)

// The Linux dataplane's pod table, shared by the dataplane (the host routes
// to pods, the rules that look the table up) and package routes (the node's
// blocks as unreachable routes in the same table). docs/linux-dataplane.md
// documents them; change both together.
const (
	// PodTable is the routing table of the host routes to pods.
	PodTable = 116
	// PodRulePriority is the priority of the rules "from all lookup
	// <PodTable>": before main (32766), so that pod routes win over routes a
	// routing daemon installs there.
	PodRulePriority = 2000
	// PodRouteProtocol marks the host routes to pods in the pod table
	// ("proto 31"), apart from the routes of package routes (proto 30).
	PodRouteProtocol = 31
)

// vcoild's kube-proxy-replacement duties besides rules (package
// service/healthcheck and service/conntrack), with kube-proxy's defaults.
const (
	// ProxyHealthAddr serves the node's proxy health (/healthz, /livez), as
	// kube-proxy's --healthz-bind-address; cloud load balancers and the
	// upstream e2e tests read it.
	ProxyHealthAddr = "127.0.0.1:10256"
	// ProxyStatusAddr serves /proxyMode, as kube-proxy's
	// --metrics-bind-address (vcoild's metrics stay on DaemonMetricsAddr).
	ProxyStatusAddr = "127.0.0.1:10249"
	// ProxyHealthTimeout is how long a change may wait for the dataplane
	// before the proxy counts as unhealthy: twice the sync period, as
	// kube-proxy derives it.
	ProxyHealthTimeout = 2 * ServiceSyncPeriod

	// ConntrackMaxPerCore and ConntrackMin size the conntrack table:
	// nf_conntrack_max = max(ConntrackMaxPerCore × CPUs, ConntrackMin); a
	// MaxPerCore of 0 leaves the table alone.
	ConntrackMaxPerCore = 32768
	ConntrackMin        = 131072
	// ConntrackTCPEstablishedTimeout and ConntrackTCPCloseWaitTimeout are
	// nf_conntrack_tcp_timeout_established and _close_wait.
	ConntrackTCPEstablishedTimeout = 24 * time.Hour
	ConntrackTCPCloseWaitTimeout   = time.Hour
	// ConntrackUDPTimeout and ConntrackUDPStreamTimeout are
	// nf_conntrack_udp_timeout and _stream; 0 leaves the kernel's value.
	ConntrackUDPTimeout       = 0 * time.Second
	ConntrackUDPStreamTimeout = 0 * time.Second
	// ConntrackTCPBeLiberal sets nf_conntrack_tcp_be_liberal; false leaves
	// the kernel's value.
	ConntrackTCPBeLiberal = false
)

// The service processor's sync timing: the full resync is kube-proxy's
// (--sync-period); the batching is not (kube-proxy's --min-sync-period is
// 1 s, sized for iptables-restore's seconds). An Update of one endpoint
// among 10,000 services costs vcoil's nftables renderer about 1 ms, so a
// 1 s batch only delayed changes (p50 0.6 s, p99 1 s under 5 endpoint
// changes a second); 50 ms still folds a rollout's burst of slices into
// at most 20 transactions a second.
const (
	// ServiceMinSyncPeriod is the least time between two syncs of the
	// service renderers: changes arriving sooner are batched.
	ServiceMinSyncPeriod = 50 * time.Millisecond
	// ServiceSyncPeriod is the period of the full resync that repairs
	// drift, and the longest a failed renderer waits to be retried.
	ServiceSyncPeriod = 30 * time.Second
)

// The service proxy on the VPP dataplane (vcoild's --vpp-nat-sessions and
// --vpp-local-backend-weight). docs/vpp.md documents them; change both
// together.
const (
	// VPPNATSessions sizes NAT44-ED's session table (per VPP worker): a
	// node's worth of connections, four times VPP's own default.
	VPPNATSessions = 262144
	// VPPLocalBackendWeight is the weight of a service's backends on the
	// node relative to remote ones: 1 spreads connections evenly, as
	// kube-proxy does.
	VPPLocalBackendWeight = 1
)

// The nftables service renderer (package service/renderer/nftables).
// docs/services.md documents them; change both together.
const (
	// ServiceTable is the inet table the renderer owns; nothing else may
	// write to it.
	ServiceTable = "vcoil-services"
	// ServiceMasqueradeMark is the packet mark bit the renderer sets at DNAT
	// on service traffic to be masqueraded when it leaves the node (the bit
	// kube-proxy uses for the same purpose, so that the two agree during a
	// migration).
	ServiceMasqueradeMark = 0x4000
)

// PolicyTable is the inet table of the nftables policy renderer (package
// policy/renderer/nftables); nothing else may write to it. docs/policy.md
// documents it.
const PolicyTable = "vcoil-policy"

// SourceTable is the inet table of the Linux dataplane's source validation
// (package sourceguard); nothing else may write to it.
// docs/linux-dataplane.md documents it.
const SourceTable = "vcoil-source"

// Egress router pods, which vcoil-controller runs for every Egress.
// docs/vcoil-controller.md documents them; change both together.
const (
	// EgressImage is the router pods' image when neither --egress-image nor
	// VCOIL_IMAGE (the controller's own image) names one.
	EgressImage = "ghcr.io/vcoil/vcoil:latest"
	// EgressCommand is the router program in the image.
	EgressCommand = "/vcoil-egress"
	// EgressMetricsPort and EgressHealthPort are the router's /metrics and
	// /readyz ports.
	EgressMetricsPort = 8080
	EgressHealthPort  = 8081
	// EgressServiceAccount is the router pods' ServiceAccount in every
	// namespace holding Egresses; EgressClusterRole (installed with vcoil)
	// gives it what routers read, through the ClusterRoleBinding
	// EgressClusterRoleBinding that vcoil-controller keeps.
	EgressServiceAccount     = "vcoil-egress"
	EgressClusterRole        = "vcoil-egress"
	EgressClusterRoleBinding = "vcoil-egress"
)
