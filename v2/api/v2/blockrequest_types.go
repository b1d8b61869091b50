package v2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BlockRequestSpec names the node that asks for a block and the pool to carve
// it from. Immutable.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable"
type BlockRequestSpec struct {
	// NodeName is the node that will own the block.
	// +kubebuilder:validation:MinLength=1
	NodeName string `json:"nodeName"`

	// PoolName is the AddressPool to carve the block from.
	// +kubebuilder:validation:MinLength=1
	PoolName string `json:"poolName"`
}

// BlockRequestStatus is the controller's answer.
type BlockRequestStatus struct {
	// AddressBlockName is the name of the block carved for the request. It is
	// set before the block is created and is final once Complete is True.
	// +optional
	AddressBlockName string `json:"addressBlockName,omitempty"`

	// Conditions: Complete (the block exists and is the node's) or Failed
	// (with reason PoolExhausted, PoolNotFound, PoolDeleting, PoolNotForPods
	// or NodeNotFound).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Condition types and reasons of a BlockRequest.
const (
	BlockRequestComplete = "Complete"
	BlockRequestFailed   = "Failed"

	ReasonAllocated     = "Allocated"
	ReasonPoolExhausted = "PoolExhausted"
	ReasonPoolNotFound  = "PoolNotFound"
	ReasonPoolDeleting  = "PoolDeleting"
	ReasonNodeNotFound  = "NodeNotFound"
	// ReasonPoolNotForPods: the pool is a LoadBalancer pool, whose addresses
	// go to Services and are never carved into blocks.
	ReasonPoolNotForPods = "PoolNotForPods"
)

// BlockRequest asks vcoil-controller for a new AddressBlock of a pool for a
// node. vcoild creates it with an owner reference to its Node (not a
// controller reference), so that it is collected with the Node, and deletes it
// once it has read the answer.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=vcoil
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Pool",type=string,JSONPath=`.spec.poolName`
// +kubebuilder:printcolumn:name="Block",type=string,JSONPath=`.status.addressBlockName`
// +kubebuilder:printcolumn:name="Complete",type=string,JSONPath=`.status.conditions[?(@.type=="Complete")].status`
// +kubebuilder:printcolumn:name="Failed",type=string,JSONPath=`.status.conditions[?(@.type=="Failed")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BlockRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BlockRequestSpec   `json:"spec"`
	Status BlockRequestStatus `json:"status,omitempty"`
}

// Done reports whether the controller has answered the request, either way.
func (r *BlockRequest) Done() bool {
	return r.conditionTrue(BlockRequestComplete) || r.conditionTrue(BlockRequestFailed)
}

// Completed reports whether a block was carved for the request.
func (r *BlockRequest) Completed() bool { return r.conditionTrue(BlockRequestComplete) }

// FailedCondition returns the Failed condition when it is True, else nil.
func (r *BlockRequest) FailedCondition() *metav1.Condition {
	for i := range r.Status.Conditions {
		c := &r.Status.Conditions[i]
		if c.Type == BlockRequestFailed && c.Status == metav1.ConditionTrue {
			return c
		}
	}
	return nil
}

func (r *BlockRequest) conditionTrue(t string) bool {
	for _, c := range r.Status.Conditions {
		if c.Type == t {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// BlockRequestList is a list of BlockRequests.
//
// +kubebuilder:object:root=true
type BlockRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BlockRequest `json:"items"`
}

func init() {
	SchemeBuilder.Register(&BlockRequest{}, &BlockRequestList{})
}
