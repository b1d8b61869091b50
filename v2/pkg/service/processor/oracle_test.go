package processor

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/vcoil/vcoil/v2/pkg/service"
)

// The oracle states, apart from Build and in the words of the Kubernetes
// documentation and kube-proxy's behaviour, what happens to a connection to
// a service frontend: which endpoints may receive it, or whether it is
// rejected (no usable endpoint of its family anywhere) or dropped (usable
// endpoints exist, but none the policy allows). It reads the Kubernetes
// objects directly; the property test compares it with what the model says
// to renderers.

// frontendKind is where a connection is addressed.
type frontendKind string

const (
	toClusterIP  frontendKind = "clusterIP"
	toNodePort   frontendKind = "nodePort"
	toExternalIP frontendKind = "externalIP"
	toLoadBalanc frontendKind = "loadBalancerIP"
)

// sourceKind is where a connection comes from.
type sourceKind string

const (
	fromOutside  sourceKind = "outside"   // another host, through this node
	fromLocalPod sourceKind = "local pod" // a pod on this node
)

// question is one connection to ask the oracle about.
type question struct {
	port     string // protocol/port
	frontend frontendKind
	v6       bool
	source   sourceKind
}

func (q question) String() string {
	fam := "IPv4"
	if q.v6 {
		fam = "IPv6"
	}
	return fmt.Sprintf("%s %s %s from %s", q.port, fam, q.frontend, q.source)
}

// oracle answers every question about svc: "reject", "drop" or "forward to"
// the sorted endpoints (address:port). Nil for a service kube-proxy ignores.
func oracle(svc *corev1.Service, epSlices []*discoveryv1.EndpointSlice, nodeName, zone string) map[question]string {
	if svc.Spec.Type == corev1.ServiceTypeExternalName || svc.Spec.ClusterIP == "None" || hasLabel(svc, "service.kubernetes.io/service-proxy-name") || hasLabel(svc, "service.kubernetes.io/headless") {
		return nil
	}
	out := map[question]string{}
	reachableFromOutside := svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer || len(svc.Spec.ExternalIPs) > 0
	for _, sp := range svc.Spec.Ports {
		proto := sp.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		portName := fmt.Sprintf("%s/%d", proto, sp.Port)
		for _, v6 := range []bool{false, true} {
			usable := oracleEndpoints(svc, epSlices, sp.Name, proto, v6, nodeName)
			answer := func(policyLocal bool) string {
				if len(usable) == 0 {
					return "reject" // nothing anywhere: ICMP unreachable / TCP reset
				}
				var chosen []oracleEndpoint
				if policyLocal {
					chosen = localChoice(usable)
				} else {
					chosen = clusterChoice(usable, nodeName, zone)
				}
				if len(chosen) == 0 {
					return "drop" // endpoints exist, but not where the policy allows
				}
				var s []string
				for _, e := range chosen {
					s = append(s, e.key.String())
				}
				slices.Sort(s)
				return "forward to " + strings.Join(s, " ")
			}
			internalLocal := svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
			externalLocal := reachableFromOutside && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
			frontends := map[frontendKind]bool{
				toClusterIP:  hasFamily(svc.Spec.ClusterIPs, v6),
				toNodePort:   sp.NodePort != 0, // on the node's address of each family
				toExternalIP: hasFamily(svc.Spec.ExternalIPs, v6),
			}
			if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
				var vips []string
				for _, ing := range svc.Status.LoadBalancer.Ingress {
					if ing.IP != "" && (ing.IPMode == nil || *ing.IPMode == corev1.LoadBalancerIPModeVIP) {
						vips = append(vips, ing.IP)
					}
				}
				frontends[toLoadBalanc] = hasFamily(vips, v6)
			}
			for f, present := range frontends {
				if !present {
					continue
				}
				for _, src := range []sourceKind{fromOutside, fromLocalPod} {
					q := question{port: portName, frontend: f, v6: v6, source: src}
					switch {
					case f == toClusterIP:
						// The internal policy, whoever asks.
						out[q] = answer(internalLocal)
					case src == fromLocalPod:
						// This node's pods reach external frontends as if
						// the policy were Cluster, so that eTP=Local
						// services work from every node.
						out[q] = answer(false)
					default:
						out[q] = answer(externalLocal)
					}
				}
			}
		}
	}
	return out
}

type oracleEndpoint struct {
	key                      netip.AddrPort
	local                    bool
	ready, serving, terminat bool
	zoneHints, nodeHints     []string
}

