// Package cni is the logic of the vcoil CNI binary: it reads what the
// container runtime hands a CNI plugin (the network configuration on stdin,
// the CNI_* environment variables), forwards the call to vcoild over gRPC on
// a UNIX socket (package cnirpc) and turns vcoild's answer into the CNI
// result or CNI error the runtime expects, in the spec version it asked for.
//
// What the binary shares with vcoild, the network configuration and the
// conversion between CNI errors and gRPC statuses, is package cnicontract.
//
// It deliberately does no networking of its own: it never enters the
// network namespace, allocates no address and keeps no state. Everything
// that lasts lives in vcoild.
package cni
