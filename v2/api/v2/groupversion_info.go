// Package v2 holds the custom resources of vcoil's API group vcoil.io, version v2:
// AddressPool, AddressBlock, BlockRequest, Egress and PodEndpoint. It holds
// types, constants and deepcopy code only; validation lives in the webhooks
// and admission policies (v2/config) and address arithmetic in v2/pkg/ipam.
//
// +kubebuilder:object:generate=true
// +groupName=vcoil.io
package v2

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of vcoil's resources.
	GroupVersion = schema.GroupVersion{Group: "vcoil.io", Version: "v2"}

	// SchemeBuilder registers vcoil's types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds vcoil's types to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
