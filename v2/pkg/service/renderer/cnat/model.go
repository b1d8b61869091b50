package cnat

import (
	"cmp"
	"net/netip"
	"slices"
	"strconv"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// IP protocol numbers of translations. cnat rewrites the ports of TCP and
// UDP only (cnat_translation_ip4/ip6); an SCTP translation would change
// the address and leave the port, so SCTP ports are left out.
const (
	protoTCP uint8 = 6
	protoUDP uint8 = 17
)

func protoOf(p service.Protocol) (uint8, bool) {
	switch p {
	case service.TCP:
		return protoTCP, true
	case service.UDP:
		return protoUDP, true
	}
	return 0, false
}

// key is what cnat finds a translation by: its VIP, protocol and port (one
// frontend of one service port). cnat keeps one translation per key.
type key struct {
	Addr  netip.Addr
	Proto uint8
	Port  uint16
}

func (k key) String() string {
	p := strconv.Itoa(int(k.Proto))
	switch k.Proto {
	case protoTCP:
		p = "tcp"
	case protoUDP:
		p = "udp"
	}
	return p + "/" + netip.AddrPortFrom(k.Addr, k.Port).String()
}

func compareKeys(a, b key) int {
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Proto, b.Proto); c != 0 {
		return c
	}
	return cmp.Compare(a.Port, b.Port)
}

// kind is what a translation does.
type kind uint8

const (
	// kindBackends: the frontend's backends are the paths.
	kindBackends kind = iota + 1
	// kindReject: one path to vpp.RejectSinkIPv4 (same port): no endpoint
	// of the family anywhere, refused by the node's kernel. cnat has no
	// reject action, and a translation without paths kills VPP 25.10.
	kindReject
	// kindDrop: one path to vpp.DropSinkIPv4: endpoints exist, but none
	// for this traffic (a Local policy without local endpoints).
	kindDrop
	// kindMarker: the renderer's format marker (see markerKey).
	kindMarker
)

var kinds = []kind{kindBackends, kindReject, kindDrop}

func (k kind) String() string {
	switch k {
	case kindBackends:
		return "backends"
	case kindReject:
		return "reject"
	case kindDrop:
		return "drop"
	case kindMarker:
		return "marker"
	}
	return "unknown"
}

// path is one backend of a translation: the address and port traffic is
// sent to, and the source it is given (invalid: the client's own).
type path struct {
	Dst netip.AddrPort
	Src netip.Addr
}

func comparePaths(a, b path) int {
	if c := a.Dst.Compare(b.Dst); c != 0 {
		return c
	}
	return a.Src.Compare(b.Src)
}

// translation is one cnat translation as the renderer wants it or found it
// in VPP. Only Paths and Maglev are compared with what VPP holds: VPP's dump
// returns neither the flags, nor is_real_ip, nor the flow hash, and the
// renderer derives them from the key and the paths (sendFlags), so that
// what it wants is always what it sent.
type translation struct {
	Kind kind
	// Paths are sorted; never empty.
	Paths []path
	// Maglev: ClientIP affinity, by a Maglev table over a hash of the
	// client's address (VPP sets the LB type and the hash at creation
	// only: a change is a delete and an add).
	Maglev bool
	// RealIP: the VIP is one of the node's own addresses (a NodePort):
	// cnat interposes on the address's forwarding entry instead of owning
	// it, so that the node's other traffic to it is unchanged.
	RealIP bool
	// Service names the owner for errors and logs (empty when dumped).
	Service service.ID
	// ID is VPP's index of a translation it holds (held ones only).
	ID uint32
}

// same says whether VPP holding held serves want without a change.
func (t *translation) same(o *translation) bool {
	if t == nil || o == nil {
		return t == o
	}
	return t.Maglev == o.Maglev && slices.Equal(t.Paths, o.Paths)
}

// snat says whether the translation source-NATs (its paths carry a
// source): VPP then allocates the source port (ALLOC_PORT), so that two
// clients of one port do not collide on the NAT loopback.
func (t *translation) snat() bool {
	for _, p := range t.Paths {
		if p.Src.IsValid() {
			return true
		}
	}
	return false
}

// rendered is one service's translations.
type rendered struct {
	// entries are few per service: a slice is cheaper than a map.
	entries []entry
	// skippedSCTP counts SCTP ports left out.
	skippedSCTP int
	// noLoopback counts frontends that want source NAT on a node without a
	// NAT loopback of their family (served without it).
	noLoopback int
	// unsinkable counts IPv6 frontends without endpoints: the sinks are
	// IPv4 only, so they are not translated and follow VPP's routes.
	unsinkable int
	// nodePorts send the node's own clients of the service's node ports
	// to its cluster IP of each family (vpp.ServiceNetwork.NodePorts).
	nodePorts []vpp.NodePort
}

type entry struct {
	key key
	t   *translation
}

func (r *rendered) get(k key) *translation {
	for i := range r.entries {
		if r.entries[i].key == k {
			return r.entries[i].t
		}
	}
	return nil
}

