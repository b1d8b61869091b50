// Package egress builds the kernel side of vcoil's Egresses (on-demand
// egress NAT, as Coil's): the tunnels that take a client pod's traffic to
// an Egress's destinations to the Egress's router pods, and the router
// pods' side, which decapsulates, masquerades and sends the replies back.
//
// A client pod gets one tunnel per Egress, whose remote is the Egress
// Service's ClusterIP, so that vcoil's service proxy spreads clients over
// the routers (and keeps each on one router with ClientIP affinity). The
// destinations are routes in a table of their own (constants.EgressTable)
// that a rule consults after rules sending the cluster's networks to main.
// Two encapsulations: FoU (IPIP or IP6-in-IP6 in UDP, as Coil; needs the
// kernel's fou and ipip modules) and VXLAN (a static FDB entry to the
// ClusterIP and a static neighbour for a virtual gateway, so no ARP crosses
// the tunnel). Routers accept both, from their peers' addresses only (the
// tunnel devices have no remote and would decapsulate anyone's), and send
// each reply back through the encapsulation its flow came in with
// (connection marks).
//
// ApplyClient is stateless: it reads the pod's namespace and makes it match
// the complete configuration it is given. A Router keeps its peers in
// memory, counted per address, since a pod's address may be reused while
// the previous holder is still being removed.
//
// The package does not watch Kubernetes (packages egress/agent and
// egress/routerwatch do) and does not decide which Egresses a pod uses.
package egress
