// Package sourceguard keeps pods from forging their source address on the
// Linux dataplane. It owns one nftables table, inet vcoil-source
// (constants.SourceTable), written through package nft:
//
//   - a base chain at prerouting, type filter, priority raw (-300), before
//     conntrack and DNAT, that looks only at packets arriving on a pod's
//     node-side veth (iifname "vcoil*": the match holds from the moment a
//     veth exists, before its elements are added, so a new pod is never
//     unguarded);
//   - two interval sets of (interface, source) pairs, allow4 (ifname .
//     ipv4_addr) and allow6 (ifname . ipv6_addr): a pod's addresses and
//     its allowed source prefixes, elements per pod interface rather than
//     a chain per pod;
//   - named counters, dropped4 and dropped6, of what the chain drops.
//
// A packet from a pod interface is dropped when its destination is a
// loopback address (127.0.0.0/8, ::1): a pod must not reach what listens
// on the node's loopback, even where portmap set route_localnet on its
// veth. It is accepted when its (interface, source) pair is in a set. For
// IPv6, a link-local source (fe80::/10) is accepted only for router and
// neighbour solicitations, neighbour advertisements and MLD (ICMPv6 133,
// 135, 136, 131, 132, 143), and the unspecified source only for neighbour
// solicitations (duplicate address detection) and MLD; router
// advertisements and redirects (134, 137) are dropped whatever their
// source. Everything else is dropped and counted.
//
// ARP is out of scope: an inet table does not see it, and a pod's ARP lie
// does no harm, since the node reaches each pod by a /32 route through its
// own veth, not by what ARP claims.
package sourceguard
