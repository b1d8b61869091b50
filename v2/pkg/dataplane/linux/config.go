package linux

import (
	"fmt"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vcoil/vcoil/v2/pkg/constants"
)

// Defaults of Config, and the fixed values of the wiring. They are documented
// in docs/linux-dataplane.md; change both together. The pod table's defaults
// and its routes' protocol are in package constants, since package routes
// writes into the same table.
const (
	// DefaultMTU is used when Config.MTU is 0 and the node has no default
	// route to take the MTU from.
	DefaultMTU = 1500

	// HostIfPrefix starts the name of every node-side veth.
	HostIfPrefix = "vcoil"
)

// The pod's next hop, for the CNI result's gateways. The node-side veth of
// every pod holds these addresses, so each pod finds its gateway on its own
// link.
const (
	GatewayIPv4 = "169.254.1.1"
	GatewayIPv6 = "fe80::1"
)

var (
	gatewayIPv4 = netip.MustParseAddr(GatewayIPv4)
	gatewayIPv6 = netip.MustParseAddr(GatewayIPv6)
)

// Config chooses the node namespace, the pod table and the MTU. The zero
// value is a working configuration for a node.
type Config struct {
	// NodeNetns is the path of the node's network namespace. Empty means the
	// namespace of the vcoild process (/proc/self/ns/net), which is the
	// node's for a host-network DaemonSet; tests point it at a namespace of
	// their own.
	NodeNetns string
	// PodTable is the routing table of the host routes to pods; 0 means
	// constants.PodTable. It must be a table no one else writes to.
	PodTable int
	// PodRulePriority is the priority of the rules (IPv4 and IPv6) that send
	// every lookup through PodTable; 0 means constants.PodRulePriority.
	PodRulePriority int
	// MTU of both ends of every pod veth. 0 means the MTU of the node's
	// uplink, the link of the main table's default route (IPv4, else IPv6)
	// in the node namespace, detected once by Init (or the first SetupPod)
	// and kept; DefaultMTU while there is no such route. IPv6 needs at least
	// 1280.
	MTU int
	// Registry, when not nil, gets the dataplane's metrics
	// (vcoil_source_validation_drops_total).
	Registry prometheus.Registerer
}

// withDefaults fills the zero fields and rejects values the kernel would
// refuse later, naming the field.
func (c Config) withDefaults() (Config, error) {
	if c.PodTable == 0 {
		c.PodTable = constants.PodTable
	}
	if c.PodRulePriority == 0 {
		c.PodRulePriority = constants.PodRulePriority
	}
	switch {
	case c.PodTable < 0 || c.PodTable == 253 || c.PodTable == 254 || c.PodTable == 255:
		// 253-255 are the kernel's default, main and local tables.
		return c, fmt.Errorf("PodTable %d: want a table other than default (253), main (254) and local (255)", c.PodTable)
	case c.PodRulePriority < 1 || c.PodRulePriority >= 32766:
		return c, fmt.Errorf("PodRulePriority %d: want 1..32765, before the main table's rule", c.PodRulePriority)
	case c.MTU != 0 && (c.MTU < 68 || c.MTU > 65535):
		return c, fmt.Errorf("MTU %d: want 0 (detect) or 68..65535", c.MTU)
	}
	return c, nil
}
