package nat44

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/pkg/nodestate"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// TestRenderingListsTheFrontendsTheMappingsServe checks the node's state
// against the mappings themselves: for services that exercise every kind
// of mapping (load-balancing, plain, reject and drop sinks, affinity,
// eTP=Local, IPv6 and SCTP left out, more endpoints than VPP's 8-bit sum
// of probabilities holds), service.Frontends with the renderer's Rendering
// lists exactly the frontends render maps, each with the mapping's
// backends, sink and affinity.
func TestRenderingListsTheFrontendsTheMappingsServe(t *testing.T) {
	r := &Renderer{cfg: Config{LocalWeight: 3}}
	many := make([]service.Endpoint, 0, 300)
	for i := range 300 {
		many = append(many, ep(fmt.Sprintf("10.2.%d.%d", i/200, i%200+1), 8080, false))
	}
	withAffinity := svc(service.ID{Namespace: "default", Name: "sticky"}, ep("10.1.0.2", 8080, true), ep("10.2.0.3", 8080, false))
	withAffinity.ClusterIPs = []netip.Addr{addr("10.96.0.11")}
	withAffinity.AffinityTimeout = 90 * time.Minute
	local := svc(service.ID{Namespace: "default", Name: "local"}, ep("10.2.0.3", 8080, false))
	local.ClusterIPs = []netip.Addr{addr("10.96.0.12"), addr("fd00:96::12")}
	local.ExternalLocal = true
	local.Ports[0].NodePort = 30012
	local.Ports = append([]service.Port{{Protocol: service.SCTP, Port: 90, Endpoints: local.Ports[0].Endpoints, Cluster: local.Ports[0].Cluster, HasEndpoints: true}}, local.Ports...)
	empty := svc(service.ID{Namespace: "default", Name: "empty"})
	empty.ClusterIPs = []netip.Addr{addr("10.96.0.13")}
	big := svc(service.ID{Namespace: "default", Name: "big"}, many...)
	big.ClusterIPs = []netip.Addr{addr("10.96.0.14")}
	services := map[service.ID]*service.Service{}
	for _, s := range []*service.Service{withAffinity, local, empty, big} {
		services[s.ID] = s
	}

	want := map[mappingKey]*mapping{}
	for _, s := range services {
		for _, e := range render(&testNode, s, r.cfg.LocalWeight).mappings {
			want[e.key] = e.m
		}
	}
	got := service.Frontends(&testNode, services, r.Rendering())
	if len(got) != len(want) {
		t.Errorf("%d frontends, want the %d mappings", len(got), len(want))
	}
	for _, f := range got {
		proto, _ := protoOf(service.Protocol(f.Protocol))
		k := mappingKey{f.Address, proto, f.Port}
		m := want[k]
		if m == nil {
			t.Errorf("frontend %v (%s) has no mapping", k, f.Service)
			continue
		}
		if f.Service != m.Service.String() {
			t.Errorf("frontend %v: service %s, mapping's %s", k, f.Service, m.Service)
		}
		switch m.Kind {
		case kindReject, kindDrop:
			if f.NoBackends != m.Kind.String() || len(f.Backends) != 0 {
				t.Errorf("frontend %v: backends %v, no backends %q; the mapping is a %s sink", k, f.Backends, f.NoBackends, m.Kind)
			}
		default:
			var mine, theirs []netip.AddrPort
			for _, b := range f.Backends {
				mine = append(mine, netip.AddrPortFrom(b.Address, b.Port))
			}
			for _, l := range m.Locals {
				theirs = append(theirs, l.key())
			}
			if !slices.Equal(mine, theirs) {
				t.Errorf("frontend %v: %d backends %v, the %s mapping's %d locals %v", k, len(mine), mine, m.Kind, len(theirs), theirs)
			}
		}
		if nodestate.Seconds(m.Affinity) != f.Affinity {
			t.Errorf("frontend %v: affinity %v, the mapping's %d", k, f.Affinity, m.Affinity)
		}
		if f.FromNode != nil {
			t.Errorf("frontend %v: NAT44 serves the node's clients like any other, yet FromNode is %+v", k, f.FromNode)
		}
	}
	if n := len(want[mappingKey{addr("10.96.0.14"), protoTCP, 80}].Locals); n != 255 {
		t.Errorf("the big service's mapping has %d locals, want VPP's limit of 255 (the test must exceed it)", n)
	}
}
