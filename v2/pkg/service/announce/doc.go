// Package announce makes a node announce the LoadBalancer addresses of the
// Services it serves, through the route export table a routing daemon
// (BIRD) reads: one blackhole /32 or /128 route per address, of a protocol
// of its own (32) beside the node's blocks (30).
//
//   - addresses.go: Addresses, pure: which LoadBalancer addresses of one
//     Service this node announces (all of them for externalTrafficPolicy
//     Cluster; for Local, those of a family in which the node has a ready
//     endpoint).
//   - gate.go: Gate wraps the renderer that serves the addresses (nftables)
//     and remembers what it rendered successfully, so that a node never
//     attracts traffic to an address before it serves it.
//   - announcer.go: Announcer, a service.Renderer that syncs the exporter
//     with the addresses of every Service, limited to vcoil's LoadBalancer
//     pools and to what the Gate says is served.
//   - pools.go: the AddressPool watch that tells the Announcer the pools.
//
// It does not allocate addresses (vcoil-controller does), serve them (the
// nftables renderer does), or speak a routing protocol; it does not route
// the addresses directly between nodes either: a node that runs the service
// proxy serves a LoadBalancer address itself before any route is looked up.
package announce
