// Package nodestate is what vcoild serves about its node: the pods it wired,
// its blocks, the Services and NetworkPolicies as it rendered them, the
// objects it holds in the dataplane (VPP's interfaces, ACLs and NAT
// mappings, or its nftables tables) and when each part last synced.
//
// vcoild serves it as JSON on 127.0.0.1 only (--state-addr); the operator's
// kubectl plugin (kubectl-vcoil) reaches it through the apiserver with a
// port-forward to the node's vcoild pod, so that the apiserver authenticates
// and authorizes every use and nothing on the node's network answers without
// credentials. The types here are that wire format: fields are added, never
// renamed or removed, within one APIVersion.
package nodestate

import (
	"net/netip"
	"time"
)

// APIVersion names the format of State. A client refuses a State of
// another APIVersion rather than misread it.
const APIVersion = "nodestate.vcoil.io/v1"

// Path is where vcoild serves the node's State (GET, application/json).
const Path = "/v1/state"

// State is one node's rendered state, collected when it is served.
type State struct {
	APIVersion string `json:"apiVersion"`
	// Node is the Node's name.
	Node string `json:"node"`
	// Dataplane is "linux" or "vpp".
	Dataplane string `json:"dataplane"`
	// Version is vcoild's build version.
	Version string `json:"version,omitempty"`
	// Collected is when this State was collected.
	Collected time.Time `json:"collected"`

	// NodeSubnet is the node's own subnet (the first block of its pool in
	// each family) and NATLoopback the node's NAT loopback addresses, at
	// most one per family: the last unicast address of the node subnet,
	// never given to a pod.
	NodeSubnet  []netip.Prefix `json:"nodeSubnet,omitempty"`
	NATLoopback []netip.Addr   `json:"natLoopback,omitempty"`
	// Blocks are the node's address blocks with their use.
	Blocks []Block `json:"blocks,omitempty"`
	// Pods are the pod interfaces vcoild gave addresses to (its
	// checkpoint), with their dataplane interface.
	Pods []Pod `json:"pods,omitempty"`

	// Services, Policies and Egress are nil when that part does not run on
	// this node (--service-proxy=false, --network-policies=false,
	// --egress=false).
	Services *Services `json:"services,omitempty"`
	Policies *Policies `json:"policies,omitempty"`
	Egress   *Egress   `json:"egress,omitempty"`
	// VPP is the VPP connection and the objects vcoild holds in VPP; nil
	// on the Linux dataplane.
	VPP *VPP `json:"vpp,omitempty"`
	// NFTables are vcoil's nftables tables in the node's network
	// namespace (the Linux dataplane's services and policies; the VPP
	// dataplane's service network), as `nft list table` prints them.
	NFTables []NFTable `json:"nftables,omitempty"`

	// Errors name the parts that could not be collected ("vpp: ...");
	// the others are served all the same.
	Errors []string `json:"errors,omitempty"`
}

// Block is one of the node's address blocks.
type Block struct {
	// Name is the AddressBlock's name, Pool its AddressPool's.
	Name string `json:"name"`
	Pool string `json:"pool"`
	// Prefixes are the block's networks, one per family.
	Prefixes []netip.Prefix `json:"prefixes"`
	// NodeSubnet marks the node's own subnet (it holds the NAT loopback).
	NodeSubnet bool `json:"nodeSubnet,omitempty"`
	// Draining is set when the block's pool is being deleted: no new
	// addresses are given from it.
	Draining bool `json:"draining,omitempty"`
	// InUse addresses are given to pods (or reserved); Free are left.
	InUse int `json:"inUse"`
	Free  int `json:"free"`
}

// Pod is one pod interface vcoild wired.
type Pod struct {
	Namespace   string `json:"namespace,omitempty"`
	Name        string `json:"name,omitempty"`
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	Netns       string `json:"netns,omitempty"`
	// IPs are the pod's addresses, at most one per family.
	IPs   []netip.Addr `json:"ips"`
	Pool  string       `json:"pool,omitempty"`
	Block string       `json:"block,omitempty"`
	// Interface is the node side of the pod's interface in the dataplane;
	// nil when the dataplane does not hold it (an error in State.Errors
	// says why).
	Interface *Interface `json:"interface,omitempty"`
	Created   time.Time  `json:"created,omitzero"`
}

