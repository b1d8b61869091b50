package nftables

import (
	"net/netip"
	"slices"
	"time"

	"github.com/vcoil/vcoil/v2/pkg/service"
)

// backend is a server of the lab in both families.
type backend struct {
	name   string
	v4, v6 string
	local  bool
}

var (
	podA   = backend{"pod-a", v4.podA, v6.podA, true}
	podB   = backend{"pod-b", v4.podB, v6.podB, true}
	remote = backend{"remote", v4.remote, v6.remote, false}
)

const (
	svcTCP uint16 = 80
	svcUDP uint16 = 53
)

// port is a service port whose endpoints are bs in both families, listed
// the way the processor lists them for a node with every policy in use:
// Cluster holds them all, Local the node's own.
func port(proto service.Protocol, p, nodePort uint16, bs ...backend) service.Port {
	target := tcpPort
	if proto == service.UDP {
		target = udpPort
	}
	sp := service.Port{Protocol: proto, Port: p, NodePort: nodePort}
	for _, b := range bs {
		for _, a := range []string{b.v4, b.v6} {
			sp.Endpoints = append(sp.Endpoints, service.Endpoint{
				Addr: netip.MustParseAddr(a), Port: target, NodeName: b.name, Local: b.local,
				Ready: true, Serving: true,
			})
		}
	}
	slices.SortFunc(sp.Endpoints, func(a, b service.Endpoint) int { return a.Addr.Compare(b.Addr) })
	sp.Cluster = sp.Endpoints
	for _, e := range sp.Endpoints {
		if e.Local {
			sp.Local = append(sp.Local, e)
		}
	}
	sp.HasEndpoints = len(sp.Endpoints) > 0
	return sp
}

// dual is a dual-stack service with cluster IPs number n of each family,
// TCP 80 and UDP 53 to bs (ports 8080 and 8053), without node ports.
func dual(name string, n int, bs ...backend) *service.Service {
	return &service.Service{
		ID:         service.ID{Namespace: "default", Name: name},
		ClusterIPs: []netip.Addr{netip.MustParseAddr(v4.cluster(n)), netip.MustParseAddr(v6.cluster(n))},
		Ports:      []service.Port{port(service.TCP, svcTCP, 0, bs...), port(service.UDP, svcUDP, 0, bs...)},
	}
}

func withNodePorts(s *service.Service, tcp, udp uint16) *service.Service {
	s.Ports[0].NodePort, s.Ports[1].NodePort = tcp, udp
	return s
}

func withExternalIPs(s *service.Service) *service.Service {
	s.ExternalIPs = []netip.Addr{netip.MustParseAddr(v4.extIP), netip.MustParseAddr(v6.extIP)}
	return s
}

func withLoadBalancer(s *service.Service, ranges ...string) *service.Service {
	s.LoadBalancerIPs = []netip.Addr{netip.MustParseAddr(v4.lbIP), netip.MustParseAddr(v6.lbIP)}
	for _, r := range ranges {
		s.LoadBalancerSourceRanges = append(s.LoadBalancerSourceRanges, netip.MustParsePrefix(r))
	}
	return s
}

func withAffinity(s *service.Service, d time.Duration) *service.Service {
	s.AffinityTimeout = d
	return s
}

func externalLocal(s *service.Service) *service.Service {
	s.ExternalLocal = true
	return s
}
