package service

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// ID names a Service.
type ID struct {
	Namespace, Name string
}

func (id ID) String() string { return id.Namespace + "/" + id.Name }

// Compare orders IDs by namespace, then name.
func (id ID) Compare(o ID) int {
	if c := cmp.Compare(id.Namespace, o.Namespace); c != 0 {
		return c
	}
	return cmp.Compare(id.Name, o.Name)
}

// Protocol is a transport protocol of a service port.
type Protocol string

const (
	TCP  Protocol = "TCP"
	UDP  Protocol = "UDP"
	SCTP Protocol = "SCTP"
)

// TrafficDistribution values of Kubernetes v1.37 (spec.trafficDistribution).
// The processor has already applied them (through the EndpointSlice hints,
// as kube-proxy does); renderers need not look at them.
const (
	PreferClose    = "PreferClose" // deprecated name of PreferSameZone
	PreferSameZone = "PreferSameZone"
	PreferSameNode = "PreferSameNode"
)

// Node is what the renderers need to know about the node they run on.
type Node struct {
	Name string
	// Zone is the node's topology.kubernetes.io/zone label, if any.
	Zone string
	// NodePortAddresses are the addresses NodePorts (and health check node
	// ports) are served on: by default the node's primary address of each
	// family, as kube-proxy's nftables mode; with --nodeport-addresses, the
	// node's addresses inside those CIDRs. Sorted.
	NodePortAddresses []netip.Addr
	// NATLoopback holds the node's NAT loopback addresses (at most one per
	// family): the source address of hairpin traffic (a pod reaching itself
	// through a service) in every dataplane.
	NATLoopback []netip.Addr
	// HostAddresses are the node's InternalIP and ExternalIP addresses
	// (sorted): what a host-network pod of this node has as its address,
	// so that an endpoint on this node with one of them is served by the
	// node's own network stack, not by a pod.
	HostAddresses []netip.Addr
}

// HostEndpoint says whether e is served by this node's own network stack (a
// host-network pod of this node).
func (n *Node) HostEndpoint(e Endpoint) bool {
	return e.Local && slices.Contains(n.HostAddresses, e.Addr)
}

// Service is one Service as this node serves it. Both IP families live in
// one Service: every frontend address is paired with the endpoints of its
// own family.
type Service struct {
	ID ID
	// ClusterIPs are the service's cluster IPs (one per family).
	ClusterIPs []netip.Addr
	// ExternalIPs are spec.externalIPs that parse as addresses.
	ExternalIPs []netip.Addr
	// LoadBalancerIPs are the status.loadBalancer.ingress IPs (ipMode VIP or
	// unset; ipMode Proxy addresses are the load balancer's business, as
	// for kube-proxy).
	LoadBalancerIPs []netip.Addr
	// LoadBalancerSourceRanges, when not empty, are the only sources
	// allowed to reach the LoadBalancer IPs; others are dropped.
	LoadBalancerSourceRanges []netip.Prefix
	// ExternalLocal is externalTrafficPolicy=Local: external frontends
	// (NodePort, externalIPs, LoadBalancer IPs) send traffic from outside
	// the node only to endpoints on this node, without SNAT. It never
	// applies to cluster IPs.
	ExternalLocal bool
	// InternalLocal is internalTrafficPolicy=Local: cluster IPs send traffic
	// only to endpoints on this node. It never applies to external frontends.
	InternalLocal bool
	// TrafficDistribution is spec.trafficDistribution, for information.
	TrafficDistribution string
	// AffinityTimeout is the ClientIP session affinity timeout; zero means
	// no affinity.
	AffinityTimeout time.Duration
	// HealthCheckNodePort is set for LoadBalancer services with
	// externalTrafficPolicy=Local: the node port where this node answers
	// whether it has local endpoints.
	HealthCheckNodePort uint16
	// Ports are sorted by protocol, then port.
	Ports []Port
}

// Port is one port of a service with its endpoints.
type Port struct {
	// Name is the port's name (may be empty for a single-port service).
	Name     string
	Protocol Protocol
	// Port is served on the cluster IPs, external IPs and LoadBalancer IPs.
	Port uint16
	// NodePort, when not zero, is served on the node's NodePortAddresses.
	NodePort uint16
	// Endpoints are all endpoints of the port that are ready, or serving
	// and terminating, with their port resolved; sorted by address. Others
	// (not ready and not terminating) are left out.
	Endpoints []Endpoint
	// Cluster are the endpoints traffic is spread over when the traffic
	// policy is Cluster: the ready endpoints available for this node's
	// topology (zone or node hints), or, when there are none, the serving
	// terminating ones. Empty when no frontend uses it: when
	// internalTrafficPolicy is Local and the service is not reachable from
	// outside (traffic from the node and its pods to an external frontend
	// uses Cluster whatever the external policy says). Computed per family,
	// as kube-proxy does: hints and fallbacks of one family never narrow the
	// other.
	Cluster []Endpoint
	// Local are the endpoints on this node used when a traffic policy is
	// Local: the ready local endpoints, or, when there are none, the serving
	// terminating local ones. Empty when no policy is Local.
	Local []Endpoint
	// HasEndpoints says whether the port has any usable endpoint anywhere in
	// the cluster, in either family; a renderer decides reject or drop per
	// family with FamilyEndpoints(Endpoints, frontend). A frontend with no endpoints at all rejects (ICMP port
	// unreachable, TCP reset); a frontend whose policy is Local and that
	// has no local endpoints but HasEndpoints drops, as kube-proxy does.
	HasEndpoints bool
}