// Interface is the dataplane's side of a pod interface.
type Interface struct {
	// Kind is "veth" (Linux), "tap" or "af_packet" (VPP).
	Kind string `json:"kind"`
	// Name is the kernel's interface name (Linux) or VPP's.
	Name string `json:"name"`
	// Index is the kernel's ifindex (Linux) or VPP's sw_if_index.
	Index uint32 `json:"index"`
	// HostName is, on VPP with af_packet, the kernel veth VPP's
	// interface is bound to.
	HostName string `json:"hostName,omitempty"`
}

// Sync is when a part last applied its state to the dataplane.
type Sync struct {
	// Last is the end of the last successful sync; zero before the first.
	Last time.Time `json:"last,omitzero"`
	// Duration is how long the last successful sync took.
	Duration Seconds `json:"duration,omitempty"`
	// Attempted is the end of the last attempt, successful or not.
	Attempted time.Time `json:"attempted,omitzero"`
	// Error is the last attempt's error; empty when it succeeded.
	Error string `json:"error,omitempty"`
	// Errors counts failed attempts since vcoild started.
	Errors int `json:"errors,omitempty"`
}

// Seconds is a duration written as seconds (a JSON number).
type Seconds float64

// Services are the Services as the node's service renderer last applied
// them.
type Services struct {
	// Renderer is "nftables" (Linux) or "nat44" (VPP).
	Renderer string `json:"renderer"`
	Sync     Sync   `json:"sync"`
	// Frontends are every address and port the node serves, sorted by
	// address, protocol and port.
	Frontends []Frontend `json:"frontends,omitempty"`
	// Rejected are the Services the node does not serve, with the reason
	// (also a Warning Event on the Service).
	Rejected []Rejected `json:"rejected,omitempty"`
}

// Frontend kinds.
const (
	FrontendClusterIP    = "ClusterIP"
	FrontendNodePort     = "NodePort"
	FrontendExternalIP   = "ExternalIP"
	FrontendLoadBalancer = "LoadBalancer"
)

// Frontend is one address, port and protocol a Service is served on.
type Frontend struct {
	// Service is "namespace/name"; Port the service port's name.
	Service  string `json:"service"`
	PortName string `json:"portName,omitempty"`
	// Kind is one of the Frontend* constants.
	Kind     string     `json:"kind"`
	Address  netip.Addr `json:"address"`
	Port     uint16     `json:"port"`
	Protocol string     `json:"protocol"` // TCP, UDP or SCTP
	// Local is set when the frontend uses only the node's own endpoints
	// (internalTrafficPolicy=Local on a ClusterIP; externalTrafficPolicy=
	// Local on the others, for traffic from outside the node).
	Local bool `json:"local,omitempty"`
	// Affinity is the ClientIP affinity timeout; zero: none.
	Affinity Seconds `json:"affinity,omitempty"`
	// SourceRanges restrict the sources of a LoadBalancer frontend.
	SourceRanges []netip.Prefix `json:"sourceRanges,omitempty"`
	// Backends are the endpoints traffic to the frontend is spread over.
	Backends []Backend `json:"backends,omitempty"`
	// NoBackends is what the frontend does without backends: "reject"
	// (ICMP unreachable, TCP reset) or "drop"; empty when it has some.
	NoBackends string `json:"noBackends,omitempty"`
	// AffinityByHash is set when the renderer keeps a client on one
	// backend by a hash of the client's address, without Affinity's
	// timeout (the nftables renderer's IPv6 frontends).
	AffinityByHash bool `json:"affinityByHash,omitempty"`
	// FromNode is, on an external frontend with Local set whose renderer
	// tells the node's own traffic apart (nftables, as kube-proxy), how
	// traffic from the node and its pods is served: over the cluster's
	// endpoints. Nil when that traffic is served as Backends say (the
	// nat44 renderer sends every client to the local endpoints).
	FromNode *NodeTraffic `json:"fromNode,omitempty"`
}

// NodeTraffic is how a frontend serves traffic from the node and its pods
// where that differs from traffic from outside.
type NodeTraffic struct {
	Backends   []Backend `json:"backends,omitempty"`
	NoBackends string    `json:"noBackends,omitempty"`
}

