// Package service holds vcoil's service model and the renderer API.
//
// The layering is Contiv/VPP's (docs/services.md): Services, EndpointSlices
// and Nodes from the apiserver -> the processor (package processor), which
// applies kube-proxy's semantics once (traffic policies, topology, readiness,
// terminating endpoints) and builds this model -> renderers (package
// renderer/nftables for the Linux kernel, renderer/nat44 for VPP), which
// program a dataplane from it. Renderers never see Kubernetes objects, and
// nothing here does I/O.
package service
