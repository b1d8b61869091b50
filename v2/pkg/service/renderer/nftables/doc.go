// Package nftables is the service renderer of vcoil's Linux dataplane: it
// programs the node's kernel from the service model (package service), in
// place of kube-proxy, with the nft binary, in one inet table that vcoil
// alone writes (docs/services.md, "The nftables renderer").
//
// knftables renders the table's sets, chains and rules; the renderer writes
// elements itself, up to a thousand per nft command, because knftables
// writes one command per element and nft parses ten thousand services'
// 110,000 commands a second and more slower than the same elements in 110.
// The table is an nft.Table: nft runs the scripts, and the table is read
// over netlink, never with nft, which reads and prints every element for
// any listing; package nft decodes only the layouts of the renderer's own
// sets and maps (elements.go).
//
// The table's chains do not depend on the number of services: services and
// endpoints are elements of verdict maps and DNAT maps, so a sync of ten
// thousand services writes elements, not chains, and an Update changes only
// the elements of the frontends that changed. The renderer keeps what it
// last wrote in memory and diffs against it; the kernel is listed only by
// the first Resync of a process, to adopt the table a previous vcoild left
// (changing only what differs, so that a restart does not disturb traffic),
// by the Resync after a failed transaction, and once per
// Config.FullResyncPeriod, to repair drift. Every Resync or Update is one
// transaction: an nft script, or, when it changes elements only, one
// netlink batch (nft.Table.ApplyElements), since nft reads every element of
// a map before it adds one. The exception is a new table: its objects go
// through nft, then its elements over netlink in batches of
// nft.MaxApplyOps, about four times faster than nft at ten thousand
// services.
//
// The table carries its format version in the comment of an empty set
// named format ("vcoil services v2", formatversion.ServiceTable). A table without
// it was written before format versions (version 1) and is adopted like
// any other, in place: the first Resync adds the set in the transaction
// that applies its differences. A table of a newer version is refused
// (formatversion.NewerError) and left unchanged.
//
// It does not watch Kubernetes, apply traffic policies or topology (the
// processor did), serve health check node ports, or set conntrack sysctls.
package nftables
