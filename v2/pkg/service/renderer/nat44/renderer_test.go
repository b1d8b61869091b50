package nat44

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/acl"
	"go.fd.io/govpp/binapi/acl_types"
	"go.fd.io/govpp/binapi/ip_types"
	"go.fd.io/govpp/binapi/nat44_ed"
	"go.fd.io/govpp/binapi/nat_types"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

const (
	tcp = 6
	udp = 17
	// The flags as numbers, as VPP's dump shows them: OUT2IN_ONLY 4,
	// SELF_TWICE_NAT 2, TWICE_NAT 1.
	self  = nat_types.NatConfigFlags(4 | 2)
	twice = nat_types.NatConfigFlags(4 | 1)
	sink  = nat_types.NatConfigFlags(4)
)

type harness struct {
	vpp *fakeVPP
	dp  *fakeDataplane
	r   *Renderer
}

func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	f := newFakeVPP(t)
	dp := &fakeDataplane{vpp: f, ifs: vpp.NodeInterfaces{Incarnation: 1, Uplink: 1, HostInterconnect: 2, Loopback: 3}}
	if cfg.ServiceCIDRs == nil {
		cfg.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("fd00:96::/108")}
	}
	r, err := New(dp, cfg, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return &harness{vpp: f, dp: dp, r: r}
}

func ctx() context.Context { return context.Background() }

func state(services ...*service.Service) *service.State {
	st := &service.State{Node: testNode, Services: map[service.ID]*service.Service{}}
	for _, s := range services {
		st.Services[s.ID] = s
	}
	return st
}

// Expected messages, every field written out.

func ip(s string) ip_types.IP4Address { return ip4(addr(s)) }

func lbLocal(a string, port uint16, prob uint8) nat44_ed.Nat44LbAddrPort {
	return nat44_ed.Nat44LbAddrPort{Addr: ip(a), Port: port, Probability: prob}
}

func lbAdd(ext string, proto uint8, port uint16, flags nat_types.NatConfigFlags, affinity uint32, tag string, locals ...nat44_ed.Nat44LbAddrPort) api.Message {
	return &nat44_ed.Nat44AddDelLbStaticMapping{IsAdd: true, Flags: flags, ExternalAddr: ip(ext), ExternalPort: port,
		Protocol: proto, Affinity: affinity, Tag: tag, LocalNum: uint32(len(locals)), Locals: locals}
}

func lbDel(ext string, proto uint8, port uint16, flags nat_types.NatConfigFlags) api.Message {
	return &nat44_ed.Nat44AddDelLbStaticMapping{Flags: flags, ExternalAddr: ip(ext), ExternalPort: port, Protocol: proto}
}

func smAdd(ext string, proto uint8, port uint16, loc string, lport uint16, flags nat_types.NatConfigFlags, tag string) api.Message {
	return &nat44_ed.Nat44AddDelStaticMappingV2{IsAdd: true, Flags: flags, LocalIPAddress: ip(loc), LocalPort: lport,
		ExternalIPAddress: ip(ext), ExternalPort: port, Protocol: proto, ExternalSwIfIndex: 0xffffffff, VrfID: 0, Tag: tag}
}

func smDel(ext string, proto uint8, port uint16, loc string, lport uint16, flags nat_types.NatConfigFlags) api.Message {
	return &nat44_ed.Nat44AddDelStaticMappingV2{Flags: flags, LocalIPAddress: ip(loc), LocalPort: lport,
		ExternalIPAddress: ip(ext), ExternalPort: port, Protocol: proto, ExternalSwIfIndex: 0xffffffff}
}

func localAddDel(isAdd bool, ext string, proto uint8, port uint16, l nat44_ed.Nat44LbAddrPort) api.Message {
	return &nat44_ed.Nat44LbStaticMappingAddDelLocal{IsAdd: isAdd, ExternalAddr: ip(ext), ExternalPort: port, Protocol: proto, Local: l}
}

// The requests of a full sync before the mappings (with a fresh VPP: the
// NAT loopback is added to the twice-NAT pool) and after them.
func fullSyncStart(fresh bool) []api.Message {
	m := []api.Message{&nat44_ed.Nat44ForwardingEnableDisable{Enable: true}, &nat44_ed.Nat44AddressDump{}}
	if fresh {
		m = append(m, &nat44_ed.Nat44AddDelAddressRange{FirstIPAddress: ip("10.1.0.255"), LastIPAddress: ip("10.1.0.255"),
			VrfID: 0xffffffff, IsAdd: true, Flags: nat_types.NAT_IS_TWICE_NAT})
	}
	return append(m, &nat44_ed.Nat44LbStaticMappingDump{}, &nat44_ed.Nat44StaticMappingDump{})
}

func fullSyncEnd() []api.Message { return []api.Message{&acl.ACLDump{ACLIndex: 0xffffffff}} }

func fullSyncCalls(inc int, backends string) []string {
	return []string{
		"SetNodeNATRole uplink frontend(out)+backend(in)",
		"SetNodeNATRole host frontend(out)+backend(in)",
		"SetServiceNetwork [10.96.0.0/12] 10.1.0.255 sinks=true",
		"SetPodNATRoles " + backends,
		"SetInterfaceACLs " + itoa(inc) + " uplink 2 []",
		"SetInterfaceACLs " + itoa(inc) + " host 2 []",
	}
}

