// Package daemon is vcoild's core: the gRPC server behind the vcoil CNI
// binary. It ties node IPAM, the checkpoint and a dataplane together in the
// order that keeps an address from being lost or given twice, whatever
// instant the daemon dies at:
//
//	ADD: allocate (memory) -> checkpoint (disk) -> wire (dataplane) -> result
//	DEL: unwire -> free (memory) -> forget (disk)
//
// At start it rebuilds the allocations from the checkpoint and the
// dataplane (Recover). It knows neither Kubernetes objects beyond a
// Namespace's pool annotation, nor how a dataplane wires a pod.
package daemon
