package announce

import (
	"net/netip"

	"github.com/vcoil/vcoil/v2/pkg/service"
)

// Addresses returns the LoadBalancer addresses of svc that this node
// announces. With externalTrafficPolicy Cluster every node announces every
// address: any node forwards the traffic to an endpoint. With Local, a node
// announces an address only when it has a ready endpoint of the address's
// family on the node (in any port): the renderer drops external traffic
// that finds no local endpoint, and announcing would attract it. A
// terminating endpoint is not ready and does not count, so that the
// announcement goes while the endpoint drains. The result aliases nothing
// of svc.
func Addresses(svc *service.Service) []netip.Addr {
	if len(svc.LoadBalancerIPs) == 0 {
		return nil
	}
	if !svc.ExternalLocal {
		return append([]netip.Addr(nil), svc.LoadBalancerIPs...)
	}
	var v4, v6 bool
	for i := range svc.Ports {
		for _, e := range svc.Ports[i].Endpoints {
			if e.Local && e.Ready {
				v4 = v4 || e.Addr.Is4()
				v6 = v6 || !e.Addr.Is4()
			}
		}
	}
	var out []netip.Addr
	for _, a := range svc.LoadBalancerIPs {
		if (a.Is4() && v4) || (!a.Is4() && v6) {
			out = append(out, a)
		}
	}
	return out
}
