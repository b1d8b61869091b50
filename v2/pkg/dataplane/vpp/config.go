package vpp

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
)

// Defaults of Config and the fixed values of the wiring. docs/vpp.md
// documents them; change both together.
const (
	// DefaultAPISocket is where VPP's socksvr listens unless startup.conf
	// says otherwise.
	DefaultAPISocket = "/run/vpp/api.sock"
	// DefaultMTU is the pods' MTU when neither Config.MTU nor an uplink
	// gives one.
	DefaultMTU = 1500
	// DefaultRequestTimeout bounds the wait for one reply from VPP.
	DefaultRequestTimeout = 10 * time.Second
	// DefaultPingInterval is the period of the control ping that notices a
	// dead or restarted VPP.
	DefaultPingInterval = time.Second
	// DefaultReadyWait bounds how long a CNI call waits for VPP to be
	// connected and synced before it fails with ErrNotReady.
	DefaultReadyWait = 30 * time.Second
	// DefaultVhostNet is the device VPP's tap driver needs.
	DefaultVhostNet = "/dev/vhost-net"

	// HostInterconnectName is the node's (the kernel's) end of the host
	// interconnect: a tun that VPP creates, or a veth whose peer
	// (HostInterconnectVPPName) VPP attaches with af_packet.
	HostInterconnectName = "vcoilhost"
	// HostInterconnectVPPName is the veth end VPP attaches when the host
	// interconnect is af_packet; VPP calls the interface host-vcoilvpp.
	HostInterconnectVPPName = "vcoilvpp"

	// BlockRouteProtocol marks the node's routes to its blocks through the
	// host interconnect ("proto 32"), apart from the exporter's (30) and the
	// Linux dataplane's (31).
	BlockRouteProtocol = 32
	// ServiceRouteProtocol marks the node's routes to the service CIDRs
	// through the host interconnect ("proto 33"), apart from the block
	// routes, whose sync deletes every route of its own protocol.
	ServiceRouteProtocol = 33
	// ServiceTable is the nftables table (family ip) in the node's
	// namespace that refuses connections to RejectSinkIPv4 and to service
	// ports that VPP sends back to the kernel.
	ServiceTable = "vcoil-vpp"
	// SinkReplyTable is the node's routing table for what the kernel sends
	// from RejectSinkIPv4 (its refusals): a default route back into VPP,
	// which un-NATs them, whatever the kernel's own routes to the client.
	SinkReplyTable = 117
)

// The addresses of the host interconnect and of vcoil's loopback in VPP.
// They are link-local, so they never collide with a pod, node or service
// address, and every node uses the same ones.
var (
	// LoopbackIPv4 is held by vcoil's loopback in VPP; pod interfaces are
	// unnumbered to it, so it is the source of VPP's ICMP errors to pods.
	LoopbackIPv4 = netip.MustParsePrefix("169.254.1.1/32")
	// VPP's and the node's ends of the host interconnect.
	InterconnectVPPIPv4  = netip.MustParsePrefix("169.254.100.1/30")
	InterconnectHostIPv4 = netip.MustParsePrefix("169.254.100.2/30")
	InterconnectVPPIPv6  = netip.MustParseAddr("fe80::1")
	InterconnectHostIPv6 = netip.MustParsePrefix("fe80::2/64")
)

// InterfaceType is how VPP reaches a pod's (or the node's) network
// namespace.
type InterfaceType string

const (
	// TAP: VPP's virtio tap driver creates a tun (L3) in the namespace. It
	// needs /dev/vhost-net.
	TAP InterfaceType = "tap"
	// AFPacket: a veth pair whose node end VPP attaches with af_packet
	// (AfPacketCreateV3). Slower, but needs nothing from the kernel beyond
	// veth.
	AFPacket InterfaceType = "af_packet"
	// Auto is TAP where the kernel has /dev/vhost-net (Config.VhostNet),
	// AFPacket where it has not: the fastest type the node can run.
	Auto InterfaceType = "auto"
)

