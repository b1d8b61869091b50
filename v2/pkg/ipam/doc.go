// Package ipam is vcoil's address arithmetic: how an AddressPool's subnets are
// carved into blocks, which addresses of a block may be given to pods, and
// where a node subnet keeps its NAT loopback. It is pure: values in, values
// out, no I/O, no Kubernetes client. The controller and the node daemon build
// on it; the webhook uses it to validate pools.
package ipam