// Backend is one endpoint of a frontend.
type Backend struct {
	Address netip.Addr `json:"address"`
	Port    uint16     `json:"port"`
	Node    string     `json:"node,omitempty"`
	// Local is set for an endpoint on this node.
	Local bool `json:"local,omitempty"`
	// Terminating marks a serving endpoint that is terminating (used only
	// when no ready one is left).
	Terminating bool `json:"terminating,omitempty"`
}

// Rejected is a Service the node does not serve.
type Rejected struct {
	Service string `json:"service"`
	Reason  string `json:"reason"`
}

// Policies are the NetworkPolicy rules as the node's policy renderer last
// applied them.
type Policies struct {
	// Renderer is "nftables" (Linux) or "vpp-acl" (VPP).
	Renderer string `json:"renderer"`
	Sync     Sync   `json:"sync"`
	// Pods are the node's pods with an address, sorted by namespace and
	// name; a pod with no rule in a direction is not isolated in it.
	Pods []PodRules `json:"pods,omitempty"`
	// AlwaysAllowed are the sources every pod accepts whatever its rules:
	// the node's own addresses and its NAT loopback (the kubelet's probes,
	// hairpin traffic through a Service).
	AlwaysAllowed []netip.Addr `json:"alwaysAllowed,omitempty"`
	// Denied are the packets the renderer's rules denied, per
	// ClusterNetworkPolicy, per NetworkPolicy and per NetworkPolicy group,
	// when the renderer counts them so (nftables; VPP with its stats socket).
	Denied []Denied `json:"denied,omitempty"`
}

// Denied counts the packets denied by the rules of one ClusterNetworkPolicy
// in one tier and direction (Tier "admin" or "baseline"; Policy "" for the
// rules vcoild adds), or, with Tier "networkpolicy", those no NetworkPolicy
// permitted: by a group (Group its chain), or to and from the pods one
// NetworkPolicy isolates (Policy "namespace/name"; a packet of a pod that
// two policies isolate counts for both).
type Denied struct {
	Tier      string `json:"tier"`
	Policy    string `json:"policy,omitempty"`
	Group     string `json:"group,omitempty"`
	Direction string `json:"direction"`
	Packets   uint64 `json:"packets"`
}

// PodRules are one pod's rule lists. Each list is empty (the pod is not
// isolated in that direction) or is applied with first-match semantics and
// ends with a rule that matches all traffic.
type PodRules struct {
	Namespace string       `json:"namespace"`
	Name      string       `json:"name"`
	IPs       []netip.Addr `json:"ips"`
	// Ingress filters traffic into the pod; its rules name the source.
	Ingress []Rule `json:"ingress,omitempty"`
	// Egress filters traffic out of the pod; its rules name the
	// destination.
	Egress []Rule `json:"egress,omitempty"`
	// AdminIngress, AdminEgress, BaselineIngress and BaselineEgress are
	// the pod's ClusterNetworkPolicy rules per tier and direction, in
	// evaluation order: Admin before Ingress and Egress, Baseline after
	// them for a pod they do not isolate.
	AdminIngress    []TierRule `json:"adminIngress,omitempty"`
	AdminEgress     []TierRule `json:"adminEgress,omitempty"`
	BaselineIngress []TierRule `json:"baselineIngress,omitempty"`
	BaselineEgress  []TierRule `json:"baselineEgress,omitempty"`
}

// TierRule is one ClusterNetworkPolicy rule: its match, with Action
// "accept", "deny" or "pass", and where it comes from.
type TierRule struct {
	Rule `json:",inline"`
	// Policy is the ClusterNetworkPolicy; empty for the rules vcoild adds
	// for what no policy can block.
	Policy string `json:"policy,omitempty"`
	// RuleName is the rule's name in the policy, or its index.
	RuleName string `json:"ruleName,omitempty"`
}

// Rule is one 6-tuple rule.
type Rule struct {
	// Action is "permit" or "deny".
	Action string `json:"action"`
	// Protocol is "any", "tcp", "udp" or "sctp".
	Protocol string `json:"protocol"`
	// Src and Dst are networks; absent means any address.
	Src netip.Prefix `json:"src,omitzero"`
	Dst netip.Prefix `json:"dst,omitzero"`
	// SrcPorts and DstPorts are inclusive ranges; absent means every
	// port.
	SrcPorts *PortRange `json:"srcPorts,omitempty"`
	DstPorts *PortRange `json:"dstPorts,omitempty"`
}

