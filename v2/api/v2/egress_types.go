package v2

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// EgressSpec says which external networks the Egress's router pods reach on
// behalf of its client pods, and how those router pods run.
type EgressSpec struct {
	// Destinations are the networks (CIDRs of either family) whose traffic
	// leaves the client pods through this Egress's routers, which SNAT it
	// to their own address. Entries must not overlap one another. The
	// cluster's own networks (pod pools, service CIDRs) never go through an
	// Egress, whatever is listed here.
	//
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	Destinations []string `json:"destinations"`

	// Replicas is the number of router pods (1 when absent; 0 is kept, so
	// that an Egress may be scaled to zero).
	//
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// Strategy is the router Deployment's update strategy.
	//
	// +optional
	Strategy *appsv1.DeploymentStrategy `json:"strategy,omitempty"`

	// Template customizes the router pods: labels, annotations, and a pod
	// spec merged into vcoil's (resources, node selection, tolerations,
	// affinity, ...). The container named "egress" is vcoil's own; fields
	// given for it here (resources, env) are merged into it.
	//
	// +optional
	Template *EgressPodTemplate `json:"template,omitempty"`

	// SessionAffinity of the routers' Service: ClientIP (the default) keeps
	// each client pod on one router, so that its flows keep their SNAT
	// state; None spreads a client's flows over the routers.
	//
	// +kubebuilder:default=ClientIP
	// +kubebuilder:validation:Enum=ClientIP;None
	// +optional
	SessionAffinity corev1.ServiceAffinity `json:"sessionAffinity,omitempty"`

	// SessionAffinityConfig of the routers' Service (the ClientIP timeout).
	//
	// +optional
	SessionAffinityConfig *corev1.SessionAffinityConfig `json:"sessionAffinityConfig,omitempty"`

	// PodDisruptionBudget of the router pods; none when empty.
	//
	// +optional
	PodDisruptionBudget *EgressPDBSpec `json:"podDisruptionBudget,omitempty"`

	// FouSourcePortAuto makes FoU tunnels pick their UDP source port per
	// flow (as VXLAN always does), spreading a client's flows over the
	// routers when SessionAffinity is None. Without it every packet of a
	// client uses the FoU port as its source port. Only for the fou
	// encapsulation.
	//
	// +optional
	FouSourcePortAuto bool `json:"fouSourcePortAuto,omitempty"`

	// Encapsulation of the tunnels between client pods and routers: fou
	// (IPIP or IP6-in-IP6 in UDP; needs the kernel's fou and ipip modules on
	// every node), vxlan (works on any kernel with the vxlan module), or auto
	// (the default): fou where the client's kernel has it, else vxlan.
	// Router pods accept both.
	//
	// +kubebuilder:default=auto
	// +kubebuilder:validation:Enum=auto;fou;vxlan
	// +optional
	Encapsulation Encapsulation `json:"encapsulation,omitempty"`
}

// Encapsulation is how client pods tunnel their egress traffic to routers.
type Encapsulation string

// The encapsulations of EgressSpec.Encapsulation.
const (
	EncapsulationAuto  Encapsulation = "auto"
	EncapsulationFoU   Encapsulation = "fou"
	EncapsulationVXLAN Encapsulation = "vxlan"
)

// EgressPodTemplate is the part of the router pods' template a user may set.
type EgressPodTemplate struct {
	// Metadata: labels and annotations added to the router pods.
	//
	// +optional
	Metadata EgressPodMetadata `json:"metadata,omitempty"`

	// Spec is merged into vcoil's router pod spec.
	//
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +optional
	Spec corev1.PodSpec `json:"spec,omitempty"`
}

// EgressPodMetadata holds the labels and annotations of router pods.
type EgressPodMetadata struct {
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// EgressPDBSpec is the PodDisruptionBudget of the router pods: at most one
// of the two fields.
type EgressPDBSpec struct {
	// +optional
	MinAvailable *intstr.IntOrString `json:"minAvailable,omitempty"`
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// EgressStatus reports the router pods.
type EgressStatus struct {
	// ObservedGeneration is the generation of the spec the status refers to.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Replicas is the number of router pods (the scale subresource's).
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// ReadyReplicas is the number of router pods that are ready.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// Selector selects the router pods, as a label selector string (the
	// scale subresource's).
	// +optional
	Selector string `json:"selector,omitempty"`

	// Conditions: Available (at least one router is ready).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Egress runs router pods that SNAT the traffic its client pods send to its
// destinations. A pod becomes a client with the annotation
// egress.vcoil.io/<egress namespace>: <egress name>[,<name>...].
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:scope=Namespaced
// +kubebuilder:printcolumn:name="Destinations",type=string,JSONPath=`.spec.destinations`
// +kubebuilder:printcolumn:name="Encapsulation",type=string,JSONPath=`.spec.encapsulation`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Egress struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   EgressSpec   `json:"spec,omitempty"`
	Status EgressStatus `json:"status,omitempty"`
}

// EgressList is a list of Egresses.
//
// +kubebuilder:object:root=true
type EgressList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Egress `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Egress{}, &EgressList{})
}