func join(parts ...[]api.Message) []api.Message {
	var out []api.Message
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func (h *harness) resync(t *testing.T, st *service.State) {
	t.Helper()
	if err := h.r.Resync(ctx(), st); err != nil {
		t.Fatalf("Resync: %v", err)
	}
}

func (h *harness) update(t *testing.T, ch *service.Changes) {
	t.Helper()
	if err := h.r.Update(ctx(), ch); err != nil {
		t.Fatalf("Update: %v", err)
	}
}

func TestClusterIPWithTwoBackendsIsOneLBMapping(t *testing.T) {
	h := newHarness(t, Config{LocalWeight: 2})
	s := svc(webID, ep("10.1.0.2", 8080, true), ep("10.2.0.3", 8080, false))
	s.Ports = append(s.Ports, service.Port{Name: "dns", Protocol: service.UDP, Port: 53,
		Endpoints: []service.Endpoint{ep("10.1.0.2", 5353, true), ep("10.2.0.3", 5353, false)},
		Cluster:   []service.Endpoint{ep("10.1.0.2", 5353, true), ep("10.2.0.3", 5353, false)}, HasEndpoints: true})
	h.resync(t, state(s))
	expectRequests(t, h.vpp.take(), []api.Message{
		&nat44_ed.Nat44ForwardingEnableDisable{Enable: true},
		&nat44_ed.Nat44AddressDump{},
		&nat44_ed.Nat44AddDelAddressRange{FirstIPAddress: ip("10.1.0.255"), LastIPAddress: ip("10.1.0.255"),
			VrfID: 0xffffffff, IsAdd: true, Flags: nat_types.NAT_IS_TWICE_NAT},
		&nat44_ed.Nat44LbStaticMappingDump{},
		&nat44_ed.Nat44StaticMappingDump{},
		&nat44_ed.Nat44AddDelLbStaticMapping{IsAdd: true, Flags: nat_types.NAT_IS_OUT2IN_ONLY | nat_types.NAT_IS_SELF_TWICE_NAT,
			ExternalAddr: ip("10.96.0.10"), ExternalPort: 80, Protocol: 6, Affinity: 0, Tag: "vcoil-svc@2 default/web", LocalNum: 2,
			Locals: []nat44_ed.Nat44LbAddrPort{{Addr: ip("10.1.0.2"), Port: 8080, Probability: 4}, {Addr: ip("10.2.0.3"), Port: 8080, Probability: 2}}},
		&nat44_ed.Nat44AddDelLbStaticMapping{IsAdd: true, Flags: nat_types.NAT_IS_OUT2IN_ONLY | nat_types.NAT_IS_SELF_TWICE_NAT,
			ExternalAddr: ip("10.96.0.10"), ExternalPort: 53, Protocol: 17, Affinity: 0, Tag: "vcoil-svc@2 default/web", LocalNum: 2,
			Locals: []nat44_ed.Nat44LbAddrPort{{Addr: ip("10.1.0.2"), Port: 5353, Probability: 4}, {Addr: ip("10.2.0.3"), Port: 5353, Probability: 2}}},
		&acl.ACLDump{ACLIndex: 0xffffffff},
	})
	checkCalls(t, h.dp.take(), fullSyncCalls(1, "[10.1.0.2]"))

	// A second Resync with the same state dumps and changes nothing.
	h.resync(t, state(s))
	expectRequests(t, h.vpp.take(), join(fullSyncStart(false), fullSyncEnd()))
	checkCalls(t, h.dp.take(), fullSyncCalls(1, "[10.1.0.2]"))
	if !h.vpp.forwarding || len(h.vpp.lb) != 2 {
		t.Errorf("VPP holds forwarding=%v and %d LB mappings, want true and 2", h.vpp.forwarding, len(h.vpp.lb))
	}
}

func TestNodePortOnThisNodesIPv4Addresses(t *testing.T) {
	h := newHarness(t, Config{})
	s := svc(webID, ep("10.1.0.2", 8080, true), ep("10.2.0.3", 8080, false))
	s.Ports[0].NodePort = 30080
	h.resync(t, state(s))
	locals := []nat44_ed.Nat44LbAddrPort{lbLocal("10.1.0.2", 8080, 2), lbLocal("10.2.0.3", 8080, 2)}
	expectRequests(t, h.vpp.take(), join(fullSyncStart(true), []api.Message{
		lbAdd("10.96.0.10", tcp, 80, self, 0, "vcoil-svc@2 default/web", locals...),
		lbAdd("198.18.0.11", tcp, 30080, twice, 0, "vcoil-svc@2 default/web", locals...),
		lbAdd("198.18.1.11", tcp, 30080, twice, 0, "vcoil-svc@2 default/web", locals...),
	}, fullSyncEnd()))
	// The node's own clients of the node port are sent to the cluster IP.
	calls := fullSyncCalls(1, "[10.1.0.2]")
	calls[2] += " nodeport=6/30080->10.96.0.10:80"
	checkCalls(t, h.dp.take(), calls)

	// The node's addresses change: the node port follows.
	node := testNode
	node.NodePortAddresses = []netip.Addr{addr("198.18.0.11"), addr("198.18.2.11")}
	h.update(t, &service.Changes{Node: &node})
	expectRequests(t, h.vpp.take(), []api.Message{
		&nat44_ed.Nat44ForwardingEnableDisable{Enable: true}, &nat44_ed.Nat44AddressDump{},
		lbDel("198.18.1.11", tcp, 30080, twice),
		lbAdd("198.18.2.11", tcp, 30080, twice, 0, "vcoil-svc@2 default/web", locals...),
	})
	checkCalls(t, h.dp.take(), []string{
		"SetNodeNATRole uplink frontend(out)+backend(in)",
		"SetNodeNATRole host frontend(out)+backend(in)",
		"SetServiceNetwork [10.96.0.0/12] 10.1.0.255 sinks=true nodeport=6/30080->10.96.0.10:80",
		"SetPodNATRoles [10.1.0.2]",
	})

	// The node port changes: the kernel is told at once.
	s2 := svc(webID, ep("10.1.0.2", 8080, true), ep("10.2.0.3", 8080, false))
	s2.Ports[0].NodePort = 30090
	h.update(t, &service.Changes{Upsert: []*service.Service{s2}})
	_ = h.vpp.take()
	checkCalls(t, h.dp.take(), []string{"SetPodNATRoles [10.1.0.2]", "SetServiceNetwork [10.96.0.0/12] 10.1.0.255 sinks=true nodeport=6/30090->10.96.0.10:80"})
}

func TestExternalFrontendsFollowTheExternalTrafficPolicy(t *testing.T) {
	h := newHarness(t, Config{LocalWeight: 5})
	cluster := svc(webID, ep("10.1.0.2", 8080, true), ep("10.2.0.3", 8080, false))
	cluster.ExternalIPs = []netip.Addr{addr("203.0.113.50")}
	cluster.LoadBalancerIPs = []netip.Addr{addr("198.51.100.7")}
	localID := service.ID{Namespace: "default", Name: "local"}
	local := svc(localID, ep("10.1.0.4", 9090, true), ep("10.1.0.5", 9090, true), ep("10.2.0.6", 9090, false))
	local.ClusterIPs = []netip.Addr{addr("10.96.0.20")}
	local.ExternalLocal = true
	local.LoadBalancerIPs = []netip.Addr{addr("198.51.100.8")}
	noneID := service.ID{Namespace: "default", Name: "elsewhere"}
	none := svc(noneID, ep("10.2.0.7", 7070, false))
	none.ClusterIPs = []netip.Addr{addr("10.96.0.30")}
	none.ExternalLocal = true
	none.LoadBalancerIPs = []netip.Addr{addr("198.51.100.9")}
	h.resync(t, state(cluster, local, none))
	web := []nat44_ed.Nat44LbAddrPort{lbLocal("10.1.0.2", 8080, 10), lbLocal("10.2.0.3", 8080, 2)}
	expectRequests(t, h.vpp.take(), join(fullSyncStart(true), []api.Message{
		lbAdd("10.96.0.10", tcp, 80, self, 0, "vcoil-svc@2 default/web", web...),
		lbAdd("10.96.0.20", tcp, 80, self, 0, "vcoil-svc@2 default/local",
			lbLocal("10.1.0.4", 9090, 10), lbLocal("10.1.0.5", 9090, 10), lbLocal("10.2.0.6", 9090, 2)),
		smAdd("10.96.0.30", tcp, 80, "10.2.0.7", 7070, self, "vcoil-svc@2 default/elsewhere"),
		lbAdd("198.51.100.7", tcp, 80, twice, 0, "vcoil-svc@2 default/web", web...),
		// eTP=Local: the local endpoints only, the client's address kept.
		lbAdd("198.51.100.8", tcp, 80, self, 0, "vcoil-svc@2 default/local", lbLocal("10.1.0.4", 9090, 10), lbLocal("10.1.0.5", 9090, 10)),
		// eTP=Local without a local endpoint: dropped.
		smAdd("198.51.100.9", tcp, 80, "169.254.101.2", 80, sink, "vcoil-svc@2 default/elsewhere"),
		lbAdd("203.0.113.50", tcp, 80, twice, 0, "vcoil-svc@2 default/web", web...),
	}, fullSyncEnd()))
	checkCalls(t, h.dp.take(), fullSyncCalls(1, "[10.1.0.2 10.1.0.4 10.1.0.5]"))
}

func TestServiceWithoutEndpointsIsRefused(t *testing.T) {
	h := newHarness(t, Config{})
	s := svc(webID)
	s.Ports[0].NodePort = 30080
	h.resync(t, state(s))
	expectRequests(t, h.vpp.take(), join(fullSyncStart(true), []api.Message{
		smAdd("10.96.0.10", tcp, 80, "169.254.101.1", 80, sink, "vcoil-svc@2 default/web"),
		smAdd("198.18.0.11", tcp, 30080, "169.254.101.1", 30080, sink, "vcoil-svc@2 default/web"),
		smAdd("198.18.1.11", tcp, 30080, "169.254.101.1", 30080, sink, "vcoil-svc@2 default/web"),
	}, fullSyncEnd()))
	// The node's kernel refuses the node's own clients of the refused
	// frontends (they are sorted by address, protocol, port).
	calls := fullSyncCalls(1, "[]")
	calls[2] += " refused=10.96.0.10/6/80 refused=198.18.0.11/6/30080 refused=198.18.1.11/6/30080 nodeport=6/30080->10.96.0.10:80"
	checkCalls(t, h.dp.take(), calls)

	// The first endpoint: the sink mapping makes way for the backend.
	s2 := svc(webID, ep("10.1.0.2", 8080, true))
	h.update(t, &service.Changes{Upsert: []*service.Service{s2}})
	expectRequests(t, h.vpp.take(), []api.Message{
		smDel("10.96.0.10", tcp, 80, "169.254.101.1", 80, sink),
		smAdd("10.96.0.10", tcp, 80, "10.1.0.2", 8080, self, "vcoil-svc@2 default/web"),
		smDel("198.18.0.11", tcp, 30080, "169.254.101.1", 30080, sink),
		smDel("198.18.1.11", tcp, 30080, "169.254.101.1", 30080, sink),
	})
	// (s2 has no node port any more.)
	checkCalls(t, h.dp.take(), []string{"SetPodNATRoles [10.1.0.2]", "SetServiceNetwork [10.96.0.0/12] 10.1.0.255 sinks=true"})

	// Another change that refuses nothing new tells the dataplane nothing.
	s3 := svc(webID, ep("10.1.0.2", 8080, true), ep("10.1.0.3", 8080, true))
	h.update(t, &service.Changes{Upsert: []*service.Service{s3}})
	h.vpp.take()
	checkCalls(t, h.dp.take(), []string{"SetPodNATRoles [10.1.0.2 10.1.0.3]"})
}

func TestBackendChangesOfAnLBMappingKeepTheMapping(t *testing.T) {
	h := newHarness(t, Config{})
	h.resync(t, state(svc(webID, ep("10.1.0.2", 8080, false), ep("10.1.0.3", 8080, false))))
	h.vpp.take()
	h.dp.take()

	// A third backend: added.
	h.update(t, &service.Changes{Upsert: []*service.Service{svc(webID, ep("10.1.0.2", 8080, false), ep("10.1.0.3", 8080, false), ep("10.1.0.4", 8080, false))}})
	expectRequests(t, h.vpp.take(), []api.Message{localAddDel(true, "10.96.0.10", tcp, 80, lbLocal("10.1.0.4", 8080, 2))})
	// One replaced by another (two before and after): the new one first,
	// so that VPP never sees fewer than two... then the old ones.
	h.update(t, &service.Changes{Upsert: []*service.Service{svc(webID, ep("10.1.0.3", 8080, false), ep("10.1.0.5", 8080, false))}})
	expectRequests(t, h.vpp.take(), []api.Message{
		localAddDel(true, "10.96.0.10", tcp, 80, lbLocal("10.1.0.5", 8080, 2)),
		localAddDel(false, "10.96.0.10", tcp, 80, lbLocal("10.1.0.2", 8080, 2)),
		localAddDel(false, "10.96.0.10", tcp, 80, lbLocal("10.1.0.4", 8080, 2)),
	})
	checkCalls(t, h.dp.take(), nil)
	got := h.vpp.lb[mappingKey{addr("10.96.0.10"), tcp, 80}].Locals
	if len(got) != 2 || got[0] != lbLocal("10.1.0.3", 8080, 2) || got[1] != lbLocal("10.1.0.5", 8080, 2) {
		t.Errorf("VPP's locals: %+v", got)
	}

	// A backend becomes local (another weight): with three locals,
	// removed and added with its new probability.
	h2 := newHarness(t, Config{LocalWeight: 4})
	h2.resync(t, state(svc(webID, ep("10.1.0.2", 8080, false), ep("10.1.0.3", 8080, false), ep("10.1.0.4", 8080, false))))
	h2.vpp.take()
	h2.update(t, &service.Changes{Upsert: []*service.Service{svc(webID, ep("10.1.0.2", 8080, false), ep("10.1.0.3", 8080, true), ep("10.1.0.4", 8080, false))}})
	expectRequests(t, h2.vpp.take(), []api.Message{
		localAddDel(false, "10.96.0.10", tcp, 80, lbLocal("10.1.0.3", 8080, 2)),
		localAddDel(true, "10.96.0.10", tcp, 80, lbLocal("10.1.0.3", 8080, 8)),
	})
	// With two locals VPP cannot remove one: the mapping is recreated.
	h2.update(t, &service.Changes{Upsert: []*service.Service{svc(webID, ep("10.1.0.2", 8080, true), ep("10.1.0.3", 8080, true))}})
	h2.take(t)
	h2.update(t, &service.Changes{Upsert: []*service.Service{svc(webID, ep("10.1.0.2", 8080, false), ep("10.1.0.3", 8080, true))}})
	expectRequests(t, h2.vpp.take(), []api.Message{
		lbDel("10.96.0.10", tcp, 80, self),
		lbAdd("10.96.0.10", tcp, 80, self, 0, "vcoil-svc@2 default/web", lbLocal("10.1.0.2", 8080, 2), lbLocal("10.1.0.3", 8080, 8)),
	})
}

func (h *harness) take(t *testing.T) {
	h.vpp.take()
	h.dp.take()
}

func TestCrossingBetweenOneAndTwoBackends(t *testing.T) {
	h := newHarness(t, Config{})
	two := svc(webID, ep("10.1.0.2", 8080, false), ep("10.1.0.3", 8080, false))
	h.resync(t, state(two))
	h.take(t)

	// 2 -> 1: the LB mapping goes first (the key is one), then the plain
	// mapping comes.
	h.update(t, &service.Changes{Upsert: []*service.Service{svc(webID, ep("10.1.0.3", 8080, false))}})
	expectRequests(t, h.vpp.take(), []api.Message{
		lbDel("10.96.0.10", tcp, 80, self),
		smAdd("10.96.0.10", tcp, 80, "10.1.0.3", 8080, self, "vcoil-svc@2 default/web"),
	})
	// 1 -> 2: the other way round.
	h.update(t, &service.Changes{Upsert: []*service.Service{two}})
	expectRequests(t, h.vpp.take(), []api.Message{
		smDel("10.96.0.10", tcp, 80, "10.1.0.3", 8080, self),
		lbAdd("10.96.0.10", tcp, 80, self, 0, "vcoil-svc@2 default/web", lbLocal("10.1.0.2", 8080, 2), lbLocal("10.1.0.3", 8080, 2)),
	})
	// 1 -> another 1: deleted and added.
	h.update(t, &service.Changes{Upsert: []*service.Service{svc(webID, ep("10.1.0.3", 8080, false))}})
	h.vpp.take()
	h.update(t, &service.Changes{Upsert: []*service.Service{svc(webID, ep("10.1.0.4", 8080, false))}})
	expectRequests(t, h.vpp.take(), []api.Message{
		smDel("10.96.0.10", tcp, 80, "10.1.0.3", 8080, self),
		smAdd("10.96.0.10", tcp, 80, "10.1.0.4", 8080, self, "vcoil-svc@2 default/web"),
	})
	// Deleted.
	h.update(t, &service.Changes{Delete: []service.ID{webID}})
	expectRequests(t, h.vpp.take(), []api.Message{smDel("10.96.0.10", tcp, 80, "10.1.0.4", 8080, self)})
	if len(h.vpp.lb)+len(h.vpp.static) != 0 {
		t.Errorf("VPP still holds %d LB and %d plain mappings", len(h.vpp.lb), len(h.vpp.static))
	}
}

func TestAffinityMappingLosingABackendIsRecreated(t *testing.T) {
	h := newHarness(t, Config{})
	sticky := func(eps ...service.Endpoint) *service.Service {
		s := svc(webID, eps...)
		s.AffinityTimeout = 3 * time.Hour
		return s
	}
	h.resync(t, state(sticky(ep("10.1.0.2", 8080, false), ep("10.1.0.3", 8080, false))))
	expectRequests(t, h.vpp.take(), join(fullSyncStart(true), []api.Message{
		lbAdd("10.96.0.10", tcp, 80, self, 10800, "vcoil-svc@2 default/web affinity=10800", lbLocal("10.1.0.2", 8080, 2), lbLocal("10.1.0.3", 8080, 2)),
	}, fullSyncEnd()))
	h.dp.take()

	// An added backend keeps the mapping and its affinity records.
	h.update(t, &service.Changes{Upsert: []*service.Service{sticky(ep("10.1.0.2", 8080, false), ep("10.1.0.3", 8080, false), ep("10.1.0.4", 8080, false))}})
	expectRequests(t, h.vpp.take(), []api.Message{localAddDel(true, "10.96.0.10", tcp, 80, lbLocal("10.1.0.4", 8080, 2))})
	// A removed one recreates the mapping: VPP would keep sending its
	// clients to it.
	h.update(t, &service.Changes{Upsert: []*service.Service{sticky(ep("10.1.0.3", 8080, false), ep("10.1.0.4", 8080, false))}})
	expectRequests(t, h.vpp.take(), []api.Message{
		lbDel("10.96.0.10", tcp, 80, self),
		lbAdd("10.96.0.10", tcp, 80, self, 10800, "vcoil-svc@2 default/web affinity=10800", lbLocal("10.1.0.3", 8080, 2), lbLocal("10.1.0.4", 8080, 2)),
	})
	// After a restart of vcoild, the dump (without affinity) and the tag
	// say the same: nothing changes.
	r2, err := New(h.dp, h.r.cfg, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if err := r2.Resync(ctx(), state(sticky(ep("10.1.0.3", 8080, false), ep("10.1.0.4", 8080, false)))); err != nil {
		t.Fatal(err)
	}
	expectRequests(t, h.vpp.take(), join(fullSyncStart(false), fullSyncEnd()))
	// Affinity switched off: recreated without it.
	if err := r2.Update(ctx(), &service.Changes{Upsert: []*service.Service{svc(webID, ep("10.1.0.3", 8080, false), ep("10.1.0.4", 8080, false))}}); err != nil {
		t.Fatal(err)
	}
	expectRequests(t, h.vpp.take(), []api.Message{
		lbDel("10.96.0.10", tcp, 80, self),
		lbAdd("10.96.0.10", tcp, 80, self, 0, "vcoil-svc@2 default/web", lbLocal("10.1.0.3", 8080, 2), lbLocal("10.1.0.4", 8080, 2)),
	})
}

func prefix(s string) ip_types.Prefix {
	p := netip.MustParsePrefix(s)
	return ip_types.Prefix{Address: ip_types.NewAddress(p.Addr().AsSlice()), Len: uint8(p.Bits())}
}

func rule(action acl_types.ACLAction, src, dst string, proto ip_types.IPProto, port uint16) acl_types.ACLRule {
	r := acl_types.ACLRule{IsPermit: action, SrcPrefix: prefix(src), DstPrefix: prefix(dst), Proto: proto,
		SrcportOrIcmptypeFirst: 0, SrcportOrIcmptypeLast: 65535, DstportOrIcmpcodeFirst: port, DstportOrIcmpcodeLast: port}
	if proto == 0 {
		r.DstportOrIcmpcodeFirst, r.DstportOrIcmpcodeLast = 0, 65535
	}
	return r
}

const (
	permit     = acl_types.ACL_ACTION_API_PERMIT
	reflective = acl_types.ACL_ACTION_API_PERMIT_REFLECT
	deny       = acl_types.ACL_ACTION_API_DENY
)

// reflectiveTail are the last rules of the source-ranges ACL, the policy
// renderer's reflective ACL, for each family: permit and reflect TCP with
// SYN set and ACK clear, permit other TCP, permit and reflect the rest.
func reflectiveTail() []acl_types.ACLRule {
	var out []acl_types.ACLRule
	for _, all := range []string{"0.0.0.0/0", "::/0"} {
		syn := rule(reflective, all, all, tcp, 0)
		syn.DstportOrIcmpcodeFirst, syn.DstportOrIcmpcodeLast = 0, 65535
		syn.TCPFlagsMask, syn.TCPFlagsValue = 0x12, 0x02
		other := syn
		other.TCPFlagsMask, other.TCPFlagsValue = 0, 0
		other.IsPermit = permit
		out = append(out, syn, other, rule(reflective, all, all, 0, 0))
	}
	return out
}

func TestLoadBalancerSourceRangesBecomeOneInputACL(t *testing.T) {
	h := newHarness(t, Config{})
	ranged := func(ranges ...string) *service.Service {
		s := svc(webID, ep("10.1.0.2", 8080, false), ep("10.1.0.3", 8080, false))
		s.LoadBalancerIPs = []netip.Addr{addr("198.51.100.7"), addr("2001:db8::7")}
		s.Ports = append(s.Ports, service.Port{Protocol: service.UDP, Port: 53, Endpoints: s.Ports[0].Endpoints, Cluster: s.Ports[0].Cluster, HasEndpoints: true})
		for _, r := range ranges {
			s.LoadBalancerSourceRanges = append(s.LoadBalancerSourceRanges, netip.MustParsePrefix(r))
		}
		return s
	}
	other := svc(service.ID{Namespace: "a", Name: "open"}, ep("10.1.0.9", 80, false), ep("10.1.0.8", 80, false))
	other.ClusterIPs = []netip.Addr{addr("10.96.0.99")}
	other.LoadBalancerIPs = []netip.Addr{addr("198.51.100.99")}
	h.resync(t, state(ranged("203.0.113.0/24", "198.51.100.128/25", "2001:db8:1::/48"), other))
	rules := append([]acl_types.ACLRule{
		rule(reflective, "198.51.100.128/25", "198.51.100.7/32", tcp, 80),
		rule(reflective, "203.0.113.0/24", "198.51.100.7/32", tcp, 80),
		rule(deny, "0.0.0.0/0", "198.51.100.7/32", tcp, 80),
		rule(reflective, "198.51.100.128/25", "198.51.100.7/32", udp, 53),
		rule(reflective, "203.0.113.0/24", "198.51.100.7/32", udp, 53),
		rule(deny, "0.0.0.0/0", "198.51.100.7/32", udp, 53),
	}, reflectiveTail()...)
	got := h.vpp.take()
	expectRequests(t, got[len(got)-2:], []api.Message{
		&acl.ACLDump{ACLIndex: 0xffffffff},
		&acl.ACLAddReplace{ACLIndex: 0xffffffff, Tag: "vcoil-svc-source-ranges@2", Count: 12, R: rules},
	})
	checkCalls(t, h.dp.take()[4:], []string{"SetInterfaceACLs 1 uplink 2 [3]", "SetInterfaceACLs 1 host 2 [3]"})

	// Other ranges: replaced in place; the interfaces' lists stay.
	h.update(t, &service.Changes{Upsert: []*service.Service{ranged("203.0.113.0/25")}})
	expectRequests(t, h.vpp.take(), []api.Message{
		&acl.ACLAddReplace{ACLIndex: 3, Tag: "vcoil-svc-source-ranges@2", Count: 10, R: append([]acl_types.ACLRule{
			rule(reflective, "203.0.113.0/25", "198.51.100.7/32", tcp, 80),
			rule(deny, "0.0.0.0/0", "198.51.100.7/32", tcp, 80),
			rule(reflective, "203.0.113.0/25", "198.51.100.7/32", udp, 53),
			rule(deny, "0.0.0.0/0", "198.51.100.7/32", udp, 53),
		}, reflectiveTail()...)},
	})
	checkCalls(t, h.dp.take(), nil)
	// A change of a service without ranges leaves the ACL alone.
	h.update(t, &service.Changes{Delete: []service.ID{other.ID}})
	for _, m := range h.vpp.take() {
		if strings.HasPrefix(m.GetMessageName(), "acl") {
			t.Errorf("ACL request for a service without ranges: %+v", m)
		}
	}
	// A resync after a restart of vcoild adopts the ACL by its tag.
	r2, err := New(h.dp, h.r.cfg, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if err := r2.Resync(ctx(), state(ranged("203.0.113.0/25"))); err != nil {
		t.Fatal(err)
	}
	got = h.vpp.take()
	expectRequests(t, got[len(got)-1:], []api.Message{&acl.ACLDump{ACLIndex: 0xffffffff}})
	checkCalls(t, h.dp.take()[4:], []string{"SetInterfaceACLs 1 uplink 2 [3]", "SetInterfaceACLs 1 host 2 [3]"})
	// No ranges left: off the interfaces first (VPP refuses to delete an
	// ACL in use), then deleted.
	if err := r2.Update(ctx(), &service.Changes{Upsert: []*service.Service{ranged()}}); err != nil {
		t.Fatal(err)
	}
	expectRequests(t, h.vpp.take(), []api.Message{&acl.ACLDel{ACLIndex: 3}})
	checkCalls(t, h.dp.take(), []string{"SetInterfaceACLs 1 uplink 2 []", "SetInterfaceACLs 1 host 2 []"})
	if len(h.vpp.acls) != 0 {
		t.Errorf("VPP still holds ACLs %v", h.vpp.acls)
	}
}

func TestLongNamesAreHashedInTags(t *testing.T) {
	h := newHarness(t, Config{})
	id := service.ID{Namespace: strings.Repeat("n", 30), Name: strings.Repeat("x", 30)}
	h.resync(t, state(svc(id, ep("10.1.0.2", 8080, false))))
	expectRequests(t, h.vpp.take(), join(fullSyncStart(true), []api.Message{
		smAdd("10.96.0.10", tcp, 80, "10.1.0.2", 8080, self, "vcoil-svc#@2 88d6c27f4726e58e29be1c798f5b6dd5"),
	}, fullSyncEnd()))
}

func TestNewIncarnationResyncsEverything(t *testing.T) {
	h := newHarness(t, Config{})
	s := svc(webID, ep("10.1.0.2", 8080, true), ep("10.1.0.3", 8080, false))
	s.LoadBalancerIPs = []netip.Addr{addr("198.51.100.7")}
	s.LoadBalancerSourceRanges = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}
	h.resync(t, state(s))
	h.take(t)

	// VPP restarts: empty, another incarnation. The next Update syncs
	// everything from the renderer's desired state, this change included.
	h.vpp.mu.Lock()
	h.vpp.lb, h.vpp.twiceNAT, h.vpp.acls, h.vpp.forwarding = map[mappingKey]*nat44_ed.Nat44AddDelLbStaticMapping{}, nil, map[uint32]*acl.ACLAddReplace{}, false
	h.vpp.mu.Unlock()
	h.dp.ifs = vpp.NodeInterfaces{Incarnation: 2, Uplink: 5, HostInterconnect: 6, Loopback: 7}
	s2 := svc(webID, ep("10.1.0.2", 8080, true), ep("10.1.0.4", 8080, false))
	s2.LoadBalancerIPs, s2.LoadBalancerSourceRanges = s.LoadBalancerIPs, s.LoadBalancerSourceRanges
	h.update(t, &service.Changes{Upsert: []*service.Service{s2}})
	locals := []nat44_ed.Nat44LbAddrPort{lbLocal("10.1.0.2", 8080, 2), lbLocal("10.1.0.4", 8080, 2)}
	expectRequests(t, h.vpp.take(), join(fullSyncStart(true), []api.Message{
		lbAdd("10.96.0.10", tcp, 80, self, 0, "vcoil-svc@2 default/web", locals...),
		lbAdd("198.51.100.7", tcp, 80, twice, 0, "vcoil-svc@2 default/web", locals...),
		&acl.ACLDump{ACLIndex: 0xffffffff},
		&acl.ACLAddReplace{ACLIndex: 0xffffffff, Tag: "vcoil-svc-source-ranges@2", Count: 8, R: append([]acl_types.ACLRule{
			rule(reflective, "203.0.113.0/24", "198.51.100.7/32", tcp, 80),
			rule(deny, "0.0.0.0/0", "198.51.100.7/32", tcp, 80),
		}, reflectiveTail()...)},
	}))
	checkCalls(t, h.dp.take(), []string{
		"SetNodeNATRole uplink frontend(out)+backend(in)",
		"SetNodeNATRole host frontend(out)+backend(in)",
		"SetServiceNetwork [10.96.0.0/12] 10.1.0.255 sinks=true",
		"SetPodNATRoles [10.1.0.2]",
		"SetInterfaceACLs 2 uplink 2 [4]", "SetInterfaceACLs 2 host 2 [4]",
	})
}

func TestResyncAdoptsWhatVPPHoldsAndLeavesForeignMappings(t *testing.T) {
	h := newHarness(t, Config{})
	put := func(k mappingKey, m *mapping) {
		for _, o := range change(nil, k, nil, m) {
			if rv := h.vpp.apply(o.req, o.reply); rv != 0 {
				t.Fatalf("prepare %s: %v", o.what(), rv)
			}
		}
	}
	l := func(a string, prob uint8) local { return local{Addr: addr(a), Port: 8080, Probability: prob} }
	key := func(a string, port uint16) mappingKey { return mappingKey{addr(a), tcp, port} }
	// Up to date.
	put(key("10.96.0.10", 80), &mapping{Kind: kindLB, Flags: self, Tag: "vcoil-svc@2 default/web", Locals: []local{l("10.1.0.2", 2), l("10.1.0.3", 2)}})
	// Stale: its service is gone.
	put(key("10.96.0.11", 80), &mapping{Kind: kindStatic, Flags: self, Tag: "vcoil-svc@2 default/gone", Locals: []local{l("10.1.0.9", 0)}})
	// Another backend set.
	put(key("10.96.0.12", 80), &mapping{Kind: kindLB, Flags: self, Tag: "vcoil-svc@2 default/db", Locals: []local{l("10.1.0.4", 2), l("10.1.0.5", 2)}})
	// Not vcoil's: one on a frontend vcoil does not want, one on a
	// frontend it wants.
	put(key("10.96.0.50", 80), &mapping{Kind: kindStatic, Flags: self, Tag: "operator", Locals: []local{l("10.1.0.7", 0)}})
	put(key("10.96.0.13", 80), &mapping{Kind: kindLB, Flags: self, Tag: "", Locals: []local{l("10.1.0.7", 2), l("10.1.0.8", 2)}})
	h.vpp.twiceNAT = []netip.Addr{addr("10.1.0.254"), addr("10.1.0.255")}
	h.vpp.take()

	db := svc(service.ID{Namespace: "default", Name: "db"}, ep("10.1.0.4", 8080, false), ep("10.1.0.6", 8080, false))
	db.ClusterIPs = []netip.Addr{addr("10.96.0.12")}
	taken := svc(service.ID{Namespace: "default", Name: "taken"}, ep("10.1.0.2", 8080, false))
	taken.ClusterIPs = []netip.Addr{addr("10.96.0.13")}
	h.resync(t, state(svc(webID, ep("10.1.0.2", 8080, false), ep("10.1.0.3", 8080, false)), db, taken))
	expectRequests(t, h.vpp.take(), []api.Message{
		&nat44_ed.Nat44ForwardingEnableDisable{Enable: true},
		&nat44_ed.Nat44AddressDump{},
		// A stale address of the twice-NAT pool goes: VPP would use it.
		&nat44_ed.Nat44AddDelAddressRange{FirstIPAddress: ip("10.1.0.254"), LastIPAddress: ip("10.1.0.254"),
			VrfID: 0xffffffff, IsAdd: false, Flags: nat_types.NAT_IS_TWICE_NAT},
		&nat44_ed.Nat44LbStaticMappingDump{},
		&nat44_ed.Nat44StaticMappingDump{},
		smDel("10.96.0.11", tcp, 80, "10.1.0.9", 8080, self),
		localAddDel(true, "10.96.0.12", tcp, 80, lbLocal("10.1.0.6", 8080, 2)),
		localAddDel(false, "10.96.0.12", tcp, 80, lbLocal("10.1.0.5", 8080, 2)),
		&acl.ACLDump{ACLIndex: 0xffffffff},
	})
	if m := h.vpp.lb[key("10.96.0.13", 80)]; m == nil || m.Tag != "" {
		t.Errorf("the foreign LB mapping was changed: %+v", m)
	}
	if m := h.vpp.static[key("10.96.0.50", 80)]; m == nil || m.Tag != "operator" {
		t.Errorf("the foreign plain mapping was changed: %+v", m)
	}
}

func TestFailedRequestNamesTheServiceAndResyncRepairs(t *testing.T) {
	h := newHarness(t, Config{})
	s := svc(webID, ep("10.1.0.2", 8080, false), ep("10.1.0.3", 8080, false))
	h.resync(t, state(s))
	h.take(t)

	h.vpp.setFail(func(m api.Message) api.VPPApiError {
		if l, ok := m.(*nat44_ed.Nat44LbStaticMappingAddDelLocal); ok && l.IsAdd {
			return api.NO_SUCH_ENTRY
		}
		return 0
	})
	s3 := svc(webID, ep("10.1.0.2", 8080, false), ep("10.1.0.3", 8080, false), ep("10.1.0.4", 8080, false))
	err := h.r.Update(ctx(), &service.Changes{Upsert: []*service.Service{s3}})
	var vppErr api.VPPApiError
	if err == nil || !errors.As(err, &vppErr) || vppErr != api.NO_SUCH_ENTRY ||
		!strings.Contains(err.Error(), "add backend 10.1.0.4:8080 of LB mapping tcp/10.96.0.10:80 of default/web") {
		t.Fatalf("Update: %v, want the failure of the backend's addition, naming the service", err)
	}
	h.take(t)
	h.vpp.setFail(nil)

	// The processor's Resync finds out what VPP holds and repairs.
	h.resync(t, state(s3))
	expectRequests(t, h.vpp.take(), join(fullSyncStart(false), []api.Message{
		localAddDel(true, "10.96.0.10", tcp, 80, lbLocal("10.1.0.4", 8080, 2)),
	}, fullSyncEnd()))

	// An Update after a failure syncs everything as well.
	h.vpp.setFail(func(m api.Message) api.VPPApiError {
		if _, ok := m.(*nat44_ed.Nat44AddDelStaticMappingV2); ok {
			return api.VALUE_EXIST
		}
		return 0
	})
	other := svc(service.ID{Namespace: "b", Name: "one"}, ep("10.1.0.5", 8080, false))
	other.ClusterIPs = []netip.Addr{addr("10.96.0.77")}
	if err := h.r.Update(ctx(), &service.Changes{Upsert: []*service.Service{other}}); err == nil ||
		!strings.Contains(err.Error(), "add static mapping tcp/10.96.0.77:80 of b/one") {
		t.Fatalf("Update: %v, want the failure naming b/one", err)
	}
	h.take(t)
	h.vpp.setFail(nil)
	h.update(t, &service.Changes{Delete: []service.ID{webID}})
	expectRequests(t, h.vpp.take(), join(fullSyncStart(false), []api.Message{
		lbDel("10.96.0.10", tcp, 80, self),
		smAdd("10.96.0.77", tcp, 80, "10.1.0.5", 8080, self, "vcoil-svc@2 b/one"),
	}, fullSyncEnd()))
}

// countingChannel counts the requests sent and not yet answered.
type countingChannel struct {
	api.Channel
	outstanding, max *int
	compat           error
}

type countingRequest struct {
	api.RequestCtx
	outstanding *int
}

func (c countingChannel) SendRequest(m api.Message) api.RequestCtx {
	*c.outstanding++
	*c.max = max(*c.max, *c.outstanding)
	return countingRequest{c.Channel.SendRequest(m), c.outstanding}
}

func (r countingRequest) ReceiveReply(m api.Message) error {
	*r.outstanding--
	return r.RequestCtx.ReceiveReply(m)
}

func (c countingChannel) CheckCompatiblity(msgs ...api.Message) error {
	if c.compat != nil {
		return c.compat
	}
	return c.Channel.CheckCompatiblity(msgs...)
}

func TestRequestsArePipelined(t *testing.T) {
	h := newHarness(t, Config{MaxInFlight: 4})
	var outstanding, most int
	h.dp.wrap = func(ch api.Channel) api.Channel {
		return countingChannel{Channel: ch, outstanding: &outstanding, max: &most}
	}
	st := state()
	var want []api.Message
	for i := range 10 {
		s := svc(service.ID{Namespace: "p", Name: string(rune('a' + i))}, ep("10.1.0.2", 8080, false), ep("10.1.0.3", uint16(8080+i), false))
		s.ClusterIPs = []netip.Addr{netip.AddrFrom4([4]byte{10, 96, 1, byte(i)})}
		st.Services[s.ID] = s
		want = append(want, lbAdd(s.ClusterIPs[0].String(), tcp, 80, self, 0, "vcoil-svc@2 p/"+s.ID.Name,
			lbLocal("10.1.0.2", 8080, 2), lbLocal("10.1.0.3", uint16(8080+i), 2)))
	}
	h.resync(t, st)
	expectRequests(t, h.vpp.take(), join(fullSyncStart(true), want, fullSyncEnd()))
	if most != 4 || outstanding != 0 {
		t.Errorf("at most %d requests in flight (%d left), want 4 (0)", most, outstanding)
	}
	if len(h.vpp.lb) != 10 {
		t.Errorf("VPP holds %d LB mappings, want 10", len(h.vpp.lb))
	}
}

func TestIPv6FrontendsAreLeftOut(t *testing.T) {
	h := newHarness(t, Config{})
	s := svc(webID, ep("fd00:1::2", 8080, true), ep("fd00:1::3", 8080, false), ep("10.1.0.2", 8080, true))
	s.ClusterIPs = []netip.Addr{addr("fd00:96::10"), addr("10.96.0.10")}
	s.LoadBalancerIPs = []netip.Addr{addr("2001:db8::7")}
	s.LoadBalancerSourceRanges = []netip.Prefix{netip.MustParsePrefix("2001:db8:1::/48")}
	h.resync(t, state(s))
	expectRequests(t, h.vpp.take(), join(fullSyncStart(true), []api.Message{
		smAdd("10.96.0.10", tcp, 80, "10.1.0.2", 8080, self, "vcoil-svc@2 default/web"),
		&acl.ACLDump{ACLIndex: 0xffffffff},
		// The ACL exists (the service has ranges) but holds no IPv6 rule.
		&acl.ACLAddReplace{ACLIndex: 0xffffffff, Tag: "vcoil-svc-source-ranges@2", Count: 6, R: reflectiveTail()},
	}))
	checkCalls(t, h.dp.take()[:4], fullSyncCalls(1, "[10.1.0.2]")[:4])
}

func TestMissingMessagesAreNamed(t *testing.T) {
	h := newHarness(t, Config{})
	h.dp.wrap = func(ch api.Channel) api.Channel {
		var n int
		return countingChannel{Channel: ch, outstanding: &n, max: &n,
			compat: &api.CompatibilityError{IncompatibleMessages: []string{"acl_add_replace_ee5c2f18"}}}
	}
	err := h.r.Resync(ctx(), state(svc(webID)))
	if err == nil || !strings.Contains(err.Error(), "acl_add_replace_ee5c2f18") || !strings.Contains(err.Error(), "acl plugins") {
		t.Fatalf("Resync: %v, want the missing message named", err)
	}
	if got := h.vpp.take(); len(got) != 0 {
		t.Errorf("requests sent to an incompatible VPP: %v", got)
	}
}

func TestFrontendClaimedTwiceIsServedByTheFirstService(t *testing.T) {
	h := newHarness(t, Config{})
	a := svc(service.ID{Namespace: "a", Name: "first"}, ep("10.1.0.2", 8080, false))
	b := svc(service.ID{Namespace: "b", Name: "second"}, ep("10.1.0.3", 8080, false))
	h.resync(t, state(b, a))
	got := h.vpp.take()
	expectRequests(t, got[5:6], []api.Message{smAdd("10.96.0.10", tcp, 80, "10.1.0.2", 8080, self, "vcoil-svc@2 a/first")})
	h.update(t, &service.Changes{Delete: []service.ID{a.ID}})
	expectRequests(t, h.vpp.take(), []api.Message{
		smDel("10.96.0.10", tcp, 80, "10.1.0.2", 8080, self),
		smAdd("10.96.0.10", tcp, 80, "10.1.0.3", 8080, self, "vcoil-svc@2 b/second"),
	})
}

func TestTenThousandServicesSyncWithoutQuadraticCost(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	h := newHarness(t, Config{})
	st := state()
	for i := range 10000 {
		s := svc(service.ID{Namespace: "bulk", Name: itoa(i)}, ep("10.1.0.2", uint16(1000+i%50000), false), ep("10.2.0.3", 8080, false))
		s.ClusterIPs = []netip.Addr{netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)})}
		st.Services[s.ID] = s
	}
	start := time.Now()
	h.resync(t, st)
	full := time.Since(start)
	if n := len(h.vpp.lb); n != 10000 {
		t.Fatalf("VPP holds %d LB mappings, want 10000", n)
	}
	h.take(t)
	start = time.Now()
	s := svc(service.ID{Namespace: "bulk", Name: "5"}, ep("10.1.0.2", 1005, false), ep("10.2.0.3", 8080, false), ep("10.2.0.4", 8080, false))
	s.ClusterIPs = st.Services[s.ID].ClusterIPs
	h.update(t, &service.Changes{Upsert: []*service.Service{s}})
	one := time.Since(start)
	expectRequests(t, h.vpp.take(), []api.Message{localAddDel(true, "10.96.0.5", tcp, 80, lbLocal("10.2.0.4", 8080, 2))})
	t.Logf("10,000 services through the mock: full sync %v, one change %v", full, one)
	if full > 20*time.Second || one > 50*time.Millisecond {
		t.Errorf("too slow: full sync %v, one change %v", full, one)
	}
}

