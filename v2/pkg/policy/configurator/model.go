package configurator

import (
	"net/netip"

	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// PolicyID names a NetworkPolicy.
type PolicyID struct {
	Namespace, Name string
}

func (p PolicyID) String() string { return p.Namespace + "/" + p.Name }

// Pod is one local pod with the policies that currently select it: the
// processor's output and the configurator's input.
type Pod struct {
	ID renderer.PodID
	// IPs are the pod's addresses, at most one per family. A pod without an
	// address is never configured (the processor postpones it).
	IPs []netip.Addr
	// SourcePrefixes are the prefixes the pod may send from besides IPs
	// (renderer.PodRules.SourcePrefixes).
	SourcePrefixes []netip.Prefix
	// Removed is set when the pod left this node or was deleted.
	Removed bool
	// Policies are the policies selecting the pod. None means the pod is not
	// isolated in either direction.
	Policies []*Policy
	// Admin and Baseline are the ClusterNetworkPolicies of each tier whose
	// subject selects the pod, in evaluation order (by priority, then
	// name).
	Admin, Baseline []*ClusterPolicy
}

// ClusterPolicy is a ClusterNetworkPolicy in vcoil's model: its rules in
// their order, peers resolved to addresses. Its rules do not depend on the
// pod it selects, so one ClusterPolicy serves all of them; it is never
// modified once given to the configurator.
type ClusterPolicy struct {
	Name string
	// Ingress and Egress are the rules of each direction, in order.
	Ingress, Egress []TierRule

	// generated holds the renderer rules made of the policy, per
	// renderer.Direction; seq numbers the policy for the configurator's
	// memo of tiers (0: not numbered yet).
	generated [2][]renderer.TierRule
	seq       uint64
}

// TierRule is one rule of a ClusterPolicy: traffic Match matches gets
// Action. A rule vcoil cannot implement fully is given in its fail-closed
// form: a Deny or Pass rule matching every peer and port.
type TierRule struct {
	// Name is the rule's name, or its index in the policy when it has none.
	Name   string
	Action renderer.TierAction
	Match  Match
}

// Policy is a NetworkPolicy in vcoil's model (the Contiv/VPP design's
// "ContivPolicy", docs/background.md#policy-layers):
// label selectors are resolved to pods and their addresses, namespaces are
// expanded into their pods, and named ports are resolved to numbers for the
// pods they refer to. A Policy may be shared by all the pods it selects and
// remembers the rules generated from it, so its matches are never modified
// once it was given to the configurator (a copy given other matches is
// fine).
type Policy struct {
	ID PolicyID
	// IsolatesIngress and IsolatesEgress are the policy's policyTypes: a pod
	// selected by a policy with a type is isolated in that direction, even if
	// the policy permits nothing.
	IsolatesIngress bool
	IsolatesEgress  bool
	// Ingress lists what may connect to the pod; Egress what the pod may
	// connect to. Traffic matching any Match is permitted.
	Ingress []Match
	Egress  []Match

	// generated holds the rules GenerateRules made of the policy, per
	// renderer.Direction.
	generated [2]*generated
}

// Match is one part of a policy rule: traffic from (Ingress) or to (Egress)
// any of the peers, on any of the ports.
type Match struct {
	// AllPeers matches every address, in and outside the cluster; Pods and
	// Blocks are then empty.
	AllPeers bool
	// Pods are the peer pods that label selectors matched, with their
	// addresses.
	Pods []PeerPod
	// Blocks are the ipBlocks of the rule.
	Blocks []IPBlock
	// Ports are the permitted protocols and destination ports; empty means
	// every protocol and every port. A rule whose ports all failed to resolve
	// permits nothing and is left out by the processor rather than given here
	// with no ports.
	Ports []Port
}

// PeerPod is a pod that a policy refers to as a peer.
type PeerPod struct {
	ID  renderer.PodID
	IPs []netip.Addr
}

// IPBlock is a CIDR minus the CIDRs in Except.
type IPBlock struct {
	Network netip.Prefix
	Except  []netip.Prefix
}

// Port is a protocol with a range of destination ports. ProtocolAny is not
// used here: a policy port always has a protocol (TCP by default).
type Port struct {
	Protocol renderer.Protocol
	Ports    renderer.PortRange
}
