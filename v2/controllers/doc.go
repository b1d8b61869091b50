// Package controllers holds vcoil-controller's reconcilers: BlockRequests are
// answered with AddressBlocks carved from AddressPools, pools are kept while
// their blocks exist, and the blocks and requests of deleted Nodes are
// collected. The address arithmetic lives in v2/pkg/ipam; this package only
// talks to the apiserver.
package controllers
