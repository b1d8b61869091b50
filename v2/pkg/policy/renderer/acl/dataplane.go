package acl

import (
	"context"

	"go.fd.io/govpp/api"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
)

// Dataplane is what the renderer needs from vcoil's VPP dataplane
// (vpp.Dataplane satisfies it).
type Dataplane interface {
	// Channel returns a new API channel on the current connection, with
	// room for maxInFlight pipelined requests, and the node's interfaces
	// (the uplink and the host interconnect) with the VPP incarnation.
	Channel(ctx context.Context, maxInFlight int) (api.Channel, vpp.NodeInterfaces, error)
	// SetACLLists makes each setting's lists the policy ACLs of its
	// interface (a node interface, or the pod holding an address) in
	// incarnation inc, merged with the other owners' ACLs, in one batch;
	// it refuses more than 255 ACLs on one interface, naming it.
	SetACLLists(ctx context.Context, inc vpp.Incarnation, owner vpp.ACLOwner, settings []vpp.ACLSetting) error
}
