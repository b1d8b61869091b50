package service_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/pkg/nodestate"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// ep is a ready endpoint on node n (local when n is "here").
func ep(addr string, port uint16, n string) service.Endpoint {
	return service.Endpoint{Addr: netip.MustParseAddr(addr), Port: port, NodeName: n, Local: n == "here", Ready: true, Serving: true}
}

// tcp is a TCP port with the endpoints eps, listed as the processor lists
// them with every policy in use: Cluster all, Local the node's own.
func tcp(port, nodePort uint16, eps ...service.Endpoint) service.Port {
	p := service.Port{Name: "http", Protocol: service.TCP, Port: port, NodePort: nodePort, Endpoints: eps, Cluster: eps, HasEndpoints: len(eps) > 0}
	for _, e := range eps {
		if e.Local {
			p.Local = append(p.Local, e)
		}
	}
	return p
}

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

// line describes a frontend in one line: where, what, and how it serves.
func line(f nodestate.Frontend) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s/%d %s %s", f.Address, f.Protocol, f.Port, f.Kind, f.Service)
	if f.Local {
		b.WriteString(" local")
	}
	if f.Affinity != 0 {
		fmt.Fprintf(&b, " affinity=%gs", float64(f.Affinity))
	}
	if f.AffinityByHash {
		b.WriteString(" by-hash")
	}
	if len(f.SourceRanges) > 0 {
		fmt.Fprintf(&b, " from=%v", f.SourceRanges)
	}
	b.WriteString(" " + backends(f.Backends, f.NoBackends))
	if f.FromNode != nil {
		b.WriteString(" fromNode:" + backends(f.FromNode.Backends, f.FromNode.NoBackends))
	}
	return b.String()
}

func backends(bs []nodestate.Backend, none string) string {
	if none != "" {
		return none
	}
	var s []string
	for _, b := range bs {
		x := netip.AddrPortFrom(b.Address, b.Port).String() + "@" + b.Node
		if b.Local {
			x += "*"
		}
		if b.Terminating {
			x += "(terminating)"
		}
		s = append(s, x)
	}
	return "->" + strings.Join(s, ",")
}

var (
	nftables = service.Rendering{Name: "nftables", AffinityByHashIPv6: true}
	nat44    = service.Rendering{Name: "nat44", IPv4Only: true, NoSCTP: true, LocalForAll: true, AffinityNeedsTwo: true}
)

