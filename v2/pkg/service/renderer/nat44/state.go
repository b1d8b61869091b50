package nat44

import (
	"net/netip"

	"github.com/vcoil/vcoil/v2/pkg/service"
)

// Rendering is how the renderer serves the model, for the node's state
// (service.Frontends): IPv4 TCP and UDP frontends only; every client of an
// eTP=Local external frontend goes to the local endpoints; affinity only
// on load-balancing mappings (two backends or more); and the backends of a
// frontend are those whose probabilities fit VPP's 8-bit sum (see
// probabilities), each once.
func (r *Renderer) Rendering() service.Rendering {
	weight := r.cfg.LocalWeight
	return service.Rendering{
		Name: "nat44", IPv4Only: true, NoSCTP: true, LocalForAll: true, AffinityNeedsTwo: true,
		Backends: func(eps []service.Endpoint) []service.Endpoint {
			ls, _ := locals4(eps, weight)
			kept := make(map[netip.AddrPort]bool, len(ls))
			for _, l := range ls {
				kept[l.key()] = true
			}
			var out []service.Endpoint
			for _, e := range eps {
				if kept[e.Key()] {
					out = append(out, e)
					delete(kept, e.Key())
				}
			}
			return out
		},
	}
}