// Endpoint is one backend of a service port.
type Endpoint struct {
	Addr netip.Addr
	Port uint16
	// NodeName is the node the endpoint runs on, if known.
	NodeName string
	// Local is set for endpoints on this node.
	Local bool
	// Ready, Serving and Terminating are the EndpointSlice conditions, with
	// Kubernetes' defaults applied (Ready and Serving when unset, not
	// Terminating).
	Ready, Serving, Terminating bool
	// Zone is the endpoint's zone; ZoneHints and NodeHints the
	// EndpointSlice controller's hints.
	Zone      string
	ZoneHints []string
	NodeHints []string
}

// Key identifies an endpoint within a port.
func (e Endpoint) Key() netip.AddrPort { return netip.AddrPortFrom(e.Addr, e.Port) }

// InternalEndpoints are the endpoints of traffic to the cluster IPs.
func (s *Service) InternalEndpoints(p *Port) []Endpoint {
	if s.InternalLocal {
		return p.Local
	}
	return p.Cluster
}

// ExternalEndpoints are the endpoints of traffic from outside the node to
// the external frontends (NodePort, external IPs, LoadBalancer IPs). Traffic
// to those frontends from this node or its pods uses Cluster, as in
// kube-proxy, so that a pod can reach an eTP=Local service through its
// NodePort even without a local endpoint.
func (s *Service) ExternalEndpoints(p *Port) []Endpoint {
	if s.ExternalLocal {
		return p.Local
	}
	return p.Cluster
}

// HasEndpointsFor is HasEndpoints for the family of frontend: a port of a
// dual-stack service whose endpoints are all of the other family has none
// for it, as kube-proxy's per-family proxiers see it (they reject).
func (p *Port) HasEndpointsFor(frontend netip.Addr) bool {
	if !p.HasEndpoints {
		return false
	}
	for _, e := range p.Endpoints {
		if e.Addr.Is4() == frontend.Is4() {
			return true
		}
	}
	return false
}

// FamilyEndpoints returns the endpoints of eps in the family of frontend.
func FamilyEndpoints(eps []Endpoint, frontend netip.Addr) []Endpoint {
	var out []Endpoint
	for _, e := range eps {
		if e.Addr.Is4() == frontend.Is4() {
			out = append(out, e)
		}
	}
	return out
}

// Validate checks the invariants renderers rely on.
func (s *Service) Validate() error {
	if s.ID.Name == "" || s.ID.Namespace == "" {
		return fmt.Errorf("service %q: namespace and name are required", s.ID)
	}
	for _, addrs := range [][]netip.Addr{s.ClusterIPs, s.ExternalIPs, s.LoadBalancerIPs} {
		for _, a := range addrs {
			if !a.IsValid() || a.Zone() != "" || a.Is4In6() {
				return fmt.Errorf("service %s: frontend address %v is not a plain IPv4 or IPv6 address", s.ID, a)
			}
		}
	}
	if s.AffinityTimeout < 0 {
		return fmt.Errorf("service %s: negative session affinity timeout %v", s.ID, s.AffinityTimeout)
	}
	if !slices.IsSortedFunc(s.Ports, comparePorts) {
		return fmt.Errorf("service %s: ports are not sorted", s.ID)
	}
	for i := range s.Ports {
		p := &s.Ports[i]
		switch p.Protocol {
		case TCP, UDP, SCTP:
		default:
			return fmt.Errorf("service %s port %q: protocol %q", s.ID, p.Name, p.Protocol)
		}
		if p.Port == 0 {
			return fmt.Errorf("service %s port %q: port 0", s.ID, p.Name)
		}
		if i > 0 && comparePorts(s.Ports[i-1], *p) == 0 {
			return fmt.Errorf("service %s: port %s/%d twice", s.ID, p.Protocol, p.Port)
		}
		for _, set := range [][]Endpoint{p.Endpoints, p.Cluster, p.Local} {
			for _, e := range set {
				if !e.Addr.IsValid() || e.Port == 0 {
					return fmt.Errorf("service %s port %q: endpoint %v:%d", s.ID, p.Name, e.Addr, e.Port)
				}
			}
		}
	}
	return nil
}

func comparePorts(a, b Port) int {
	if c := cmp.Compare(a.Protocol, b.Protocol); c != 0 {
		return c
	}
	return cmp.Compare(a.Port, b.Port)
}

// ComparePorts orders ports by protocol, then port number.
func ComparePorts(a, b Port) int { return comparePorts(a, b) }
