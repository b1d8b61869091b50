// Package renderer is the contract between vcoil's policy configurator and the
// network stacks that enforce NetworkPolicies (the VPP ACL renderer, the Linux
// nftables renderer). It defines the 6-tuple Rule of the Contiv/VPP policy
// design (docs/background.md#the-6-tuple-rule-and-its-order) with its total
// order, the per-pod rule lists a renderer receives in one transaction, and the
// rule tables that the renderer cache (package renderer/tables) builds from them.
//
// Everything here is vcoil's own model: pods are a namespace/name and their IP
// addresses, never Kubernetes objects. The package holds types and pure
// functions only; it does no I/O.
//
// Direction words follow that design and mean the vswitch point of view:
//
//   - Ingress rules filter traffic that enters the vswitch from the pod, so they
//     come from the pod's Egress policies; their source network is always "any"
//     (the pod itself) and they name the peer as destination.
//   - Egress rules filter traffic that leaves the vswitch towards the pod, so
//     they come from the pod's Ingress policies; their destination network is
//     always "any" (the pod itself) and they name the peer as source.
package renderer
