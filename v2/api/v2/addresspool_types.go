package v2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AddressPoolSpec defines the addresses a pool hands out and the size of the
// blocks it carves them into.
type AddressPoolSpec struct {
	// Usage says what the pool's addresses are for: Pods (the default)
	// carves them into AddressBlocks for nodes; LoadBalancer gives them one
	// by one to Services of type LoadBalancer. A pool of one usage never
	// gives addresses for the other, and pools of the two usages must not
	// overlap. Immutable. The pool named "default" is a Pods pool.
	//
	// +kubebuilder:default=Pods
	// +kubebuilder:validation:Enum=Pods;LoadBalancer
	// +optional
	Usage PoolUsage `json:"usage,omitempty"`

	// BlockSizeBits is the size of each address block as a power of two:
	// blocks hold 2^blockSizeBits addresses of each family (5 gives IPv4 /27
	// and IPv6 /123 blocks). At most 16. Immutable. The pool named "default"
	// needs at least 2: its blocks hold node subnets. LoadBalancer pools
	// give single addresses and ignore it.
	//
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=16
	// +optional
	BlockSizeBits int32 `json:"blockSizeBits"`

	// Subnets are the ranges blocks are carved from, in order. Entries may be
	// appended; existing entries cannot change or be removed.
	//
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	Subnets []SubnetSet `json:"subnets"`
}

// PoolUsage is what an AddressPool's addresses are for.
type PoolUsage string

const (
	// UsagePods pools carve AddressBlocks for the pods of nodes.
	UsagePods PoolUsage = "Pods"
	// UsageLoadBalancer pools give single addresses to Services of type
	// LoadBalancer (status.loadBalancer.ingress).
	UsageLoadBalancer PoolUsage = "LoadBalancer"
)

// IsLoadBalancer says whether the pool serves LoadBalancer addresses; an
// empty usage (an object stored before the field existed) is Pods.
func (s *AddressPoolSpec) IsLoadBalancer() bool { return s.Usage == UsageLoadBalancer }

// SubnetSet is an IPv4 subnet, an IPv6 subnet, or a dual-stack pair of both.
// In a dual-stack pair both subnets have the same number of host bits, so that
// the Nth block of one family pairs with the Nth block of the other.
type SubnetSet struct {
	// IPv4 is an IPv4 subnet in CIDR notation, such as 10.64.0.0/16.
	//
	// +kubebuilder:validation:MaxLength=18
	// +optional
	IPv4 *string `json:"ipv4,omitempty"`

	// IPv6 is an IPv6 subnet in CIDR notation, such as fd00:10:64::/112.
	//
	// +kubebuilder:validation:MaxLength=43
	// +optional
	IPv6 *string `json:"ipv6,omitempty"`
}

// AddressPoolStatus reports how many blocks the pool can give and has given.
type AddressPoolStatus struct {
	// ObservedGeneration is the generation of the spec the counts refer to.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// BlocksMax is the number of blocks the pool's subnets can hold (0 for
	// a LoadBalancer pool).
	// +optional
	BlocksMax int64 `json:"blocksMax"`

	// BlocksAllocated is the number of AddressBlocks carved from the pool
	// (0 for a LoadBalancer pool).
	// +optional
	BlocksAllocated int64 `json:"blocksAllocated"`

	// AddressesMax is, for a LoadBalancer pool, the number of addresses its
	// subnets can give to Services.
	// +optional
	AddressesMax int64 `json:"addressesMax,omitempty"`

	// AddressesAllocated is, for a LoadBalancer pool, the number of its
	// addresses held by Services.
	// +optional
	AddressesAllocated int64 `json:"addressesAllocated,omitempty"`

	// LastBlockIndex is the index of the block the controller carved last. The
	// next block is searched for after it (wrapping at the end), so that a
	// freed block is not handed out again at once, also across controller
	// restarts.
	// +optional
	LastBlockIndex *int64 `json:"lastBlockIndex,omitempty"`

	// Conditions: Available is True while the pool has a free block (a
	// LoadBalancer pool: a free address).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Condition types and reasons of an AddressPool.
const (
	// PoolAvailable is True while at least one block of the pool (of a
	// LoadBalancer pool: one address) is free.
	PoolAvailable = "Available"

	ReasonBlocksFree = "BlocksFree"
	// ReasonAddressesFree and ReasonExhausted are the reasons of a
	// LoadBalancer pool's Available condition.
	ReasonAddressesFree = "AddressesFree"
	ReasonExhausted     = "Exhausted"
)

// AddressPool is a set of subnets from which vcoil carves AddressBlocks for
// nodes, or (usage LoadBalancer) from which Services of type LoadBalancer
// get their addresses. Pods get addresses from the pool named by their
// namespace's vcoil.io/pool annotation, or from the pool named "default";
// Services from the pool named by their vcoil.io/lb-pool annotation, or from
// the default LoadBalancer pool.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=vcoil
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Usage",type=string,JSONPath=`.spec.usage`
// +kubebuilder:printcolumn:name="Block Size Bits",type=integer,JSONPath=`.spec.blockSizeBits`,priority=1
// +kubebuilder:printcolumn:name="Blocks",type=integer,JSONPath=`.status.blocksAllocated`
// +kubebuilder:printcolumn:name="Max Blocks",type=integer,JSONPath=`.status.blocksMax`
// +kubebuilder:printcolumn:name="Addresses",type=integer,JSONPath=`.status.addressesAllocated`
// +kubebuilder:printcolumn:name="Max Addresses",type=integer,JSONPath=`.status.addressesMax`
// +kubebuilder:printcolumn:name="Available",type=string,JSONPath=`.status.conditions[?(@.type=="Available")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AddressPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   AddressPoolSpec   `json:"spec"`
	Status AddressPoolStatus `json:"status,omitempty"`
}

// AddressPoolList is a list of AddressPools.
//
// +kubebuilder:object:root=true
type AddressPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AddressPool `json:"items"`
}

func init() {
	SchemeBuilder.Register(&AddressPool{}, &AddressPoolList{})
}
