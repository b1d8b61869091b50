// Package nftables is the NetworkPolicy renderer of vcoil's Linux
// dataplane: it enforces the rules of the policy configurator (package
// policy/renderer) with nftables, in one inet table that vcoil alone
// writes (constants.PolicyTable; docs/policy.md, "The nftables renderer").
//
// It scales by elements, not chains. Pods whose rule lists of a direction
// are equal share one group: a chain and its sets. A pod is an element of
// a dispatch map (its address -> jump to its group), so pod churn changes
// map elements; a group's peers and ports are elements of its sets (exact
// addresses and ports in hash sets, networks and port ranges in interval
// sets), so peer churn changes set elements in place. Only a new
// combination of protocols and port ranges makes a new chain.
//
// Each Render is one nft transaction. The renderer keeps a mirror of what
// the kernel holds and writes only the difference; it reads the table
// (over netlink) only at its first Render and after a failed one, to adopt
// what an earlier vcoild left without disturbing traffic. A table it
// cannot read is replaced in one transaction, so no pod is ever left
// unfiltered; a table of a newer format is refused.
package nftables
