// Package renderer is the contract between vcoil's policy configurator and the
// network stacks that enforce NetworkPolicies (the VPP ACL renderer, the Linux
// nftables renderer). It defines the 6-tuple Rule of the Contiv/VPP policy
// design (docs/background.md#the-6-tuple-rule-and-its-order) with its total
// order, the per-pod rule lists a renderer receives in one transaction, and the
// rule tables that the renderer cache (package renderer/acl/tables) builds from
// them.
//
// Everything here is vcoil's own model: pods are a namespace/name and their IP
// addresses, never Kubernetes objects. The package holds types and pure
// functions only; it does no I/O.
//
// Direction words are the pod's, as in Kubernetes NetworkPolicies
// (Direction):
//
//   - Ingress rules filter traffic into the pod, from its peers; they come
//     from the pod's ingress policies, their destination network is always
//     "any" (the pod itself) and they name the peer as source.
//   - Egress rules filter traffic out of the pod, to its peers; they come
//     from the pod's egress policies, their source network is always "any"
//     (the pod itself) and they name the peer as destination.
//
// Dataplanes that filter on the vswitch's end of a pod's interface (VPP
// ACLs, nftables on the host-side interface) name directions the other way
// round: what the vswitch receives from the pod is its ingress. A renderer
// turns a Direction into theirs with OnVSwitch, the one place where the two
// vocabularies meet.
package renderer
