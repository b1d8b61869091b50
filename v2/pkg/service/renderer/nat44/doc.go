// Package nat44 renders Services into VPP's NAT44-ED plugin, after the
// Contiv/VPP services design (docs/vpp.md): each service frontend (cluster
// IP, external IP, LoadBalancer IP, NodePort on this node's addresses) of
// an IPv4 port becomes one static mapping, tagged with its service:
//
//   - two or more backends: a load-balancing static mapping
//     (Nat44AddDelLbStaticMapping) whose locals are the backends, local
//     ones weighted Config.LocalWeight and remote ones 1;
//   - one backend: a plain static mapping (Nat44AddDelStaticMappingV2),
//     since VPP wants two locals in a load-balancing one;
//   - no backend: a plain static mapping to vpp.RejectSinkIPv4 (refused by
//     the node's kernel with a TCP reset or ICMP port unreachable, as
//     kube-proxy refuses it), or to vpp.DropSinkIPv4 for an eTP=Local
//     external frontend whose service has endpoints, but none on this node
//     (dropped, as kube-proxy drops it).
//
// Every mapping is OUT2IN_ONLY (it only DNATs traffic to the frontend) and
// SELF_TWICE_NAT (a pod reaching itself through its service is source-NATed
// to the node's NAT loopback, which is in the twice-NAT pool), except the
// external frontends of eTP=Cluster services (and the sinks), which are
// TWICE_NAT: their clients are source-NATed to the NAT loopback, so that a
// remote backend's replies come back through this node.
//
// Backend changes go through Nat44LbStaticMappingAddDelLocal and never
// delete the mapping, whose sessions would all go, except where VPP forces
// it: crossing between one and two backends changes the kind of mapping,
// and a ClientIP-affinity mapping that loses a backend is recreated, since
// VPP keeps its affinity records until the mapping is deleted.
//
// loadBalancerSourceRanges become one input ACL on the outside interfaces
// (the uplink and the host interconnect), set through the dataplane, which
// merges it with the policy renderer's. IPv6 frontends are left out:
// NAT44-ED is IPv4 only.
//
// The renderer keeps the desired mappings in memory. At Resync, and when
// it finds a new VPP incarnation, it dumps what VPP holds under vcoil's
// tags, and adds, changes or deletes only the difference; requests are
// pipelined (Config.MaxInFlight in flight).
package nat44
