package v2

import (
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AddressBlock is a block of addresses carved from an AddressPool and owned by
// one node. Its name is "<pool>-<index>"; labels vcoil.io/pool and
// vcoil.io/node name its pool and node. The controller creates it for a
// BlockRequest; vcoild removes its finalizer when no pod uses the block any
// more, and vcoil-controller when its node is gone.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=vcoil
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.metadata.labels['vcoil\.io/node']`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.metadata.labels['vcoil\.io/pool']`
// +kubebuilder:printcolumn:name="IPv4",type=string,JSONPath=`.ipv4`
// +kubebuilder:printcolumn:name="IPv6",type=string,JSONPath=`.ipv6`
// +kubebuilder:printcolumn:name="Node Subnet",type=boolean,JSONPath=`.nodeSubnet`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AddressBlock struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Index is the position of the block in its pool, counted over the pool's
	// subnets in order.
	//
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="index is immutable"
	Index int64 `json:"index"`

	// IPv4 is the block's IPv4 subnet in CIDR notation.
	//
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="ipv4 is immutable"
	// +optional
	IPv4 *string `json:"ipv4,omitempty"`

	// IPv6 is the block's IPv6 subnet in CIDR notation.
	//
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="ipv6 is immutable"
	// +optional
	IPv6 *string `json:"ipv6,omitempty"`

	// NodeSubnet marks the node's node subnet: its first block of the pool
	// named "default". It is kept while the node exists, and its last unicast
	// address is the node's NAT loopback, never given to a pod.
	//
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="nodeSubnet is immutable"
	// +optional
	NodeSubnet bool `json:"nodeSubnet,omitempty"`
}

// BlockName is the name of the block at index in pool.
func BlockName(pool string, index int64) string {
	return pool + "-" + strconv.FormatInt(index, 10)
}

// AddressBlockList is a list of AddressBlocks.
//
// +kubebuilder:object:root=true
type AddressBlockList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AddressBlock `json:"items"`
}

func init() {
	SchemeBuilder.Register(&AddressBlock{}, &AddressBlockList{})
}