func TestMetricsCountMappingsAndRequests(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, Config{Registry: reg})
	one := svc(service.ID{Namespace: "a", Name: "one"}, ep("10.1.0.2", 8080, false))
	one.ClusterIPs = []netip.Addr{addr("10.96.0.11")}
	none := svc(service.ID{Namespace: "a", Name: "none"})
	none.ClusterIPs = []netip.Addr{addr("10.96.0.12")}
	h.resync(t, state(svc(webID, ep("10.1.0.2", 8080, false), ep("10.1.0.3", 8080, false)), one, none))
	h.update(t, &service.Changes{Delete: []service.ID{one.ID}})
	m := h.r.metrics
	for k, want := range map[string]float64{"lb": 1, "static": 0, "reject": 1, "drop": 0} {
		if got := testutil.ToFloat64(m.mappings.WithLabelValues(k)); got != want {
			t.Errorf("mappings{kind=%q} = %v, want %v", k, got, want)
		}
	}
	if got := testutil.ToFloat64(m.requests); got != 4 {
		t.Errorf("requests = %v, want 4 (3 adds, 1 delete)", got)
	}
	if n, err := testutil.GatherAndCount(reg, "vcoil_vpp_services_mappings", "vcoil_vpp_services_sync_duration_seconds",
		"vcoil_vpp_services_mapping_requests_total"); err != nil || n != 7 {
		t.Errorf("gathered %d series (%v), want 7 (4 kinds, resync and update durations, requests)", n, err)
	}
}

