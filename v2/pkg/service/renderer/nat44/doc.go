// Package nat44 renders Services into VPP's NAT44-ED plugin, after the
// Contiv/VPP services design (ServiceToDNAT; docs/vpp-services.md): each
// IPv4 frontend (cluster IP, external IP, LoadBalancer IP, node port on
// this node's IPv4 NodePortAddresses) of a TCP or UDP port becomes one
// static mapping, tagged with its service:
//
//   - two or more backends: a load-balancing static mapping
//     (Nat44AddDelLbStaticMapping) whose locals are the backends, local
//     ones weighted Config.LocalWeight and remote ones 1 (twice that as
//     VPP's probabilities, whose sum must fit a u8: see probabilities);
//   - one backend: a plain static mapping (Nat44AddDelStaticMappingV2),
//     since VPP wants two locals in a load-balancing one;
//   - no backend: a plain static mapping to vpp.RejectSinkIPv4 (refused by
//     the node's kernel with a TCP reset or ICMP port unreachable, as
//     kube-proxy refuses it), or to vpp.DropSinkIPv4 when the service has
//     endpoints of the family but none for this traffic (a Local traffic
//     policy without local endpoints: dropped, as kube-proxy drops it).
//
// Every mapping is OUT2IN_ONLY (it only DNATs traffic to the frontend).
// Cluster IPs and the external frontends of eTP=Local services are
// SELF_TWICE_NAT (a backend reaching itself through its service is
// source-NATed to the node's NAT loopback, the only address of the
// twice-NAT pool); the external frontends of eTP=Cluster services are
// TWICE_NAT (every client is source-NATed to the NAT loopback, so that a
// remote backend's replies come back through this node); the sinks are
// neither (the kernel holds the NAT loopback).
//
// Backend changes go through Nat44LbStaticMappingAddDelLocal and never
// delete the mapping, whose sessions would all go, except where VPP forces
// it: crossing between one and two backends changes the kind of mapping,
// a ClientIP-affinity mapping that loses a backend is recreated, since VPP
// keeps its affinity records until the mapping is deleted, and so is a
// mapping of two locals one of which changes its probability.
//
// What it deliberately does not do, as NAT44-ED cannot: IPv6 frontends
// (NAT44-ED is IPv4 only), SCTP ports (NAT44-ED translates ports of TCP and
// UDP only), telling pod clients from outside clients of an external
// frontend (an eTP=Local service sends every client to its local
// endpoints), source-NAT of pods' traffic leaving the node (NAT44-ED's
// output feature cannot exclude the cluster's destinations, so pods'
// traffic to other nodes would be source-NATed too; docs/vpp-services.md).
//
// loadBalancerSourceRanges become one input ACL on the outside interfaces
// (the uplink and the host interconnect), set through the dataplane, which
// merges it with the policy renderer's; the input ACL runs before NAT44-ED,
// so it sees the LoadBalancer IP. Pods of this node reaching a
// LoadBalancer IP enter through their own interfaces and are not filtered.
//
// The renderer keeps the desired mappings in memory (Resync's state plus
// Updates). Resync, an Update that finds a new VPP incarnation, and the
// first call after a failed request dump what VPP holds under vcoil's tags
// and apply only the difference; other Updates send the difference of the
// services that changed. Requests are pipelined (Config.MaxInFlight in
// flight). Mappings without vcoil's tag are never touched.
package nat44
