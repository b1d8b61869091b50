package nftables

import (
	"math"
	"net/netip"
	"slices"

	"github.com/vcoil/vcoil/v2/pkg/service"
)

// proto is a transport protocol as nft names it (inet_proto).
type proto uint8

const (
	protoTCP  proto = 6
	protoUDP  proto = 17
	protoSCTP proto = 132
)

var protos = []proto{protoTCP, protoUDP, protoSCTP}

func (p proto) String() string {
	switch p {
	case protoTCP:
		return "tcp"
	case protoUDP:
		return "udp"
	case protoSCTP:
		return "sctp"
	}
	return "invalid"
}

func protoOf(p service.Protocol) proto {
	switch p {
	case service.TCP:
		return protoTCP
	case service.UDP:
		return protoUDP
	case service.SCTP:
		return protoSCTP
	}
	return 0
}

func parseProto(s string) (proto, bool) {
	for _, p := range protos {
		if s == p.String() {
			return p, true
		}
	}
	return 0, false
}

// frontendKey is what a packet is matched on before DNAT: its destination
// address, protocol and port. Every element of the table starts with one.
type frontendKey struct {
	Addr  netip.Addr
	Proto proto
	Port  uint16
}

func compareFrontends(a, b frontendKey) int {
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c
	}
	if a.Proto != b.Proto {
		return int(a.Proto) - int(b.Proto)
	}
	return int(a.Port) - int(b.Port)
}

// verdictKind is what a frontend's verdict map element does.
type verdictKind uint8

const (
	// verdictNone: no element; the packet goes on (to the next map, or
	// untouched).
	verdictNone verdictKind = iota
	// verdictPick: goto the chain that picks one of N endpoints.
	verdictPick
	// verdictDrop: the frontend has endpoints, but none for this traffic
	// (a Local policy without local endpoints).
	verdictDrop
	// verdictOther: found in the kernel and not something vcoil writes; it
	// is replaced.
	verdictOther
)

// verdict is the value of a frontend in services4/6 or external-local4/6.
type verdict struct {
	Kind verdictKind
	N    int
	// Sticky picks by a hash of the client's address instead of at random:
	// IPv6 session affinity (see setAffinity).
	Sticky bool
}

// frontendState is everything the table holds for one frontend: both
// endpoint lists with their verdicts, the rejection, the firewall and the
// session affinity. It is what the renderer diffs; elements are derived
// from it.
type frontendState struct {
	// Cluster is the services4/6 verdict with the backends4/6 elements:
	// traffic to cluster IPs, and to external frontends from this node, its
	// pods, or from anywhere under externalTrafficPolicy=Cluster.
	Cluster  verdict
	Backends []netip.AddrPort
	// Local is the external-local4/6 verdict with backends-local4/6: traffic
	// from outside the node to an external frontend of an
	// externalTrafficPolicy=Local service.
	Local         verdict
	LocalBackends []netip.AddrPort
	// Reject puts the frontend in no-endpoints4/6: the service port has no
	// endpoint at all.
	Reject bool
	// Firewalled puts the frontend in firewall4/6: only sources in Allowed
	// (firewall-allow4/6) may reach it.
	Firewalled bool
	Allowed    []netip.Prefix
	// Affinity is the ClientIP affinity timeout in seconds of an IPv4
	// frontend (0: none; -1: an element vcoil did not write).
	Affinity int
	// Hairpin are the local endpoint addresses among the backends: a pod
	// reaching itself through the frontend is SNATed to the NAT loopback.
	// Not read from the kernel (the hairpin sets are refcounted across
	// frontends).
	Hairpin []netip.Addr
}

func (f *frontendState) equal(o *frontendState) bool {
	if f == nil || o == nil {
		return f == o
	}
	return f.Cluster == o.Cluster && slices.Equal(f.Backends, o.Backends) &&
		f.Local == o.Local && slices.Equal(f.LocalBackends, o.LocalBackends) &&
		f.Reject == o.Reject && f.Firewalled == o.Firewalled && slices.Equal(f.Allowed, o.Allowed) &&
		f.Affinity == o.Affinity && slices.Equal(f.Hairpin, o.Hairpin)
}

// endpointSet is every endpoint either list sends to.
func (f *frontendState) endpointSet() map[netip.AddrPort]bool {
	if f == nil {
		return nil
	}
	m := make(map[netip.AddrPort]bool, len(f.Backends)+len(f.LocalBackends))
	for _, l := range [][]netip.AddrPort{f.Backends, f.LocalBackends} {
		for _, e := range l {
			if e.IsValid() {
				m[e] = true
			}
		}
	}
	return m
}

// picks says whether any traffic to the frontend is DNATed.
func (f *frontendState) picks() bool {
	return f != nil && (f.Cluster.Kind == verdictPick || f.Local.Kind == verdictPick)
}