// PortRange is an inclusive range of ports.
type PortRange struct {
	First uint16 `json:"first"`
	Last  uint16 `json:"last"`
}

// Egress is the client side of Egresses on the node: the pods that name
// one and what vcoild set up in their network namespace.
type Egress struct {
	Pods []EgressPod `json:"pods,omitempty"`
}

// EgressPod is one client pod of Egresses.
type EgressPod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Egresses are the "namespace/name" of the Egresses it uses, with the
	// ClusterIP its tunnel goes to and its destinations.
	Egresses []EgressUse `json:"egresses,omitempty"`
	// Error is why the pod's tunnels are not as asked, if they are not.
	Error string `json:"error,omitempty"`
}

// EgressUse is one Egress as a client pod uses it.
type EgressUse struct {
	Egress        string         `json:"egress"`
	Encapsulation string         `json:"encapsulation,omitempty"`
	Router        netip.Addr     `json:"router,omitzero"`
	Destinations  []netip.Prefix `json:"destinations,omitempty"`
	// Routers are every ClusterIP the pod's tunnels go to, IPv4 first:
	// a VXLAN tunnel goes to the first (Router) for both families, FoU
	// has one tunnel per family.
	Routers []netip.Addr `json:"routers,omitempty"`
}

// VPP is vcoild's connection to VPP and the objects it holds there.
type VPP struct {
	// Connected says whether vcoild holds a working API connection.
	Connected bool `json:"connected"`
	// Version is VPP's version string.
	Version string `json:"version,omitempty"`
	// Incarnation counts the VPP processes vcoild has seen (a restart
	// makes a new one); Resync is when the current one was last synced.
	Incarnation uint64 `json:"incarnation"`
	Resync      Sync   `json:"resync"`
	// Interfaces are VPP's interfaces (the uplink, the host interconnect,
	// the pods').
	Interfaces []VPPInterface `json:"interfaces,omitempty"`
	// ACLs are the ACLs vcoil owns (by tag).
	ACLs []VPPACL `json:"acls,omitempty"`
	// NATMappings are the NAT44 static mappings vcoil owns (by tag): the
	// services' frontends and hostPorts.
	NATMappings []VPPNATMapping `json:"natMappings,omitempty"`
}

// VPPInterface is one VPP interface with what vcoil set on it.
type VPPInterface struct {
	Index     uint32         `json:"index"`
	Name      string         `json:"name"`
	Tag       string         `json:"tag,omitempty"`
	Up        bool           `json:"up"`
	Addresses []netip.Prefix `json:"addresses,omitempty"`
	// NAT is the interface's NAT44 role: "in", "out", "in out" or empty.
	NAT string `json:"nat,omitempty"`
	// InputACLs and OutputACLs are the ACL indexes applied, in order.
	InputACLs  []uint32 `json:"inputACLs,omitempty"`
	OutputACLs []uint32 `json:"outputACLs,omitempty"`
}

// VPPACL is one ACL in VPP.
type VPPACL struct {
	Index uint32 `json:"index"`
	Tag   string `json:"tag"`
	// Rules are the ACL's rules as text, in order.
	Rules []string `json:"rules"`
}

// VPPNATMapping is one NAT44 static mapping (with its local addresses when
// it load-balances).
type VPPNATMapping struct {
	External netip.AddrPort `json:"external"`
	Protocol string         `json:"protocol"`
	Tag      string         `json:"tag,omitempty"`
	// Flags are VPP's flags of the mapping ("self-twice-nat", "out2in-only").
	Flags    []string      `json:"flags,omitempty"`
	Locals   []VPPNATLocal `json:"locals,omitempty"`
	Affinity Seconds       `json:"affinity,omitempty"`
}

// VPPNATLocal is one backend of a static mapping.
type VPPNATLocal struct {
	Address     netip.AddrPort `json:"address"`
	Probability uint8          `json:"probability,omitempty"`
}

// NFTable is one nftables table vcoil owns.
type NFTable struct {
	Family string `json:"family"`
	Name   string `json:"name"`
	// Text is the table as `nft list table` prints it.
	Text string `json:"text"`
}
