// Package vpp is vcoil's VPP dataplane: it implements dataplane.Dataplane by
// programming VPP through GoVPP's binary API (go.fd.io/govpp, generated for
// VPP 25.10) over the API socket, and the node's and pods' network
// namespaces through netlink.
//
// On the node it uses an existing uplink (named in Config), makes a
// loopback that pod interfaces are unnumbered to, a host interconnect (a
// tun, or a veth attached with af_packet) with link-local addresses, the
// node's routes to its blocks through it, and drop routes for the blocks in
// VPP. Each pod gets a TAP created by VPP in its namespace (an L3 tun, so
// the pod's only route is "default dev eth0"), or, where the kernel lacks
// /dev/vhost-net, a veth whose node end VPP attaches with af_packet; VPP
// routes the pod's /32 and /128 to it. Every interface vcoil makes carries
// a tag naming vcoil and its owner.
//
// The driver keeps the desired state (pods, blocks, NAT roles) in memory,
// from SetupPod, the allocations vcoild hands it (Config.Allocations) and
// VPP's tags. A supervisor connects with retries, checks that VPP knows
// every message the driver sends, pings VPP and, after a reconnection or a
// new VPP PID, replays the whole state while CNI calls wait (or fail with
// ErrNotReady).
//
// For the services and policy renderers (Services) it hands out API channels on its
// connection with the incarnation they belong to, announces each new
// incarnation, keeps the pods' NAT roles and the service network (the
// service CIDRs' routes between the kernel and VPP, the sinks that refuse
// or drop frontends without backends, the nftables table ServiceTable) as
// desired state replayed after a restart, and owns the ACL lists of the
// node's and the pods' interfaces, merging what each owner asks for. With Config.SNAT it translates
// pods' IPv4 traffic leaving the cluster to the uplink's address, choosing
// it by routing through two VPP pipes (snat.go). It serves the pods'
// hostPorts as NAT44-ED static mappings of its own (hostport.go). It does not
// allocate addresses, read vcoild's checkpoint, program the services' NAT44
// mappings or ACLs (the renderers do), or export routes to other nodes.
// docs/vpp.md describes deployment and operation.
package vpp
