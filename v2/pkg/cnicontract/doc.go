// Package cnicontract is what the CNI binary and vcoild agree on: the
// network configuration they both parse (ParseConf: the binary reads it from
// stdin, vcoild from CNIArgs.stdin_data, so neither can accept what the
// other refuses), and how CNI errors travel over gRPC as typed details
// (NewError and ToRPCError on vcoild's side, FromRPCError on the binary's,
// one mapping for both ends).
//
// It is pure logic without I/O, so that vcoild can share it without
// depending on the binary's package (cni), and the binary without depending
// on vcoild's.
package cnicontract