func TestFrontends(t *testing.T) {
	node := &service.Node{Name: "here", NodePortAddresses: addrs("198.18.0.2", "fd00:18::2")}
	web := service.ID{Namespace: "default", Name: "web"}
	for _, tc := range []struct {
		name     string
		how      service.Rendering
		services []*service.Service
		want     []string
	}{{
		name: "a dual-stack cluster IP sends each family to the endpoints of its own family",
		how:  nftables,
		services: []*service.Service{{ID: web, ClusterIPs: addrs("10.96.0.10", "fd00:96::10"),
			Ports: []service.Port{tcp(80, 0, ep("10.64.0.5", 8080, "here"), ep("10.64.1.5", 8080, "there"), ep("fd00:64::5", 8080, "here"))}}},
		want: []string{
			"10.96.0.10 TCP/80 ClusterIP default/web ->10.64.0.5:8080@here*,10.64.1.5:8080@there",
			"fd00:96::10 TCP/80 ClusterIP default/web ->[fd00:64::5]:8080@here*",
		},
	}, {
		name: "a port without endpoints rejects on every frontend, node ports included",
		how:  nftables,
		services: []*service.Service{{ID: web, ClusterIPs: addrs("10.96.0.10"), ExternalIPs: addrs("203.0.113.7"),
			Ports: []service.Port{tcp(80, 30080)}}},
		want: []string{
			"10.96.0.10 TCP/80 ClusterIP default/web reject",
			"198.18.0.2 TCP/30080 NodePort default/web reject",
			"203.0.113.7 TCP/80 ExternalIP default/web reject",
			"fd00:18::2 TCP/30080 NodePort default/web reject",
		},
	}, {
		name: "an IPv6 frontend of a port whose endpoints are all IPv4 rejects",
		how:  nftables,
		services: []*service.Service{{ID: web, ClusterIPs: addrs("10.96.0.10", "fd00:96::10"),
			Ports: []service.Port{tcp(80, 0, ep("10.64.1.5", 8080, "there"))}}},
		want: []string{
			"10.96.0.10 TCP/80 ClusterIP default/web ->10.64.1.5:8080@there",
			"fd00:96::10 TCP/80 ClusterIP default/web reject",
		},
	}, {
		name: "internalTrafficPolicy=Local without a local endpoint drops on the cluster IP",
		how:  nftables,
		services: []*service.Service{{ID: web, ClusterIPs: addrs("10.96.0.10"), InternalLocal: true,
			Ports: []service.Port{tcp(80, 0, ep("10.64.1.5", 8080, "there"))}}},
		want: []string{"10.96.0.10 TCP/80 ClusterIP default/web local drop"},
	}, {
		name: "on nftables an externalTrafficPolicy=Local node port serves outside clients locally and the node's own over the cluster",
		how:  nftables,
		services: []*service.Service{{ID: web, ClusterIPs: addrs("10.96.0.10"), ExternalLocal: true,
			Ports: []service.Port{tcp(80, 30080, ep("10.64.0.5", 8080, "here"), ep("10.64.1.5", 8080, "there"))}}},
		want: []string{
			"10.96.0.10 TCP/80 ClusterIP default/web ->10.64.0.5:8080@here*,10.64.1.5:8080@there",
			"198.18.0.2 TCP/30080 NodePort default/web local ->10.64.0.5:8080@here* fromNode:->10.64.0.5:8080@here*,10.64.1.5:8080@there",
			"fd00:18::2 TCP/30080 NodePort default/web local reject fromNode:reject",
		},
	}, {
		name: "on nftables an externalTrafficPolicy=Local node port without a local endpoint drops outside clients only",
		how:  nftables,
		services: []*service.Service{{ID: web, ExternalLocal: true,
			Ports: []service.Port{tcp(80, 30080, ep("10.64.1.5", 8080, "there"))}}},
		want: []string{
			"198.18.0.2 TCP/30080 NodePort default/web local drop fromNode:->10.64.1.5:8080@there",
			"fd00:18::2 TCP/30080 NodePort default/web local reject fromNode:reject",
		},
	}, {
		name: "on nat44 an externalTrafficPolicy=Local node port drops every client without a local endpoint, and IPv6 is not served",
		how:  nat44,
		services: []*service.Service{{ID: web, ExternalLocal: true,
			Ports: []service.Port{tcp(80, 30080, ep("10.64.1.5", 8080, "there"))}}},
		want: []string{"198.18.0.2 TCP/30080 NodePort default/web local drop"},
	}, {
		name: "on nat44 SCTP ports and IPv6 frontends are left out",
		how:  nat44,
		services: []*service.Service{{ID: web, ClusterIPs: addrs("10.96.0.10", "fd00:96::10"),
			Ports: []service.Port{
				{Protocol: service.SCTP, Port: 9, HasEndpoints: true, Endpoints: []service.Endpoint{ep("10.64.1.5", 9, "there")}, Cluster: []service.Endpoint{ep("10.64.1.5", 9, "there")}},
				tcp(80, 0, ep("10.64.1.5", 8080, "there")),
			}}},
		want: []string{"10.96.0.10 TCP/80 ClusterIP default/web ->10.64.1.5:8080@there"},
	}, {
		name: "on nftables ClientIP affinity is rounded up to seconds, and IPv6 keeps clients by hash",
		how:  nftables,
		services: []*service.Service{{ID: web, ClusterIPs: addrs("10.96.0.10", "fd00:96::10"), AffinityTimeout: 1500 * time.Millisecond,
			Ports: []service.Port{tcp(80, 0, ep("10.64.1.5", 8080, "there"), ep("fd00:64:1::5", 8080, "there"))}}},
		want: []string{
			"10.96.0.10 TCP/80 ClusterIP default/web affinity=2s ->10.64.1.5:8080@there",
			"fd00:96::10 TCP/80 ClusterIP default/web affinity=2s by-hash ->[fd00:64:1::5]:8080@there",
		},
	}, {
		name: "on nat44 affinity needs two backends",
		how:  nat44,
		services: []*service.Service{
			{ID: web, ClusterIPs: addrs("10.96.0.10"), AffinityTimeout: 3 * time.Hour,
				Ports: []service.Port{tcp(80, 0, ep("10.64.1.5", 8080, "there"))}},
			{ID: service.ID{Namespace: "default", Name: "two"}, ClusterIPs: addrs("10.96.0.11"), AffinityTimeout: 3 * time.Hour,
				Ports: []service.Port{tcp(80, 0, ep("10.64.1.5", 8080, "there"), ep("10.64.1.6", 8080, "there"))}},
		},
		want: []string{
			"10.96.0.10 TCP/80 ClusterIP default/web ->10.64.1.5:8080@there",
			"10.96.0.11 TCP/80 ClusterIP default/two affinity=10800s ->10.64.1.5:8080@there,10.64.1.6:8080@there",
		},
	}, {
		name: "a frontend two services claim is served by the smaller ID",
		how:  nftables,
		services: []*service.Service{
			{ID: service.ID{Namespace: "default", Name: "b"}, ExternalIPs: addrs("203.0.113.7"), Ports: []service.Port{tcp(80, 0, ep("10.64.1.6", 8080, "there"))}},
			{ID: service.ID{Namespace: "default", Name: "a"}, ExternalIPs: addrs("203.0.113.7"), Ports: []service.Port{tcp(80, 0, ep("10.64.1.5", 8080, "there"))}},
		},
		want: []string{"203.0.113.7 TCP/80 ExternalIP default/a ->10.64.1.5:8080@there"},
	}, {
		name: "a LoadBalancer IP lists its source ranges masked and sorted, and other frontends none",
		how:  nftables,
		services: []*service.Service{{ID: web, ClusterIPs: addrs("10.96.0.10"), LoadBalancerIPs: addrs("203.0.113.10"),
			LoadBalancerSourceRanges: []netip.Prefix{netip.MustParsePrefix("198.51.100.7/24"), netip.MustParsePrefix("198.18.0.0/15")},
			Ports:                    []service.Port{tcp(80, 0, ep("10.64.1.5", 8080, "there"))}}},
		want: []string{
			"10.96.0.10 TCP/80 ClusterIP default/web ->10.64.1.5:8080@there",
			"203.0.113.10 TCP/80 LoadBalancer default/web from=[198.18.0.0/15 198.51.100.0/24] ->10.64.1.5:8080@there",
		},
	}, {
		name: "terminating endpoints are marked, and a renderer's own choice of backends is applied",
		how: service.Rendering{Name: "first-only", Backends: func(eps []service.Endpoint) []service.Endpoint {
			return eps[:1]
		}},
		services: []*service.Service{{ID: web, ClusterIPs: addrs("10.96.0.10"),
			Ports: []service.Port{tcp(80, 0,
				service.Endpoint{Addr: netip.MustParseAddr("10.64.1.5"), Port: 8080, NodeName: "there", Serving: true, Terminating: true},
				ep("10.64.1.6", 8080, "there"))}}},
		want: []string{"10.96.0.10 TCP/80 ClusterIP default/web ->10.64.1.5:8080@there(terminating)"},
	}, {
		name: "an invalid service is left out",
		how:  nftables,
		services: []*service.Service{{ID: web, ClusterIPs: addrs("10.96.0.10"),
			Ports: []service.Port{tcp(80, 0), tcp(80, 0)}}},
		want: nil,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			m := map[service.ID]*service.Service{}
			for _, s := range tc.services {
				m[s.ID] = s
			}
			var got []string
			for _, f := range service.Frontends(node, m, tc.how) {
				got = append(got, line(f))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("frontends:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

// TestFrontendsNamesThePortAndSortsByAddressProtocolPort: the port's name is
// kept, and frontends come sorted whatever the services' order.
func TestFrontendsNamesThePortAndSortsByAddressProtocolPort(t *testing.T) {
	udp := tcp(53, 0, ep("10.64.1.5", 53, "there"))
	udp.Protocol, udp.Name = service.UDP, "dns"
	s := &service.Service{ID: service.ID{Namespace: "kube-system", Name: "dns"}, ClusterIPs: addrs("10.96.0.10"),
		Ports: []service.Port{tcp(53, 0, ep("10.64.1.5", 53, "there")), udp}}
	got := service.Frontends(&service.Node{}, map[service.ID]*service.Service{s.ID: s}, nftables)
	var keys []string
	for _, f := range got {
		keys = append(keys, fmt.Sprintf("%s %s/%d %s", f.Address, f.Protocol, f.Port, f.PortName))
	}
	if want := []string{"10.96.0.10 TCP/53 http", "10.96.0.10 UDP/53 dns"}; !slices.Equal(keys, want) {
		t.Errorf("frontends %q, want %q", keys, want)
	}
}
