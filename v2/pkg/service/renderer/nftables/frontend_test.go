package nftables

import (
	"net/netip"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/pkg/service"
)

func TestFrontendsOfAService(t *testing.T) {
	node := &service.Node{NodePortAddresses: []netip.Addr{netip.MustParseAddr(v4.node)}}
	states := func(s *service.Service) map[frontendKey]*frontendState {
		m := map[frontendKey]*frontendState{}
		frontendsOf(node, s, func(k frontendKey, f *frontendState) { m[k] = f })
		return m
	}
	key := func(addr string, p uint16) frontendKey {
		return frontendKey{netip.MustParseAddr(addr), protoTCP, p}
	}
	pick := func(n int) verdict { return verdict{Kind: verdictPick, N: n} }
	drop := verdict{Kind: verdictDrop}
	for _, tc := range []struct {
		name    string
		service *service.Service
		key     frontendKey
		check   func(f *frontendState) bool
	}{
		{"a cluster IP sends to every endpoint of its family", dual("a", 1, podA, remote), key(v4.cluster(1), 80),
			func(f *frontendState) bool {
				return f.Cluster == pick(2) && len(f.Backends) == 2 && f.Local.Kind == verdictNone
			}},
		{"a cluster IP of an internalTrafficPolicy=Local service without local endpoints drops",
			func() *service.Service { s := dual("a", 1, remote); s.InternalLocal = true; return s }(), key(v4.cluster(1), 80),
			func(f *frontendState) bool { return f.Cluster == drop && !f.Reject }},
		{"a port without endpoints rejects", dual("a", 1), key(v4.cluster(1), 80),
			func(f *frontendState) bool { return f.Reject && f.Cluster.Kind == verdictNone }},
		{"an IPv6 cluster IP whose endpoints are all IPv4 rejects",
			func() *service.Service {
				s := dual("a", 1, podA)
				for i := range s.Ports {
					s.Ports[i].Endpoints = service.FamilyEndpoints(s.Ports[i].Endpoints, netip.MustParseAddr(v4.podA))
					s.Ports[i].Cluster = s.Ports[i].Endpoints
				}
				return s
			}(), frontendKey{netip.MustParseAddr(v6.cluster(1)), protoTCP, 80},
			func(f *frontendState) bool { return f.Reject }},
		{"a node port of an externalTrafficPolicy=Local service has both lists",
			externalLocal(withNodePorts(dual("a", 1, podA, remote), 30080, 30053)), key(v4.node, 30080),
			func(f *frontendState) bool {
				return f.Cluster == pick(2) && f.Local == pick(1) && f.LocalBackends[0].Addr().String() == v4.podA
			}},
		{"an external IP of an externalTrafficPolicy=Local service without local endpoints drops outside traffic only",
			externalLocal(withExternalIPs(dual("a", 1, remote))), key(v4.extIP, 80),
			func(f *frontendState) bool { return f.Cluster == pick(1) && f.Local == drop }},
		{"a LoadBalancer IP keeps the source ranges of its family",
			withLoadBalancer(dual("a", 1, podA), v4.allowed, v6.allowed), key(v4.lbIP, 80),
			func(f *frontendState) bool {
				return f.Firewalled && len(f.Allowed) == 1 && f.Allowed[0].String() == v4.allowed
			}},
		{"IPv4 affinity records clients for its timeout", withAffinity(dual("a", 1, podA), 90*time.Second), key(v4.cluster(1), 80),
			func(f *frontendState) bool { return f.Affinity == 90 && !f.Cluster.Sticky }},
		{"IPv6 affinity hashes the client", withAffinity(dual("a", 1, podA), 90*time.Second),
			frontendKey{netip.MustParseAddr(v6.cluster(1)), protoTCP, 80},
			func(f *frontendState) bool { return f.Affinity == 0 && f.Cluster.Sticky }},
		{"local endpoints are hairpin candidates", dual("a", 1, podA, remote), key(v4.cluster(1), 80),
			func(f *frontendState) bool { return len(f.Hairpin) == 1 && f.Hairpin[0].String() == v4.podA }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := states(tc.service)[tc.key]
			if f == nil || !tc.check(f) {
				t.Fatalf("frontend %v: %+v", tc.key, f)
			}
		})
	}
}

func TestElementCountIsTheNumberOfElementsWritten(t *testing.T) {
	node := &service.Node{NodePortAddresses: []netip.Addr{netip.MustParseAddr(v4.node), netip.MustParseAddr(v6.node)}}
	services := []*service.Service{
		dual("a", 1, podA, remote),
		dual("a", 1),
		externalLocal(withNodePorts(dual("a", 1, podA, remote), 30080, 30053)),
		externalLocal(withExternalIPs(dual("a", 1, remote))),
		withLoadBalancer(dual("a", 1, podA), v4.allowed, v6.allowed),
		withAffinity(dual("a", 1, podA), 90*time.Second),
	}
	frontends := 0
	for _, s := range services {
		frontendsOf(node, s, func(k frontendKey, f *frontendState) {
			frontends++
			n := 0
			elementsOf(k, f, func(string, []string, []string) { n++ })
			if got := elementCount(f); got != n {
				t.Errorf("frontend %v of %s: elementCount %d, elementsOf wrote %d: %+v", k, s.ID, got, n, f)
			}
		})
	}
	foreign := &frontendState{Cluster: verdict{Kind: verdictOther}, Backends: []netip.AddrPort{{}, netip.MustParseAddrPort("10.0.0.1:80")}, Affinity: -1}
	n := 0
	elementsOf(frontendKey{netip.MustParseAddr(v4.cluster(1)), protoTCP, 80}, foreign, func(string, []string, []string) { n++ })
	if got := elementCount(foreign); got != n {
		t.Errorf("a frontend read from the kernel with foreign elements: elementCount %d, elementsOf wrote %d", got, n)
	}
	if frontends < 10 {
		t.Fatalf("only %d frontends checked", frontends)
	}
}