// frontendsOf renders one service into the states of its frontends, applying
// the model's semantics per family: cluster IPs use the internal endpoints;
// external frontends (node ports on the node's addresses, external IPs,
// LoadBalancer IPs) use the Cluster list for traffic from the node and its
// pods and the external list for the rest. It is the renderer's version of
// Contiv's ServiceToDNAT: one service in, its NAT entries out.
func frontendsOf(node *service.Node, s *service.Service, emit func(frontendKey, *frontendState)) {
	affinity := 0
	if s.AffinityTimeout > 0 {
		affinity = int(math.Ceil(s.AffinityTimeout.Seconds()))
	}
	for i := range s.Ports {
		p := &s.Ports[i]
		pr := protoOf(p.Protocol)
		for _, a := range s.ClusterIPs {
			emit(frontendKey{a, pr, p.Port}, clusterIPState(s, p, a, affinity))
		}
		for _, a := range s.ExternalIPs {
			emit(frontendKey{a, pr, p.Port}, externalState(s, p, a, affinity, false))
		}
		for _, a := range s.LoadBalancerIPs {
			emit(frontendKey{a, pr, p.Port}, externalState(s, p, a, affinity, len(s.LoadBalancerSourceRanges) > 0))
		}
		if p.NodePort != 0 {
			for _, a := range node.NodePortAddresses {
				emit(frontendKey{a, pr, p.NodePort}, externalState(s, p, a, affinity, false))
			}
		}
	}
}

func clusterIPState(s *service.Service, p *service.Port, a netip.Addr, affinity int) *frontendState {
	f := &frontendState{}
	if !p.HasEndpointsFor(a) {
		f.Reject = true
		return f
	}
	f.Cluster, f.Backends = pick(s.InternalEndpoints(p), a, &f.Hairpin)
	f.setAffinity(a, affinity)
	return f
}

func externalState(s *service.Service, p *service.Port, a netip.Addr, affinity int, firewalled bool) *frontendState {
	f := &frontendState{}
	if firewalled {
		f.Firewalled = true
		for _, r := range s.LoadBalancerSourceRanges {
			if r.Addr().Is4() == a.Is4() {
				f.Allowed = append(f.Allowed, r.Masked())
			}
		}
		slices.SortFunc(f.Allowed, func(x, y netip.Prefix) int {
			if c := x.Addr().Compare(y.Addr()); c != 0 {
				return c
			}
			return x.Bits() - y.Bits()
		})
		f.Allowed = slices.Compact(f.Allowed)
	}
	if !p.HasEndpointsFor(a) {
		f.Reject = true
		return f
	}
	f.Cluster, f.Backends = pick(p.Cluster, a, &f.Hairpin)
	if s.ExternalLocal {
		f.Local, f.LocalBackends = pick(p.Local, a, &f.Hairpin)
	}
	f.setAffinity(a, affinity)
	slices.SortFunc(f.Hairpin, netip.Addr.Compare)
	f.Hairpin = slices.Compact(f.Hairpin)
	return f
}

// setAffinity applies ClientIP session affinity. IPv4 frontends record
// each client's endpoint in a dynamic map with the service's timeout, as
// kube-proxy does. IPv6 frontends pick by a hash of the client's address
// instead, with no timeout: the nft 1.0.6 the lab runs cannot compile the
// update of a dynamic map whose key (client, frontend) or value (IPv6
// endpoint and port) exceeds 16 bytes (docs/services.md).
func (f *frontendState) setAffinity(a netip.Addr, seconds int) {
	if seconds == 0 || !f.picks() {
		return
	}
	if a.Is4() {
		f.Affinity = seconds
		return
	}
	f.Cluster.Sticky = f.Cluster.Kind == verdictPick
	f.Local.Sticky = f.Local.Kind == verdictPick
}

// pick is the verdict over the endpoints of eps in the family of frontend
// (service.FamilyEndpoints, filtered here without copying the model's
// endpoints): goto the chain of their number, whose numgen index i selects
// the i-th (the model sorts them, so a restarted renderer computes the same
// indices); drop when there are none.
func pick(eps []service.Endpoint, frontend netip.Addr, hairpin *[]netip.Addr) (verdict, []netip.AddrPort) {
	n := 0
	for i := range eps {
		if eps[i].Addr.Is4() == frontend.Is4() {
			n++
		}
	}
	if n == 0 {
		return verdict{Kind: verdictDrop}, nil
	}
	out := make([]netip.AddrPort, 0, n)
	for i := range eps {
		e := &eps[i]
		if e.Addr.Is4() != frontend.Is4() {
			continue
		}
		out = append(out, e.Key())
		if e.Local {
			*hairpin = append(*hairpin, e.Addr)
		}
	}
	return verdict{Kind: verdictPick, N: n}, out
}

// ownerOf chooses, among the services claiming one frontend, the one that
// renders it: the smallest ID, so that every renderer instance agrees.
func ownerOf(claims []service.ID) service.ID {
	return slices.MinFunc(claims, service.ID.Compare)
}

func familyOf(a netip.Addr) string {
	if a.Is4() {
		return "4"
	}
	return "6"
}