func TestBackendChangesNeverOverflowVPPsSumOfProbabilities(t *testing.T) {
	h := newHarness(t, Config{})
	backends := func(n int) *service.Service {
		var eps []service.Endpoint
		for i := range n {
			eps = append(eps, ep(netip.AddrFrom4([4]byte{10, 1, 1, byte(i)}).String(), 8080, false))
		}
		return svc(webID, eps...)
	}
	h.resync(t, state(backends(100)))
	if got := h.vpp.lb[mappingKey{addr("10.96.0.10"), tcp, 80}].Locals[0].Probability; got != 2 {
		t.Fatalf("probability %d with 100 backends, want 2", got)
	}
	h.take(t)
	// 160 backends: probabilities 1; adding 60 locals of 1 to 100 of 2
	// first would reach 260: the mapping is recreated instead.
	h.update(t, &service.Changes{Upsert: []*service.Service{backends(160)}})
	got := h.vpp.take()
	if len(got) != 2 || got[0].GetMessageName() != "nat44_add_del_lb_static_mapping" || got[0].(*nat44_ed.Nat44AddDelLbStaticMapping).IsAdd ||
		!got[1].(*nat44_ed.Nat44AddDelLbStaticMapping).IsAdd || len(got[1].(*nat44_ed.Nat44AddDelLbStaticMapping).Locals) != 160 {
		t.Fatalf("requests %v, want the LB mapping deleted and added with 160 locals", got)
	}
	// Back to 127: in place (adds none; each of 127 goes from 1 to 2 while
	// 33 are removed afterwards: the sum peaks at 160+127 > 255), so
	// recreated as well; then one more backend (sum 254 -> 128 locals of
	// 1) changes in place, peaking at 255.
	h.update(t, &service.Changes{Upsert: []*service.Service{backends(127)}})
	if got := h.vpp.take(); len(got) != 2 {
		t.Fatalf("%d requests, want the mapping recreated (2)", len(got))
	}
	h.update(t, &service.Changes{Upsert: []*service.Service{backends(128)}})
	if got := h.vpp.take(); len(got) != 1+2*127 {
		t.Fatalf("%d requests, want 255 (one addition, 127 replacements)", len(got))
	}
}