// Config chooses how vcoil uses VPP on this node. The zero value plus
// defaults is a node whose VPP listens on DefaultAPISocket, with TAP pods,
// no uplink and VPP's default route through the host.
type Config struct {
	// APISocket is VPP's binary API socket; empty means DefaultAPISocket.
	APISocket string
	// NodeNetns is the path of the node's network namespace, where VPP
	// runs and where the host interconnect and af_packet veths live. Empty
	// means vcoild's own (/proc/self/ns/net), as in a host-network DaemonSet.
	NodeNetns string
	// Allocations are the pods vcoild has given addresses to. After a
	// restart they give the driver the pods to keep, with their namespaces,
	// which VPP does not record. Nil: VPP's tags only.
	Allocations Allocations

	// PodInterface is TAP (default), AFPacket or Auto.
	PodInterface InterfaceType
	// HostInterconnect is TAP, AFPacket or Auto; empty means PodInterface.
	HostInterconnect InterfaceType
	// GSO asks for generic segmentation offload on TAP pods and the TAP
	// host interconnect.
	GSO bool
	// MTU of pod interfaces when the network configuration gives none; 0
	// takes the uplink's L3 MTU in VPP, or DefaultMTU without an uplink.
	MTU int

	// Uplink is the name of an existing VPP interface towards the node's
	// network (host-eth1 for an af_packet interface, a DPDK NIC's name);
	// vcoil sets it up. Empty: no uplink, VPP reaches everything through the
	// host.
	Uplink string
	// UplinkAddresses are put on the uplink when it lacks them (VPP owns
	// the NIC); none when the uplink is addressed by someone else.
	UplinkAddresses []netip.Prefix
	// UplinkGatewayIPv4 and UplinkGatewayIPv6 make VPP's default routes go
	// through the uplink; without them they go through the host.
	UplinkGatewayIPv4 netip.Addr
	UplinkGatewayIPv6 netip.Addr
	// NATSessions sizes NAT44-ED's session table when vcoil enables the
	// plugin for the first NAT role; 0 is VPP's default.
	NATSessions uint32
	// SNAT, when set, translates pods' IPv4 traffic to destinations
	// outside the cluster to the uplink's address (snat.go). Nil: no
	// SNAT, as on the Linux dataplane.
	SNAT *SNATConfig

	// HoldPodsForPolicies is set when the policy stack renders ACLs into
	// VPP: a pod interface wired into a VPP incarnation (made again after
	// a restart, or new) is left admin-down, held, until ReleasePods,
	// which the policy stack calls once its ACLs are in that incarnation
	// (hold.go). Without it pods come up as soon as they are wired.
	HoldPodsForPolicies bool

	// RequestTimeout, PingInterval and ReadyWait: 0 means the defaults.
	RequestTimeout time.Duration
	PingInterval   time.Duration
	ReadyWait      time.Duration

	// VhostNet is the device checked when a TAP is configured; empty means
	// DefaultVhostNet. Tests point it elsewhere.
	VhostNet string

	// StatsSocket is VPP's stats socket (startup.conf's statseg {
	// socket-name }). When set, the drops of the pod guard (guard.go) are
	// read from VPP's stats segment and counted with the source
	// validation's; without it only the source checks' drops are counted.
	StatsSocket string

	// Registry, when set, receives the connection's metrics
	// (vcoil_vpp_connected, vcoil_vpp_restarts_total,
	// vcoil_vpp_resync_duration_seconds).
	Registry prometheus.Registerer
}

// Allocations is what the driver needs from vcoild, which decides
// addresses: the pods it holds addresses for, read once when the driver
// starts. vcoild satisfies it from its checkpoint (daemon.Allocations).
type Allocations interface {
	// Pods returns the pods with their keys, addresses, namespaces and
	// names. When some cannot be read it returns the others and an error
	// naming what was lost.
	Pods() ([]dataplane.Pod, error)
}

// withDefaults fills zero fields and rejects what VPP or the kernel would
// refuse later, naming the field.
func (c Config) withDefaults() (Config, error) {
	if c.APISocket == "" {
		c.APISocket = DefaultAPISocket
	}
	if c.PodInterface == "" {
		c.PodInterface = TAP
	}
	if c.HostInterconnect == "" {
		c.HostInterconnect = c.PodInterface
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.PingInterval == 0 {
		c.PingInterval = DefaultPingInterval
	}
	if c.ReadyWait == 0 {
		c.ReadyWait = DefaultReadyWait
	}
	if c.VhostNet == "" {
		c.VhostNet = DefaultVhostNet
	}
	for _, t := range []*InterfaceType{&c.PodInterface, &c.HostInterconnect} {
		if *t == Auto {
			*t = TAP
			if _, err := os.Stat(c.VhostNet); err != nil {
				*t = AFPacket
			}
		}
	}
	// PodInterface first: HostInterconnect defaults to it, so a bad pod
	// interface type is the one to name.
	for _, f := range []struct {
		name string
		t    InterfaceType
	}{{"PodInterface", c.PodInterface}, {"HostInterconnect", c.HostInterconnect}} {
		if f.t != TAP && f.t != AFPacket {
			return c, fmt.Errorf("%s %q: want %q, %q or %q", f.name, f.t, TAP, AFPacket, Auto)
		}
	}
	if c.MTU != 0 && (c.MTU < 576 || c.MTU > 9000) {
		return c, fmt.Errorf("MTU %d: want 0 (the uplink's) or 576..9000", c.MTU)
	}
	if c.Uplink == "" && (len(c.UplinkAddresses) > 0 || c.UplinkGatewayIPv4.IsValid() || c.UplinkGatewayIPv6.IsValid()) {
		return c, errors.New("UplinkAddresses and UplinkGateway need Uplink, the VPP interface they belong to")
	}
	if g := c.UplinkGatewayIPv4; g.IsValid() && !g.Is4() {
		return c, fmt.Errorf("UplinkGatewayIPv4 %s is not IPv4", g)
	}
	if g := c.UplinkGatewayIPv6; g.IsValid() && (!g.Is6() || g.Is4In6()) {
		return c, fmt.Errorf("UplinkGatewayIPv6 %s is not IPv6", g)
	}
	for _, p := range c.UplinkAddresses {
		if !p.IsValid() {
			return c, errors.New("UplinkAddresses holds an invalid prefix")
		}
	}
	if c.SNAT != nil {
		if err := c.SNAT.validate(c); err != nil {
			return c, err
		}
	}
	return c, nil
}

// checkVhostNet fails when a TAP is configured and the kernel lacks the
// device VPP's tap driver opens, with the way out.
func (c Config) checkVhostNet() error {
	if c.PodInterface != TAP && c.HostInterconnect != TAP {
		return nil
	}
	if _, err := os.Stat(c.VhostNet); err != nil {
		return fmt.Errorf("interface type %q needs %s, which VPP's tap driver opens (%w); "+
			"on kernels without vhost-net use the %q pod interface and host interconnect (--vpp-pod-interface=af_packet)",
			TAP, c.VhostNet, err, AFPacket)
	}
	return nil
}