// render turns one service into its translations: per TCP or UDP port,
// each cluster IP with the internal endpoints; each external IP and
// LoadBalancer IP, and the node port on each of this node's NodePort
// addresses, with the external endpoints; both families, each frontend
// with the endpoints of its own family (Contiv's ServiceToDNAT, with
// cnat's translations for NAT44's static mappings).
//
// The external frontends of an externalTrafficPolicy=Cluster service
// source-NAT every client to the node's NAT loopback of the family (the
// NAT44 renderer's twice-NAT), so that a remote backend's reply comes back
// through this node to be translated back. Cluster IPs and eTP=Local
// frontends keep the client's address. A translation matches protocol,
// VIP and port only: like NAT44, it cannot tell the node's pods from
// outside clients, so an eTP=Local external frontend sends every client to
// the local endpoints.
func render(node *service.Node, s *service.Service) *rendered {
	r := &rendered{}
	loopback := func(a netip.Addr) netip.Addr {
		for _, l := range node.NATLoopback {
			if l.Is4() == a.Is4() {
				return l
			}
		}
		return netip.Addr{}
	}
	isNode := func(a netip.Addr) bool {
		return slices.Contains(node.NodePortAddresses, a) || slices.Contains(node.NATLoopback, a)
	}
	// hostSource is the source of a path to a host endpoint of this node (a
	// host-network pod: the node's kernel serves it) for the clients VPP
	// translates at the FIB lookup, the node's own ones and outside ones:
	// the service's cluster IP of the family. Neither the client's address
	// nor the NAT loopback would do for the node's own connections, which
	// come from the NAT loopback: the kernel holds it, and would answer
	// itself instead of VPP. The kernel routes the cluster IP into VPP,
	// where the cluster IP's own cnat client translates the reply back.
	// Pods' connections keep their address: cnat translates them on the
	// pod's interface, where it never source-NATs. eTP=Local external
	// frontends keep every client's address (the kernel routes an outside
	// client into VPP).
	hostSource := func(a netip.Addr) netip.Addr {
		for _, c := range s.ClusterIPs {
			if c.Is4() == a.Is4() {
				return c
			}
		}
		return netip.Addr{}
	}
	maglev := s.AffinityTimeout > 0
	for i := range s.Ports {
		p := &s.Ports[i]
		proto, ok := protoOf(p.Protocol)
		if !ok {
			r.skippedSCTP++
			continue
		}
		internal, external := s.InternalEndpoints(p), s.ExternalEndpoints(p)
		// routed: a and port are a cluster IP or a node port, whose
		// traffic VPP hands to a stack that refuses it when no
		// translation takes it (the node's kernel for cluster IPs, VPP's
		// own for its addresses); external and LoadBalancer IPs have no
		// such route.
		put := func(a netip.Addr, port uint16, eps []service.Endpoint, snat, routed bool) {
			k := key{a, proto, port}
			if r.get(k) != nil {
				return
			}
			t := &translation{Kind: kindBackends, Maglev: maglev, RealIP: isNode(a), Service: s.ID}
			var src netip.Addr
			if snat {
				if src = loopback(a); !src.IsValid() {
					r.noLoopback++
				}
			}
			for _, e := range eps {
				if e.Addr.Is4() != a.Is4() {
					continue
				}
				pt := path{Dst: e.Key(), Src: src}
				if (snat || slices.Contains(s.ClusterIPs, a)) && node.HostEndpoint(e) {
					if h := hostSource(a); h.IsValid() {
						pt.Src = h
					}
				}
				t.Paths = append(t.Paths, pt)
			}
			if len(t.Paths) == 0 {
				// Never a translation without paths (VPP 25.10 dies of
				// it): the IPv4 sinks, or, for IPv6, no translation.
				if !a.Is4() {
					r.unsinkable++
					return
				}
				if routed && proto == protoUDP {
					// Not translated (refused, not dropped, when
					// endpoints are elsewhere only). A sink path would
					// give the client's 5-tuple a cnat session to the
					// sink, which its steady traffic keeps alive after
					// the Service gets endpoints (cnat cannot delete one
					// session).
					return
				}
				t.Kind, t.Maglev = kindReject, false
				sink := vpp.RejectSinkIPv4
				if p.HasEndpointsFor(a) {
					t.Kind, sink = kindDrop, vpp.DropSinkIPv4
				}
				t.Paths = []path{{Dst: netip.AddrPortFrom(sink, port)}}
			}
			slices.SortFunc(t.Paths, comparePaths)
			// An endpoint listed twice is one path.
			t.Paths = slices.Compact(t.Paths)
			r.entries = append(r.entries, entry{k, t})
		}
		for _, a := range s.ClusterIPs {
			put(a, p.Port, internal, false, true)
		}
		snat := !s.ExternalLocal
		for _, a := range s.ExternalIPs {
			put(a, p.Port, external, snat, false)
		}
		for _, a := range s.LoadBalancerIPs {
			put(a, p.Port, external, snat, false)
		}
		if p.NodePort != 0 {
			for _, a := range node.NodePortAddresses {
				put(a, p.NodePort, external, snat, true)
			}
			// The node's own clients of its node ports go to the cluster IP
			// of the family (the kernel's DNAT, vpp.ServiceNetwork).
			for _, is4 := range []bool{true, false} {
				if i := slices.IndexFunc(s.ClusterIPs, func(a netip.Addr) bool { return a.Is4() == is4 }); i >= 0 {
					r.nodePorts = append(r.nodePorts, vpp.NodePort{Protocol: proto, Port: p.NodePort, ClusterIP: s.ClusterIPs[i], ClusterPort: p.Port})
				}
			}
		}
	}
	return r
}