// oracleEndpoints are the endpoints of one port and family that may get
// traffic at all: ready ones, and serving terminating ones. An address:port
// in several slices counts once, as ready if any copy is.
func oracleEndpoints(svc *corev1.Service, epSlices []*discoveryv1.EndpointSlice, portName string, proto corev1.Protocol, v6 bool, nodeName string) []oracleEndpoint {
	want := discoveryv1.AddressTypeIPv4
	if v6 {
		want = discoveryv1.AddressTypeIPv6
	}
	byKey := map[netip.AddrPort]oracleEndpoint{}
	for _, s := range epSlices {
		if s.Namespace != svc.Namespace || s.Labels["kubernetes.io/service-name"] != svc.Name || s.AddressType != want {
			continue
		}
		if _, ok := s.Labels["service.kubernetes.io/headless"]; ok {
			continue
		}
		for _, p := range s.Ports {
			name, pp := "", corev1.ProtocolTCP
			if p.Name != nil {
				name = *p.Name
			}
			if p.Protocol != nil {
				pp = *p.Protocol
			}
			if name != portName || pp != proto || p.Port == nil {
				continue
			}
			for _, e := range s.Endpoints {
				a, err := netip.ParseAddr(e.Addresses[0])
				if err != nil {
					continue
				}
				oe := oracleEndpoint{key: netip.AddrPortFrom(a, uint16(*p.Port))}
				oe.ready = e.Conditions.Ready == nil || *e.Conditions.Ready
				oe.serving = oe.ready
				if e.Conditions.Serving != nil {
					oe.serving = *e.Conditions.Serving
				}
				oe.terminat = e.Conditions.Terminating != nil && *e.Conditions.Terminating
				if !oe.ready && !(oe.serving && oe.terminat) {
					continue
				}
				oe.local = e.NodeName != nil && *e.NodeName == nodeName
				if e.Hints != nil {
					for _, z := range e.Hints.ForZones {
						oe.zoneHints = append(oe.zoneHints, z.Name)
					}
					for _, n := range e.Hints.ForNodes {
						oe.nodeHints = append(oe.nodeHints, n.Name)
					}
				}
				if old, ok := byKey[oe.key]; !ok || (!old.ready && oe.ready) {
					byKey[oe.key] = oe
				}
			}
		}
	}
	var out []oracleEndpoint
	for _, e := range byKey {
		out = append(out, e)
	}
	return out
}

// clusterChoice: ready endpoints, narrowed by hints only when every ready
// endpoint carries them and some are meant for this node (or else its
// zone); with no ready endpoint anywhere, the serving terminating ones.
func clusterChoice(eps []oracleEndpoint, nodeName, zone string) []oracleEndpoint {
	var ready []oracleEndpoint
	for _, e := range eps {
		if e.ready {
			ready = append(ready, e)
		}
	}
	if len(ready) == 0 {
		var st []oracleEndpoint
		for _, e := range eps {
			if e.serving && e.terminat {
				st = append(st, e)
			}
		}
		return st
	}
	narrow := func(hints func(oracleEndpoint) []string, me string) []oracleEndpoint {
		var mine []oracleEndpoint
		for _, e := range ready {
			if len(hints(e)) == 0 {
				return nil
			}
			if slices.Contains(hints(e), me) {
				mine = append(mine, e)
			}
		}
		return mine
	}
	if mine := narrow(func(e oracleEndpoint) []string { return e.nodeHints }, nodeName); len(mine) > 0 {
		return mine
	}
	if mine := narrow(func(e oracleEndpoint) []string { return e.zoneHints }, zone); len(mine) > 0 {
		return mine
	}
	return ready
}

// localChoice: this node's ready endpoints, or else its serving terminating
// ones; hints do not matter.
func localChoice(eps []oracleEndpoint) []oracleEndpoint {
	var ready, st []oracleEndpoint
	for _, e := range eps {
		switch {
		case !e.local:
		case e.ready:
			ready = append(ready, e)
		case e.serving && e.terminat:
			st = append(st, e)
		}
	}
	if len(ready) > 0 {
		return ready
	}
	return st
}

func hasFamily(addrs []string, v6 bool) bool {
	for _, s := range addrs {
		if a, err := netip.ParseAddr(s); err == nil && a.Is6() == v6 {
			return true
		}
	}
	return false
}

// modelAnswers answers the same questions from the model, the way a
// renderer reads it.
func modelAnswers(m *service.Service) map[question]string {
	if m == nil {
		return nil
	}
	out := map[question]string{}
	for i := range m.Ports {
		p := &m.Ports[i]
		portName := fmt.Sprintf("%s/%d", p.Protocol, p.Port)
		for _, v6 := range []bool{false, true} {
			probe := netip.IPv4Unspecified()
			if v6 {
				probe = netip.IPv6Unspecified()
			}
			answer := func(eps []service.Endpoint) string {
				if len(service.FamilyEndpoints(p.Endpoints, probe)) == 0 {
					return "reject"
				}
				eps = service.FamilyEndpoints(eps, probe)
				if len(eps) == 0 {
					return "drop"
				}
				var s []string
				for _, e := range eps {
					s = append(s, e.Key().String())
				}
				slices.Sort(s)
				return "forward to " + strings.Join(s, " ")
			}
			frontends := map[frontendKind]bool{
				toClusterIP:  len(service.FamilyEndpoints(asEndpoints(m.ClusterIPs), probe)) > 0,
				toNodePort:   p.NodePort != 0,
				toExternalIP: len(service.FamilyEndpoints(asEndpoints(m.ExternalIPs), probe)) > 0,
				toLoadBalanc: len(service.FamilyEndpoints(asEndpoints(m.LoadBalancerIPs), probe)) > 0,
			}
			for f, present := range frontends {
				if !present {
					continue
				}
				for _, src := range []sourceKind{fromOutside, fromLocalPod} {
					q := question{port: portName, frontend: f, v6: v6, source: src}
					switch {
					case f == toClusterIP:
						out[q] = answer(m.InternalEndpoints(p))
					case src == fromLocalPod:
						out[q] = answer(p.Cluster)
					default:
						out[q] = answer(m.ExternalEndpoints(p))
					}
				}
			}
		}
	}
	return out
}

func asEndpoints(addrs []netip.Addr) []service.Endpoint {
	var out []service.Endpoint
	for _, a := range addrs {
		out = append(out, service.Endpoint{Addr: a})
	}
	return out
}

func hasLabel(svc *corev1.Service, key string) bool {
	_, ok := svc.Labels[key]
	return ok
}
