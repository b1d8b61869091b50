package constants

// The Egress tunnels' kernel objects in client pods and router pods (package
// egress). docs/egress.md documents them; change both together.
const (
	// EgressTable is the routing table of a client pod's routes to its
	// Egresses' destinations, and of a router pod's routes back to its
	// peers through VXLAN.
	EgressTable = 118
	// EgressFoUTable is a router pod's table of routes back to its peers
	// through FoU tunnels.
	EgressFoUTable = 119
	// EgressExcludeRulePriority is the priority of a client pod's rules
	// "to <cluster network> lookup main", which keep the cluster's own
	// networks and the Egresses' Service addresses out of the tunnels, and
	// of a router pod's rule "iif lo lookup main", which keeps the tunnels'
	// own packets out of the peers' tables.
	EgressExcludeRulePriority = 1990
	// EgressRulePriority is the priority of a client pod's rule "lookup
	// <EgressTable>" and of a router pod's rules "fwmark <mark> lookup
	// <table>": after the exclusions, before main (32766).
	EgressRulePriority = 2000
	// EgressNFTable is the inet nftables table of package egress in client
	// pods (MSS clamp) and router pods (forwarding filter, masquerade, MSS
	// clamp, reply marks).
	EgressNFTable = "vcoil-egress"
	// EgressVXLANMark and EgressFoUMark are the connection marks a router
	// pod gives to flows that came through VXLAN or FoU, copied to the
	// packet mark of their replies so that the replies go back through
	// the same encapsulation; EgressMarkMask covers both.
	EgressVXLANMark = 0x1000
	EgressFoUMark   = 0x2000
	EgressMarkMask  = 0x3000
	// EgressGatewayIPv4 and EgressGatewayIPv6 are the virtual next hop of a
	// client pod's routes through a VXLAN tunnel: a static neighbour
	// resolves them to the routers' MAC address, so no router holds them.
	EgressGatewayIPv4 = "169.254.77.1"
	EgressGatewayIPv6 = "fe80::77:1"
)
