package nat44

import (
	"context"
	"net/netip"

	"go.fd.io/govpp/api"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
)

// Dataplane is what the renderer needs from vcoil's VPP dataplane
// (vpp.Dataplane satisfies it): API channels on its connection, the NAT
// roles of interfaces, the routes of the service network and the ACL lists
// of the outside interfaces.
type Dataplane interface {
	// Channel returns a new API channel on the current connection and the
	// node's interfaces with the VPP incarnation it talks to.
	Channel(ctx context.Context, maxInFlight int) (api.Channel, vpp.NodeInterfaces, error)
	// SetNodeNATRole sets the NAT role of the uplink or the host
	// interconnect (enabling NAT44-ED with the dataplane's session table
	// size the first time).
	SetNodeNATRole(ctx context.Context, iface vpp.NodeInterface, role vpp.NATRole) error
	// SetPodNATRoles makes every pod a frontend, and the pods holding one
	// of backends also a backend.
	SetPodNATRoles(ctx context.Context, backends []netip.Addr) error
	// SetServiceNetwork routes the service CIDRs, the NAT loopback and the
	// sinks.
	SetServiceNetwork(ctx context.Context, net vpp.ServiceNetwork) error
	// SetInterfaceACLs sets the renderer's input ACLs on a node interface.
	SetInterfaceACLs(ctx context.Context, inc vpp.Incarnation, iface vpp.NodeInterface, owner vpp.ACLOwner, input []uint32) error
}
