package cnat

import (
	"context"

	"go.fd.io/govpp/api"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
)

// Dataplane is what the renderer needs from vcoil's VPP dataplane
// (vpp.Dataplane satisfies it): API channels on its connection and the
// routes of the service network and cnat's set-up of pods. Unlike
// NAT44-ED, cnat needs no role that depends on the Services: a translation
// owns (or, for the node's own addresses, interposes on) its VIP's
// forwarding entry, and a pod gets the same few features (for hairpin)
// whatever the number of Services.
type Dataplane interface {
	// Channel returns a new API channel on the current connection and the
	// node's interfaces with the VPP incarnation it talks to.
	Channel(ctx context.Context, maxInFlight int) (api.Channel, vpp.NodeInterfaces, error)
	// SetServiceNetwork routes the service CIDRs, the NAT loopback and the
	// sinks.
	SetServiceNetwork(ctx context.Context, net vpp.ServiceNetwork) error
	// SetCnatPods sets cnat's SNAT for pods: a pod reaching itself through
	// a Service is source-NATed to the NAT loopback of the family.
	SetCnatPods(ctx context.Context, snat vpp.CnatSNAT) error
	// SetInterfaceACLs sets the renderer's input ACLs on a node interface
	// (the loadBalancerSourceRanges ACL).
	SetInterfaceACLs(ctx context.Context, inc vpp.Incarnation, iface vpp.NodeInterface, owner vpp.ACLOwner, input []uint32) error
}
