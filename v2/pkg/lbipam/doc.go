// Package lbipam is the address arithmetic of LoadBalancer pools: which
// addresses a pool can give to Services, how many, the first free one, which
// addresses a Service asks for, and which Service holds which address. It is
// pure: values in, values out, no I/O, no Kubernetes client. It never
// enumerates a subnet: an IPv6 LoadBalancer pool may be a /64, so counts are
// saturating sums of powers of two and the free-address search walks the
// used addresses instead of the subnet. vcoil-controller's LoadBalancer
// reconciler builds on it; the pod side of IPAM (blocks) is package ipam.
package lbipam
