// Package nftables is the service renderer of vcoil's Linux dataplane: it
// programs the node's kernel from the service model (package service), in
// place of kube-proxy, through knftables and the nft binary, in one inet
// table that vcoil alone writes (docs/services.md, "The nftables renderer").
//
// The table's chains do not depend on the number of services: services and
// endpoints are elements of verdict maps and DNAT maps, so a sync of ten
// thousand services writes elements, not chains, and an Update changes only
// the elements of the frontends that changed. The renderer keeps what it
// last wrote in memory and diffs against it; only Resync lists the kernel,
// to adopt the table a previous vcoild left (changing only what differs, so
// that a restart does not disturb traffic) and to repair drift. Every
// Resync or Update is one nft transaction.
//
// It does not watch Kubernetes, apply traffic policies or topology (the
// processor did), serve health check node ports, or set conntrack sysctls.
package nftables
