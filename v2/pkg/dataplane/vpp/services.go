package vpp

import (
	"context"
	"net/netip"

	"go.fd.io/govpp/api"
)

// Incarnation names one VPP process on one connection of the driver: it
// changes when VPP restarts and when the driver reconnects. What a renderer
// made in VPP (static mappings, ACL indexes) belongs to one incarnation; a
// renderer that sees another one must sync from scratch.
type Incarnation uint64

// NoInterface is the sw_if_index of an interface that does not exist (no
// uplink configured).
const NoInterface = ^uint32(0)

// NodeInterfaces are the sw_if_index of the node's own interfaces in one
// incarnation.
type NodeInterfaces struct {
	Incarnation Incarnation
	// Uplink is NoInterface when no uplink is configured.
	Uplink           uint32
	HostInterconnect uint32
	Loopback         uint32
}

// ACLOwner names a component that puts ACLs on interfaces. Each interface
// has one ACL list in VPP (ACLInterfaceSetACLList); the driver owns it and
// merges what every owner asks for, so that no renderer overwrites
// another's ACLs: the services' ACLs first, then the policies'. VPP applies
// the first rule that matches across an interface's ACLs; on the node
// interfaces' input, the services' source-ranges ACL denies sources to
// LoadBalancer IPs and ends with ReflectiveRules, so it records the
// sessions the policies' reflective ACL behind it would have.
type ACLOwner uint8

const (
	// ACLPolicy: the network policy renderer (its ACLs come after the
	// services').
	ACLPolicy ACLOwner = iota + 1
	// ACLServices: the services renderer (loadBalancerSourceRanges; its
	// ACLs come first).
	ACLServices
)

// The addresses that refuse or drop traffic to a service frontend without
// backends. VPP has no reject action, so the services renderer maps such a
// frontend (VIP:port) to one of these. RejectSinkIPv4 is held by the
// node's kernel on its end of the host interconnect, where an nftables rule
// answers every new connection to it with a TCP reset or an ICMP port
// unreachable; VPP routes it to the host interconnect. DropSinkIPv4 is
// routed to drop in VPP (eTP=Local frontends without local endpoints drop,
// as kube-proxy does). Link-local like the interconnect's addresses, the
// same on every node.
var (
	RejectSinkIPv4 = netip.MustParseAddr("169.254.101.1")
	DropSinkIPv4   = netip.MustParseAddr("169.254.101.2")
)

// ServiceNetwork is what the services renderer asks the dataplane to route
// for it; the driver keeps it as desired state and replays it after a VPP
// restart.
type ServiceNetwork struct {
	// CIDRs are the cluster's service CIDRs. The node's kernel routes them
	// into VPP through the host interconnect, with Source as its source
	// address, so that the node's processes (the kubelet, hostNetwork
	// pods) reach cluster IPs. VPP routes them back to the kernel: traffic
	// to a cluster IP that no static mapping translates (a port the service
	// lacks) is rejected there, and never loops.
	CIDRs []netip.Prefix
	// Source is the node's IPv4 NAT loopback (invalid while the node has
	// none): the kernel's source address towards service CIDRs. It is
	// routed to this node by every node (it lies in the node's subnet), so
	// remote backends' replies come back; the kernel holds it on its end of
	// the host interconnect and VPP routes its /32 there.
	Source netip.Addr
	// SourceIPv6 is the node's IPv6 NAT loopback (invalid while none),
	// the source the cnat renderer gives IPv6 clients of eTP=Cluster
	// external frontends. VPP routes its /128 to the node's end of the
	// host interconnect: cnat translates replies to it back only by
	// interposing on a forwarding entry of its own, which the block's drop
	// route is not (seen on VPP 25.10). With IPv6, the node's kernel holds
	// it too, as the source of its own connections to IPv6 cluster IPs.
	SourceIPv6 netip.Addr
	// IPv6: the renderer serves IPv6 Services (cnat): the IPv6 CIDRs are
	// routed too, into VPP from the kernel with SourceIPv6 as source (the
	// kernel holds it) and back from VPP, and NodePorts may name IPv6
	// cluster IPs. Otherwise IPv6 CIDRs are left out (NAT44).
	IPv6 bool
	// Sinks: when true, the reject and drop sinks exist (the kernel's
	// address and nftables rule, VPP's routes).
	Sinks bool
	// Refused are the frontends mapped to the reject sink (IPv4, TCP or
	// UDP). The node's own connections to them are refused in the kernel,
	// before they reach VPP: through VPP, the sink's answer would come back
	// to the node from its own NAT loopback, which the kernel drops, and
	// the node's client would time out instead of being refused.
	Refused []Frontend
	// NodePorts send the node's own connections to one of its addresses
	// and a node port to the port's cluster IP instead (a DNAT in the
	// kernel's output hook): the kernel holds the node's addresses too, so
	// without it those connections would stay in the kernel, where nothing
	// listens. Through the cluster IP they reach VPP's mapping.
	NodePorts []NodePort
}

