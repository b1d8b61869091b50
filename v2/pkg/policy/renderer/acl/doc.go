// Package acl is vcoil's VPP ACL policy renderer: a renderer.Renderer that
// enforces NetworkPolicies with the ACL plugin of VPP, as the Contiv/VPP
// policy design places them (docs/background.md#where-acls-sit-relative-to-nat).
//
// Through a renderer cache whose local tables are attached to the pods'
// Ingress (package renderer/acl/tables), it renders
//
//   - each local table as one ACL, the output ACL of every pod interface
//     the table is assigned to: renderer.OnVSwitch(renderer.Ingress) is
//     the vswitch's egress, the packets VPP sends to the pod, after the
//     NAT44 service translation;
//   - the global table as one ACL, the output ACL of the node's outside
//     interfaces (the uplink and the host interconnect);
//   - one reflective ACL as the input ACL of every pod interface with a
//     local table, and of the outside interfaces while the global table
//     has rules: the sessions it records let the replies of connections a
//     pod (or the outside) opened through the output ACLs
//     (docs/background.md#the-reflective-acl). Unlike the design's, it
//     records TCP connections at their SYN only (vpp.ReflectiveRules). On
//     the outside interfaces the services renderer's source-ranges ACL
//     comes first and ends with the same rules, so it records the same
//     sessions when it is there.
//
// Changed tables are replaced in place, an interface whose output ACL
// alone changes gets it by addition and removal (the dataplane does that),
// and the ACL plugin's session reclassification is on: a policy change
// then cuts the TCP connections it denies and keeps the others, the pods'
// own included (docs/policy.md#vpp-acls).
//
// Each interface's ACL lists belong to the VPP dataplane, which merges the
// renderer's ACLs with the services renderer's (Dataplane.SetACLLists).
//
// It does not run the policy stack, watch Kubernetes, nor restart itself
// after a VPP restart: vcoild registers it with the configurator and calls
// Resync when the dataplane announces a new VPP incarnation.
package acl
