package agent

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

// StateSource fills the node state's egress section: every local pod
// whose annotation names Egresses (or whose egress failed), with the
// Egresses as last applied to its netns (encapsulation, the router
// Service's ClusterIPs, destinations) and why its egress is not as asked.
// A pod whose Egress is missing is listed without it, the reason in
// Error.
func (a *Agent) StateSource() nodestate.Source {
	return nodestate.SourceFunc(func(_ context.Context, s *nodestate.State) error {
		out := &nodestate.Egress{}
		a.mu.Lock()
		keys := make([]types.NamespacedName, 0, len(a.pods))
		for k, st := range a.pods {
			if len(st.refs) > 0 || len(st.config.Egresses) > 0 || st.err != "" {
				keys = append(keys, k)
			}
		}
		slices.SortFunc(keys, func(x, y types.NamespacedName) int {
			return cmp.Or(strings.Compare(x.Namespace, y.Namespace), strings.Compare(x.Name, y.Name))
		})
		for _, k := range keys {
			st := a.pods[k]
			p := nodestate.EgressPod{Namespace: k.Namespace, Name: k.Name, Error: st.err}
			for _, e := range st.config.Egresses {
				use := nodestate.EgressUse{
					Egress: e.Egress.String(), Encapsulation: string(e.Kind),
					Destinations: slices.Clone(e.Destinations), Routers: slices.Clone(e.ServiceIPs),
				}
				if len(e.ServiceIPs) > 0 {
					// desired sorts them IPv4 first: a VXLAN tunnel's remote.
					use.Router = e.ServiceIPs[0]
				}
				p.Egresses = append(p.Egresses, use)
			}
			out.Pods = append(out.Pods, p)
		}
		a.mu.Unlock()
		s.Egress = out
		return nil
	})
}