// NodePort is one node port of a service and the cluster IP frontend its
// node's own clients are sent to.
type NodePort struct {
	// Protocol is the IP protocol number: 6 (TCP) or 17 (UDP).
	Protocol uint8
	Port     uint16
	// ClusterIP and ClusterPort are the service port's cluster IP
	// frontend: IPv4, or, with ServiceNetwork.IPv6, either family (the
	// node's addresses of that family are sent to it).
	ClusterIP   netip.Addr
	ClusterPort uint16
}

// Frontend is a service's address, protocol and port.
type Frontend struct {
	Addr netip.Addr
	// Protocol is the IP protocol number: 6 (TCP) or 17 (UDP).
	Protocol uint8
	Port     uint16
}

// Services is the part of the VPP dataplane that the services (and later
// the policy) renderers use: their own API channels on the driver's
// connection, the node's interfaces, NAT roles, routes and the ACL lists of
// interfaces. The renderers program NAT44-ED and ACLs themselves; the
// driver owns interfaces, routes and the kernel.
type Services interface {
	// Channel waits (at most Config.ReadyWait, no longer than ctx) until VPP
	// is connected and the node synced, and returns a new API channel on
	// the current connection with room for maxInFlight pipelined requests,
	// and the node's interfaces (with the incarnation) it talks to. The
	// caller closes the channel; it fails once the connection is lost.
	Channel(ctx context.Context, maxInFlight int) (api.Channel, NodeInterfaces, error)
	// Resynced returns a channel that receives a value (without blocking
	// the driver: it holds at most one) each time the driver synced a new
	// incarnation, so that renderers resync promptly after a VPP restart.
	Resynced() <-chan Incarnation
	// SetPodNATRoles makes every pod a NAT frontend and the pods holding
	// one of backends (IPv4 addresses of local service endpoints) also a
	// NAT backend; pods wired later get their roles at SetupPod. Kept as
	// desired state.
	SetPodNATRoles(ctx context.Context, backends []netip.Addr) error
	// SetServiceNetwork routes what net describes (see ServiceNetwork).
	SetServiceNetwork(ctx context.Context, net ServiceNetwork) error
	// SetCnatPods sets cnat's SNAT policy for pods (hairpin to the NAT
	// loopbacks) and gives every pod, now and later, cnat's features; kept
	// as desired state and replayed after a VPP restart.
	SetCnatPods(ctx context.Context, snat CnatSNAT) error
	// SetInterfaceACLs makes input the input ACLs of owner on the node
	// interface iface in incarnation inc (a stale incarnation fails,
	// changing nothing), keeping the other owners' ACLs. Lists are not
	// replayed after a restart: ACL indexes die with VPP, and the owners
	// resync.
	SetInterfaceACLs(ctx context.Context, inc Incarnation, iface NodeInterface, owner ACLOwner, input []uint32) error
	// SetACLLists makes each setting's lists (input and output) owner's
	// ACLs on its interface in incarnation inc, keeping the other owners'
	// ACLs, and sends the changed interfaces' lists in one pipelined batch.
	// A pod is named by one of its addresses; a pod that is not wired yet
	// gets its lists when SetupPod wires it, before its routes. Like
	// SetInterfaceACLs, lists are not replayed after a restart.
	SetACLLists(ctx context.Context, inc Incarnation, owner ACLOwner, settings []ACLSetting) error
}
