// Package cnat renders Services into VPP's cnat plugin: both IP families,
// no NAT roles on interfaces, so that wiring a pod costs the same whatever
// the number of Services (docs/vpp-services.md).
//
// Each frontend of the model (a cluster IP, external IP or LoadBalancer IP
// and port, or a node port on one of this node's NodePort addresses; TCP
// or UDP, either family) becomes one translation, keyed by VIP, protocol
// and port, whose paths are the frontend's endpoints of its family:
//
//   - Cluster IPs and the external frontends of externalTrafficPolicy=Local
//     services keep the client's address.
//   - The external frontends of eTP=Cluster services source-NAT every
//     client to the node's NAT loopback of the family (each path carries
//     it as source, and the translation asks VPP to allocate the source
//     port), so that a remote backend's reply comes back through this
//     node, as the NAT44 renderer's twice-NAT does.
//   - A frontend without endpoints of its family anywhere goes to
//     vpp.RejectSinkIPv4 (refused by the node's kernel), one whose
//     endpoints are all elsewhere (a Local policy) to vpp.DropSinkIPv4.
//     VPP 25.10 dies of a translation without paths (cnat_api.c sizes the
//     paths by n_paths-1 on an unsigned count): the renderer never sends
//     one. The sinks are IPv4: an IPv6 frontend without endpoints is not
//     translated and follows VPP's routes, to the node's kernel, which
//     refuses it; so does a UDP cluster IP or node port without endpoints
//     (the kernel, or VPP for its own addresses, refuses it; a cluster IP
//     another port of which is translated drops it: cnat then owns the
//     address and drops what no translation matches), whose
//     clients would otherwise keep a session to the sink: cnat's sessions
//     live while traffic refreshes them, and VPP 25.10 can only purge all
//     of them together with every translation (cnat_session_purge calls
//     cnat_translation_purge; checked on a real VPP).
//   - ClientIP affinity is a Maglev translation hashed on the client's
//     address: a client stays on its backend while the backends stay, with
//     no timeout. VPP sets the LB type and hash only when it makes a
//     translation, so turning affinity on or off deletes and re-creates it.
//   - VIPs that are the node's own addresses (node ports) are "real IPs":
//     cnat interposes on the address's forwarding entry instead of owning
//     it, so that the node's other traffic to it is unchanged.
//
// Translations carry no tag, no flags in VPP's dump, and one translation
// exists per key whoever made it: cnat_translation_update on a key that
// exists replaces it. So ownership cannot be told per translation, only by
// address: the renderer owns every cnat translation of its VPP (a node's
// VPP is vcoil's own), except those whose VIP lies in
// Config.ForeignVIPs, which it never changes nor deletes and where it
// renders nothing. The format of its translations lives in VPP beside
// them: a marker translation, TCP to 169.254.101.254 (in vcoil's
// link-local range of sinks, used by nothing else), whose port is
// formatversion.CnatTranslations; a marker of a newer format stops the
// sync before any change.
//
// The renderer keeps the desired translations in memory (Resync's state
// plus Updates). Resync, an Update that finds a new VPP incarnation, and
// the first call after a failed request dump what VPP holds and send only
// the difference; other Updates send the difference of the frontends that
// changed. A changed set of backends replaces the translation's paths in
// place (its ID, and the sessions of the backends that stay, are kept:
// checked on a real VPP). Requests are pipelined (Config.MaxInFlight in
// flight).
//
// The switch from NAT44-ED (retire.go): the first full sync of each VPP
// deletes the NAT44 renderer's static mappings, after the translations;
// the driver takes the pods' NAT44 roles away.
//
// What it does not do: SCTP (cnat rewrites TCP and UDP ports only),
// telling pod clients of an eTP=Local external frontend from outside
// ones, an affinity timeout, and forgetting a UDP client's session to a
// backend that went while the client keeps sending (no API removes one
// session).
package cnat
