package v2

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// PodEndpointSpec is what every node's NetworkPolicies need to know of a
// pod that runs elsewhere: its labels, addresses and named ports.
type PodEndpointSpec struct {
	// PodUID is the UID of the pod this endpoint stands for.
	PodUID types.UID `json:"podUID"`

	// NodeName is the node the pod runs on; only that node's vcoild
	// writes the endpoint.
	// +kubebuilder:validation:MinLength=1
	NodeName string `json:"nodeName"`

	// PodLabels are the pod's labels, copied (the endpoint's own labels
	// are vcoil's).
	// +optional
	PodLabels map[string]string `json:"podLabels,omitempty"`

	// Addresses are the pod's addresses, one per IP family.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=2
	Addresses []string `json:"addresses"`

	// SourcePrefixes are the prefixes the pod may send from beside its
	// addresses (its vcoil.io/allowed-source-prefixes annotation, as
	// admitted).
	// +optional
	SourcePrefixes []string `json:"sourcePrefixes,omitempty"`

	// NamedPorts are the pod's named container ports (of its containers
	// and its sidecars), which policies name.
	// +optional
	// +listType=map
	// +listMapKey=name
	NamedPorts []NamedPort `json:"namedPorts,omitempty"`
}

// NamedPort is a container port with a name.
type NamedPort struct {
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// +kubebuilder:validation:Enum=TCP;UDP;SCTP
	Protocol corev1.Protocol `json:"protocol"`
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
}

// PodEndpoint is the part of a Pod that NetworkPolicies on other nodes
// read, written by the vcoild of the pod's node (same namespace and name
// as the pod, owned by it). Every vcoild watches PodEndpoints instead of
// every Pod of the cluster: a Pod changes many more times than its
// endpoint (every status change of its containers) and is several times
// its size, and every change of a watched object is sent to every node.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:categories=vcoil,shortName=vpe
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Addresses",type=string,JSONPath=`.spec.addresses`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PodEndpoint struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec PodEndpointSpec `json:"spec"`
}

// +kubebuilder:object:root=true

// PodEndpointList is a list of PodEndpoints.
type PodEndpointList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PodEndpoint `json:"items"`
}

func init() {
	SchemeBuilder.Register(&PodEndpoint{}, &PodEndpointList{})
}
