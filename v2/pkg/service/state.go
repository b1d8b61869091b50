package service

import (
	"cmp"
	"math"
	"net/netip"
	"slices"

	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

// Rendering says how one renderer serves what the model leaves to it,
// where the renderers differ, so that Frontends lists the frontends as
// that renderer serves them. Each renderer package declares its own
// (nftables.Rendering, nat44.Rendering); the zero value is kube-proxy's
// semantics in full.
type Rendering struct {
	// Name is the renderer's name in the node's state ("nftables",
	// "nat44").
	Name string
	// IPv4Only leaves IPv6 frontends out: the renderer does not serve them.
	IPv4Only bool
	// NoSCTP leaves SCTP ports out.
	NoSCTP bool
	// LocalForAll: the external frontends of an externalTrafficPolicy=Local
	// service send every client, the node's pods too, to the local
	// endpoints. Otherwise traffic from the node and its pods uses the
	// Cluster endpoints, as in kube-proxy (Frontend.FromNode).
	LocalForAll bool
	// AffinityByHashIPv6: IPv6 frontends keep a client on one backend by
	// a hash of its address, without the affinity's timeout.
	AffinityByHashIPv6 bool
	// AffinityByHash: frontends of both families keep a client on one
	// backend by a hash of its address, without the affinity's timeout.
	AffinityByHash bool
	// AffinityNeedsTwo: affinity applies only to frontends of two backends
	// or more (one backend needs none).
	AffinityNeedsTwo bool
	// Backends, when set, is what the renderer keeps of a frontend's
	// endpoints (of the frontend's family, in the model's order).
	Backends func(eps []Endpoint) []Endpoint
}

// What a frontend does without backends (nodestate.Frontend.NoBackends).
const (
	noBackendsReject = "reject"
	noBackendsDrop   = "drop"
)

// Frontends lists every frontend the renderer described by how serves for
// services on node, as the node's state shows them, sorted by address,
// protocol and port. It follows the renderers: per service port, each
// cluster IP with the internal endpoints, each external IP and
// LoadBalancer IP and the node port on each of the node's NodePort
// addresses with the external ones; a frontend claimed twice is served by
// the first claim of the service with the smallest ID; a port without
// endpoints of the frontend's family rejects, a frontend whose endpoints
// are all elsewhere (a Local traffic policy) drops. Services that fail
// Validate are left out, as the renderers leave them out.
func Frontends(node *Node, services map[ID]*Service, how Rendering) []nodestate.Frontend {
	type key struct {
		addr  netip.Addr
		proto Protocol
		port  uint16
	}
	var out []nodestate.Frontend
	seen := map[key]bool{}
	for _, id := range sortedIDs(services) {
		s := services[id]
		if s.Validate() != nil {
			continue
		}
		affinity := 0.0
		if s.AffinityTimeout > 0 {
			affinity = math.Ceil(s.AffinityTimeout.Seconds())
		}
		for i := range s.Ports {
			p := &s.Ports[i]
			if how.NoSCTP && p.Protocol == SCTP {
				continue
			}
			add := func(kind string, a netip.Addr, port uint16) {
				k := key{a, p.Protocol, port}
				if (how.IPv4Only && !a.Is4()) || seen[k] {
					return
				}
				seen[k] = true
				out = append(out, frontend(s, p, kind, a, port, affinity, how))
			}
			for _, a := range s.ClusterIPs {
				add(nodestate.FrontendClusterIP, a, p.Port)
			}
			for _, a := range s.ExternalIPs {
				add(nodestate.FrontendExternalIP, a, p.Port)
			}
			for _, a := range s.LoadBalancerIPs {
				add(nodestate.FrontendLoadBalancer, a, p.Port)
			}
			if p.NodePort != 0 {
				for _, a := range node.NodePortAddresses {
					add(nodestate.FrontendNodePort, a, p.NodePort)
				}
			}
		}
	}
	slices.SortFunc(out, func(x, y nodestate.Frontend) int {
		return cmp.Or(x.Address.Compare(y.Address), cmp.Compare(x.Protocol, y.Protocol), cmp.Compare(x.Port, y.Port))
	})
	return out
}

// frontend is one frontend of port p of s at a.
func frontend(s *Service, p *Port, kind string, a netip.Addr, port uint16, affinity float64, how Rendering) nodestate.Frontend {
	f := nodestate.Frontend{
		Service: s.ID.String(), PortName: p.Name, Kind: kind,
		Address: a, Port: port, Protocol: string(p.Protocol),
	}
	picks := 0
	if kind == nodestate.FrontendClusterIP {
		f.Local = s.InternalLocal
		f.Backends, f.NoBackends = serve(p, a, s.InternalEndpoints(p), how)
		picks = len(f.Backends)
	} else {
		f.Local = s.ExternalLocal
		f.Backends, f.NoBackends = serve(p, a, s.ExternalEndpoints(p), how)
		picks = len(f.Backends)
		if s.ExternalLocal && !how.LocalForAll {
			t := &nodestate.NodeTraffic{}
			t.Backends, t.NoBackends = serve(p, a, p.Cluster, how)
			f.FromNode = t
			picks = max(picks, len(t.Backends))
		}
	}
	if kind == nodestate.FrontendLoadBalancer && len(s.LoadBalancerSourceRanges) > 0 {
		// Every range, whatever its family: a client of the frontend's
		// family matches none of another's, and a frontend whose
		// family has no range drops every client in both renderers.
		for _, r := range s.LoadBalancerSourceRanges {
			f.SourceRanges = append(f.SourceRanges, r.Masked())
		}
		slices.SortFunc(f.SourceRanges, func(x, y netip.Prefix) int {
			return cmp.Or(x.Addr().Compare(y.Addr()), cmp.Compare(x.Bits(), y.Bits()))
		})
		f.SourceRanges = slices.Compact(f.SourceRanges)
	}
	need := 1
	if how.AffinityNeedsTwo {
		need = 2
	}
	if affinity > 0 && picks >= need {
		f.Affinity = nodestate.Seconds(affinity)
		f.AffinityByHash = how.AffinityByHash || (how.AffinityByHashIPv6 && a.Is6())
	}
	return f
}

// serve is how the frontend a of port p serves traffic that eps are the
// endpoints of: its backends, or what it does without.
func serve(p *Port, a netip.Addr, eps []Endpoint, how Rendering) ([]nodestate.Backend, string) {
	if !p.HasEndpointsFor(a) {
		return nil, noBackendsReject
	}
	eps = FamilyEndpoints(eps, a)
	if how.Backends != nil && len(eps) > 0 {
		eps = how.Backends(eps)
	}
	if len(eps) == 0 {
		return nil, noBackendsDrop
	}
	out := make([]nodestate.Backend, 0, len(eps))
	for _, e := range eps {
		out = append(out, nodestate.Backend{Address: e.Addr, Port: e.Port, Node: e.NodeName, Local: e.Local, Terminating: e.Terminating})
	}
	return out, ""
}

func sortedIDs(services map[ID]*Service) []ID {
	ids := make([]ID, 0, len(services))
	for id := range services {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, ID.Compare)
	return ids
}
