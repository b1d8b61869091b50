package cnat

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/acl"
	"go.fd.io/govpp/binapi/acl_types"
	"go.fd.io/govpp/binapi/cnat"
	"go.fd.io/govpp/binapi/interface_types"
	"go.fd.io/govpp/binapi/ip"
	"go.fd.io/govpp/binapi/ip_types"
	"go.fd.io/govpp/binapi/nat44_ed"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

var (
	nodeV4     = netip.MustParseAddr("198.18.0.11")
	nodeV6     = netip.MustParseAddr("fd00:18::11")
	loopbackV4 = netip.MustParseAddr("10.100.0.255")
	loopbackV6 = netip.MustParseAddr("fd00:100::ffff")
	testNode   = service.Node{Name: "n1", NodePortAddresses: []netip.Addr{nodeV4, nodeV6}, NATLoopback: []netip.Addr{loopbackV4, loopbackV6}}
)

func ep(a string, port uint16, local bool) service.Endpoint {
	return service.Endpoint{Addr: netip.MustParseAddr(a), Port: port, Local: local, Ready: true, Serving: true}
}

// dual is a dual-stack service with a TCP port (node port 30080) and an
// SCTP port, endpoints in both families, a LoadBalancer IP of each
// family.
func dual() *service.Service {
	eps := []service.Endpoint{ep("10.100.0.2", 8080, true), ep("10.101.0.7", 8080, false), ep("fd00:100::2", 8080, true)}
	return &service.Service{
		ID:              service.ID{Namespace: "ns", Name: "web"},
		ClusterIPs:      []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00:96::10")},
		LoadBalancerIPs: []netip.Addr{netip.MustParseAddr("203.0.113.10")},
		Ports: []service.Port{
			{Name: "sctp", Protocol: service.SCTP, Port: 9, Endpoints: eps, Cluster: eps, HasEndpoints: true},
			{Name: "http", Protocol: service.TCP, Port: 80, NodePort: 30080, Endpoints: eps, Cluster: eps, HasEndpoints: true},
		},
	}
}

func newRenderer(t *testing.T, f *fakeVPP, cfg Config) *Renderer {
	t.Helper()
	r, err := New(f, cfg, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func vipEP(a string, port uint16) cnat.CnatEndpoint {
	addr := ip_types.NewAddress(netip.MustParseAddr(a).AsSlice())
	return cnat.CnatEndpoint{Addr: addr, SwIfIndex: interface_types.InterfaceIndex(^uint32(0)), IfAf: addr.Af, Port: port}
}

func zeroSrc(af ip_types.AddressFamily) cnat.CnatEndpoint {
	return cnat.CnatEndpoint{SwIfIndex: interface_types.InterfaceIndex(^uint32(0)), IfAf: af}
}

func tuple(dst string, port uint16, src string) cnat.CnatEndpointTuple {
	d := vipEP(dst, port)
	s := zeroSrc(d.IfAf)
	if src != "" {
		s = vipEP(src, 0)
	}
	return cnat.CnatEndpointTuple{DstEp: d, SrcEp: s}
}

func upd(vip string, port uint16, realIP bool, flags uint8, paths ...cnat.CnatEndpointTuple) *cnat.CnatTranslationUpdate {
	tr := cnat.CnatTranslation{Vip: vipEP(vip, port), IPProto: ip_types.IP_API_PROTO_TCP, Flags: flags, NPaths: uint32(len(paths)), Paths: paths}
	if realIP {
		tr.IsRealIP = 1
	}
	return &cnat.CnatTranslationUpdate{Translation: tr}
}

// TestResyncSendsTheseTranslations checks every field of every request a
// first Resync sends for a dual-stack service: the marker first, then one
// translation per frontend (both families, sorted), the cluster IPs with
// the client's source, the LoadBalancer IP and node ports (eTP=Cluster)
// source-NATed to the NAT loopback of their family with ALLOC_PORT, the
// node's own addresses as real IPs; no SCTP.
func TestResyncSendsTheseTranslations(t *testing.T) {
	f := newFakeVPP(t)
	r := newRenderer(t, f, Config{ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("fd00:96::/108")}})
	s := dual()
	if err := r.Resync(context.Background(), &service.State{Node: testNode, Services: map[service.ID]*service.Service{s.ID: s}}); err != nil {
		t.Fatal(err)
	}
	alloc := uint8(cnat.CNAT_TRANSLATION_ALLOC_PORT)
	want := []api.Message{
		upd("169.254.101.254", formatversion.CnatTranslations, false, 0, tuple("169.254.101.2", formatversion.CnatTranslations, "")),
		// No source ranges: a full sync empties the renderer's input ACLs
		// of the uplink and the host interconnect (the driver keeps the
		// policies').
		&acl.ACLInterfaceSetACLList{SwIfIndex: 1, Acls: []uint32{}}, &acl.ACLInterfaceSetACLList{SwIfIndex: 2, Acls: []uint32{}},
		upd("10.96.0.10", 80, false, 0, tuple("10.100.0.2", 8080, ""), tuple("10.101.0.7", 8080, "")),
		upd("198.18.0.11", 30080, true, alloc, tuple("10.100.0.2", 8080, "10.100.0.255"), tuple("10.101.0.7", 8080, "10.100.0.255")),
		upd("203.0.113.10", 80, false, alloc, tuple("10.100.0.2", 8080, "10.100.0.255"), tuple("10.101.0.7", 8080, "10.100.0.255")),
		upd("fd00:18::11", 30080, true, alloc, tuple("fd00:100::2", 8080, "fd00:100::ffff")),
		upd("fd00:96::10", 80, false, 0, tuple("fd00:100::2", 8080, "")),
	}
	got := f.take()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("requests:\n%s\nwant:\n%s", dumpMsgs(got), dumpMsgs(want))
	}
	if len(f.networks) != 1 {
		t.Fatalf("service network set %d times, want once", len(f.networks))
	}
	n := f.networks[0]
	if n.Source != loopbackV4 || n.SourceIPv6 != loopbackV6 || !n.IPv6 || !n.Sinks || len(n.CIDRs) != 2 || len(n.Refused) != 0 ||
		!reflect.DeepEqual(n.NodePorts, []vpp.NodePort{
			{Protocol: 6, Port: 30080, ClusterIP: netip.MustParseAddr("10.96.0.10"), ClusterPort: 80},
			{Protocol: 6, Port: 30080, ClusterIP: netip.MustParseAddr("fd00:96::10"), ClusterPort: 80}}) {
		t.Errorf("service network %+v", n)
	}
	if want := []vpp.CnatSNAT{{IPv4: loopbackV4, IPv6: loopbackV6}}; !reflect.DeepEqual(f.snats, want) {
		t.Errorf("cnat pods set up with %+v, want %+v", f.snats, want)
	}

	// A vcoild restart: the same state on the same VPP sends nothing.
	r2 := newRenderer(t, f, Config{})
	if err := r2.Resync(context.Background(), &service.State{Node: testNode, Services: map[service.ID]*service.Service{s.ID: s}}); err != nil {
		t.Fatal(err)
	}
	if got := f.take(); len(got) != 2 || !reflect.DeepEqual(got, want[1:3]) {
		t.Errorf("Resync of what VPP holds sent:\n%s\nwant only the empty ACL lists", dumpMsgs(got))
	}
}

// TestHostEndpointsAreSourceNATedToTheClusterIP: a path to a host-network
// endpoint of this node (the node's own kernel serves it) gets the
// service's cluster IP of its family as source on the cluster IP and on the
// eTP=Cluster frontends, so that the node's own connections (from the NAT
// loopback, which the kernel holds) get their replies through VPP; the
// other paths keep what they had, and an eTP=Local frontend keeps the
// client.
func TestHostEndpointsAreSourceNATedToTheClusterIP(t *testing.T) {
	node := testNode
	node.HostAddresses = []netip.Addr{nodeV4, nodeV6}
	hostEPs := []service.Endpoint{ep("198.18.0.11", 8080, true), ep("10.101.0.7", 8080, false), ep("fd00:18::11", 8080, true),
		ep("198.18.0.12", 8080, false)}
	svc := func(local bool) *service.Service {
		return &service.Service{
			ID:            service.ID{Namespace: "ns", Name: "host"},
			ClusterIPs:    []netip.Addr{netip.MustParseAddr("10.96.0.20"), netip.MustParseAddr("fd00:96::20")},
			ExternalIPs:   []netip.Addr{netip.MustParseAddr("203.0.113.20")},
			ExternalLocal: local,
			Ports: []service.Port{{Name: "http", Protocol: service.TCP, Port: 80, NodePort: 30081,
				Endpoints: hostEPs, Cluster: hostEPs, Local: []service.Endpoint{hostEPs[0], hostEPs[2]}, HasEndpoints: true}},
		}
	}
	alloc := uint8(cnat.CNAT_TRANSLATION_ALLOC_PORT)
	for _, tc := range []struct {
		name  string
		local bool
		want  []api.Message
	}{
		{"eTP=Cluster", false, []api.Message{
			upd("10.96.0.20", 80, false, alloc, tuple("10.101.0.7", 8080, ""), tuple("198.18.0.11", 8080, "10.96.0.20"), tuple("198.18.0.12", 8080, "")),
			upd("198.18.0.11", 30081, true, alloc, tuple("10.101.0.7", 8080, "10.100.0.255"), tuple("198.18.0.11", 8080, "10.96.0.20"), tuple("198.18.0.12", 8080, "10.100.0.255")),
			upd("203.0.113.20", 80, false, alloc, tuple("10.101.0.7", 8080, "10.100.0.255"), tuple("198.18.0.11", 8080, "10.96.0.20"), tuple("198.18.0.12", 8080, "10.100.0.255")),
			upd("fd00:18::11", 30081, true, alloc, tuple("fd00:18::11", 8080, "fd00:96::20")),
			upd("fd00:96::20", 80, false, alloc, tuple("fd00:18::11", 8080, "fd00:96::20")),
		}},
		{"eTP=Local", true, []api.Message{
			upd("10.96.0.20", 80, false, alloc, tuple("10.101.0.7", 8080, ""), tuple("198.18.0.11", 8080, "10.96.0.20"), tuple("198.18.0.12", 8080, "")),
			upd("198.18.0.11", 30081, true, 0, tuple("198.18.0.11", 8080, "")),
			upd("203.0.113.20", 80, false, 0, tuple("198.18.0.11", 8080, "")),
			upd("fd00:18::11", 30081, true, 0, tuple("fd00:18::11", 8080, "")),
			upd("fd00:96::20", 80, false, alloc, tuple("fd00:18::11", 8080, "fd00:96::20")),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeVPP(t)
			r := newRenderer(t, f, Config{ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("fd00:96::/108")}})
			s := svc(tc.local)
			if err := r.Resync(context.Background(), &service.State{Node: node, Services: map[service.ID]*service.Service{s.ID: s}}); err != nil {
				t.Fatal(err)
			}
			var got []api.Message
			for _, m := range f.take() {
				if u, ok := m.(*cnat.CnatTranslationUpdate); ok && u.Translation.Vip.Addr.String() != "169.254.101.254" {
					got = append(got, m)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("translations:\n%s\nwant:\n%s", dumpMsgs(got), dumpMsgs(tc.want))
			}
		})
	}
}

func dumpMsgs(ms []api.Message) string {
	var b strings.Builder
	for _, m := range ms {
		b.WriteString("  ")
		b.WriteString(m.GetMessageName())
		b.WriteString(" ")
		b.WriteString(strings.ReplaceAll(strings.ReplaceAll(reflectString(m), "\n", " "), "  ", " "))
		b.WriteString("\n")
	}
	return b.String()
}

func reflectString(m api.Message) string {
	if u, ok := m.(*cnat.CnatTranslationUpdate); ok {
		tr := u.Translation
		s := tr.Vip.Addr.String() + ":" + itoa(int(tr.Vip.Port)) + " real=" + itoa(int(tr.IsRealIP)) + " flags=" + itoa(int(tr.Flags)) +
			" lb=" + itoa(int(tr.LbType)) + " fhc=" + itoa(int(tr.FlowHashConfig)) + " paths:"
		for _, p := range tr.Paths {
			s += " " + p.SrcEp.Addr.String() + "(" + itoa(int(p.SrcEp.IfAf)) + ")->" + p.DstEp.Addr.String() + ":" + itoa(int(p.DstEp.Port))
		}
		return s
	}
	if d, ok := m.(*cnat.CnatTranslationDel); ok {
		return "id=" + itoa(int(d.ID))
	}
	return ""
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestNoEndpointsNeverSendsATranslationWithoutPaths: a frontend without
// endpoints goes to the reject sink, one whose endpoints are all elsewhere
// (eTP=Local) to the drop sink, both IPv4; an IPv6 one is not translated
// (the sinks are IPv4), nor is a UDP cluster IP or node port (refused by
// the node's kernel or VPP, and no cnat session outlives the Service's
// lack of endpoints). The
// fake fails the test on any translation without paths, which kills VPP
// 25.10.
func TestNoEndpointsNeverSendsATranslationWithoutPaths(t *testing.T) {
	f := newFakeVPP(t)
	r := newRenderer(t, f, Config{})
	empty := &service.Service{ID: service.ID{Namespace: "ns", Name: "empty"},
		ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.20"), netip.MustParseAddr("fd00:96::20")},
		Ports:      []service.Port{{Protocol: service.TCP, Port: 53}, {Protocol: service.UDP, Port: 53}}}
	remote := []service.Endpoint{ep("10.101.0.7", 8080, false)}
	local := &service.Service{ID: service.ID{Namespace: "ns", Name: "local"}, ExternalLocal: true,
		ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.21")},
		Ports: []service.Port{
			{Protocol: service.TCP, Port: 80, NodePort: 30081, Endpoints: remote, Cluster: remote, HasEndpoints: true},
			{Protocol: service.UDP, Port: 53, NodePort: 30082, Endpoints: remote, Cluster: remote, HasEndpoints: true},
		}}
	state := &service.State{Node: testNode, Services: map[service.ID]*service.Service{empty.ID: empty, local.ID: local}}
	if err := r.Resync(context.Background(), state); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[key]netip.AddrPort{
		tcp("10.96.0.20", 53):     netip.AddrPortFrom(vpp.RejectSinkIPv4, 53),
		tcp("10.96.0.21", 80):     netip.MustParseAddrPort("10.101.0.7:8080"),
		tcp("198.18.0.11", 30081): netip.AddrPortFrom(vpp.DropSinkIPv4, 30081),
	} {
		x := f.held(k)
		if x == nil || len(x.Paths) != 1 || netip.AddrPortFrom(endpointAddr(x.Paths[0].DstEp), x.Paths[0].DstEp.Port) != want {
			t.Errorf("%s: VPP holds %+v, want one path to %s", k, x, want)
		}
	}
	for _, k := range []key{udp("10.96.0.20", 53), udp("fd00:96::20", 53), tcp("fd00:18::11", 30081), udp("198.18.0.11", 30082)} {
		if x := f.held(k); x != nil {
			t.Errorf("%s: VPP holds %+v, want nothing (IPv6, or a UDP cluster IP, without endpoints)", k, x)
		}
	}
	if n := f.networks[len(f.networks)-1]; !reflect.DeepEqual(n.Refused, []vpp.Frontend{{Addr: netip.MustParseAddr("10.96.0.20"), Protocol: 6, Port: 53}}) {
		t.Errorf("refused frontends %+v", n.Refused)
	}
}

// TestUpdateSendsOnlyTheChange: an endpoint change replaces the paths of
// the service's frontends in place (one update each, same IDs); an
// affinity change deletes and re-creates (VPP sets the LB type only at
// creation); a deleted service's translations are deleted by ID.
func TestUpdateSendsOnlyTheChange(t *testing.T) {
	f := newFakeVPP(t)
	r := newRenderer(t, f, Config{})
	other := &service.Service{ID: service.ID{Namespace: "ns", Name: "other"}, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.30")},
		Ports: []service.Port{{Protocol: service.TCP, Port: 80, Endpoints: []service.Endpoint{ep("10.100.0.9", 80, true)}, Cluster: []service.Endpoint{ep("10.100.0.9", 80, true)}, HasEndpoints: true}}}
	s := dual()
	ctx := context.Background()
	if err := r.Resync(ctx, &service.State{Node: testNode, Services: map[service.ID]*service.Service{s.ID: s, other.ID: other}}); err != nil {
		t.Fatal(err)
	}
	f.take()
	idBefore := f.held(tcp("10.96.0.10", 80)).ID

	s2 := dual()
	eps := []service.Endpoint{ep("10.100.0.2", 8080, true), ep("fd00:100::2", 8080, true)}
	s2.Ports[1].Endpoints, s2.Ports[1].Cluster = eps, eps
	if err := r.Update(ctx, &service.Changes{Upsert: []*service.Service{s2}}); err != nil {
		t.Fatal(err)
	}
	got := f.take()
	var vips []string
	for _, m := range got {
		u, ok := m.(*cnat.CnatTranslationUpdate)
		if !ok {
			t.Fatalf("unexpected %s", m.GetMessageName())
		}
		vips = append(vips, u.Translation.Vip.Addr.String())
	}
	// The IPv6 frontends did not change.
	if want := []string{"10.96.0.10", "198.18.0.11", "203.0.113.10"}; !reflect.DeepEqual(vips, want) {
		t.Errorf("an endpoint change updated %v, want %v", vips, want)
	}
	if x := f.held(tcp("10.96.0.10", 80)); x.ID != idBefore || len(x.Paths) != 1 {
		t.Errorf("after the change VPP holds %+v (ID %d before)", x, idBefore)
	}

	// Affinity: a delete and a create, Maglev over the client's address.
	s3 := dual()
	s3.Ports[1].Endpoints, s3.Ports[1].Cluster = eps, eps
	s3.AffinityTimeout = 3 * time.Hour
	if err := r.Update(ctx, &service.Changes{Upsert: []*service.Service{s3}}); err != nil {
		t.Fatal(err)
	}
	got = f.take()
	if len(got) != 10 {
		t.Fatalf("affinity on: %d requests, want a delete and an update for each of 5 frontends:\n%s", len(got), dumpMsgs(got))
	}
	for i := 0; i < len(got); i += 2 {
		d, ok1 := got[i].(*cnat.CnatTranslationDel)
		u, ok2 := got[i+1].(*cnat.CnatTranslationUpdate)
		if !ok1 || !ok2 || u.Translation.LbType != cnat.CNAT_LB_TYPE_MAGLEV || u.Translation.FlowHashConfig != ip.IP_API_V2_FLOW_HASH_SRC_IP {
			t.Fatalf("affinity on, requests %d and %d:\n%s", i, i+1, dumpMsgs(got[i:i+2]))
		}
		_ = d
	}

	// Delete: by ID, nothing else.
	ids := map[uint32]bool{}
	for _, k := range []key{tcp("10.96.0.10", 80), tcp("198.18.0.11", 30080), tcp("203.0.113.10", 80), tcp("fd00:18::11", 30080), tcp("fd00:96::10", 80)} {
		ids[f.held(k).ID] = true
	}
	if err := r.Update(ctx, &service.Changes{Delete: []service.ID{s.ID}}); err != nil {
		t.Fatal(err)
	}
	got = f.take()
	for _, m := range got {
		d, ok := m.(*cnat.CnatTranslationDel)
		if !ok || !ids[d.ID] {
			t.Errorf("delete of the service sent %s", dumpMsgs([]api.Message{m}))
		}
		delete(ids, d.ID)
	}
	if len(ids) != 0 {
		t.Errorf("translations %v not deleted", ids)
	}
	if f.count() != 2 {
		t.Errorf("VPP holds %d translations, want the marker and the other service's", f.count())
	}
}

// TestResyncRemovesStaleAndLeavesForeign: a translation of a service that
// went while vcoild was down is deleted; one under a foreign VIP prefix is
// left alone, and a frontend there is not rendered.
func TestResyncRemovesStaleAndLeavesForeign(t *testing.T) {
	f := newFakeVPP(t)
	ctx := context.Background()
	r := newRenderer(t, f, Config{})
	s := dual()
	if err := r.Resync(ctx, &service.State{Node: testNode, Services: map[service.ID]*service.Service{s.ID: s}}); err != nil {
		t.Fatal(err)
	}
	// Someone else's translation, made by hand.
	ch, _, _ := f.Channel(ctx, 1)
	theirs := upd("192.168.50.1", 443, false, 0, tuple("10.100.0.50", 443, ""))
	if err := ch.SendRequest(theirs).ReceiveReply(&cnat.CnatTranslationUpdateReply{}); err != nil {
		t.Fatal(err)
	}
	ch.Close()
	f.take()

	r2 := newRenderer(t, f, Config{ForeignVIPs: []netip.Prefix{netip.MustParsePrefix("192.168.50.0/24")}})
	mine := &service.Service{ID: service.ID{Namespace: "ns", Name: "mine"}, ExternalIPs: []netip.Addr{netip.MustParseAddr("192.168.50.1")},
		ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.40")},
		Ports:      []service.Port{{Protocol: service.TCP, Port: 443, Endpoints: []service.Endpoint{ep("10.100.0.3", 443, true)}, Cluster: []service.Endpoint{ep("10.100.0.3", 443, true)}, HasEndpoints: true}}}
	if err := r2.Resync(ctx, &service.State{Node: testNode, Services: map[service.ID]*service.Service{mine.ID: mine}}); err != nil {
		t.Fatal(err)
	}
	if x := f.held(tcp("192.168.50.1", 443)); x == nil || endpointAddr(x.Paths[0].DstEp) != netip.MustParseAddr("10.100.0.50") {
		t.Errorf("the foreign translation became %+v", x)
	}
	if f.held(tcp("10.96.0.10", 80)) != nil || f.held(tcp("fd00:96::10", 80)) != nil {
		t.Error("the stale service's translations are still there")
	}
	if f.held(tcp("10.96.0.40", 443)) == nil {
		t.Error("the new service's cluster IP is not translated")
	}
	if f.count() != 3 {
		t.Errorf("VPP holds %d translations, want the marker, the foreign one and the new cluster IP", f.count())
	}
}

// TestNewerFormatChangesNothing: a marker of a newer format stops the
// sync before any change, naming it.
func TestNewerFormatChangesNothing(t *testing.T) {
	f := newFakeVPP(t)
	ctx := context.Background()
	ch, _, _ := f.Channel(ctx, 1)
	newer := upd("169.254.101.254", formatversion.CnatTranslations+1, false, 0, tuple("169.254.101.2", 1, ""))
	if err := ch.SendRequest(newer).ReceiveReply(&cnat.CnatTranslationUpdateReply{}); err != nil {
		t.Fatal(err)
	}
	ch.Close()
	f.take()
	r := newRenderer(t, f, Config{})
	s := dual()
	err := r.Resync(ctx, &service.State{Node: testNode, Services: map[service.ID]*service.Service{s.ID: s}})
	if !errors.Is(err, formatversion.ErrNewer) || !strings.Contains(err.Error(), "169.254.101.254") {
		t.Fatalf("Resync: %v, want a newer-format error naming the marker", err)
	}
	if got := f.take(); len(got) != 0 {
		t.Errorf("sent:\n%s", dumpMsgs(got))
	}
}

// TestRestartAndFailureSyncEverything: after VPP restarts (a new
// incarnation) or a request fails, the next Update dumps and sends the
// whole difference.
func TestRestartAndFailureSyncEverything(t *testing.T) {
	f := newFakeVPP(t)
	ctx := context.Background()
	r := newRenderer(t, f, Config{})
	s := dual()
	if err := r.Resync(ctx, &service.State{Node: testNode, Services: map[service.ID]*service.Service{s.ID: s}}); err != nil {
		t.Fatal(err)
	}
	full := f.count()
	f.restart()
	other := &service.Service{ID: service.ID{Namespace: "ns", Name: "other"}, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.30")},
		Ports: []service.Port{{Protocol: service.TCP, Port: 53}}}
	if err := r.Update(ctx, &service.Changes{Upsert: []*service.Service{other}}); err != nil {
		t.Fatal(err)
	}
	if f.count() != full+1 {
		t.Errorf("after VPP's restart VPP holds %d translations, want %d", f.count(), full+1)
	}

	f.fail = func(m api.Message) api.VPPApiError {
		if _, ok := m.(*cnat.CnatTranslationUpdate); ok {
			return api.INVALID_VALUE
		}
		return 0
	}
	s2 := dual()
	s2.Ports[1].Endpoints, s2.Ports[1].Cluster = nil, nil
	if err := r.Update(ctx, &service.Changes{Upsert: []*service.Service{s2}}); err == nil || !strings.Contains(err.Error(), "ns/web") {
		t.Fatalf("Update with VPP refusing: %v, want an error naming the service", err)
	}
	f.fail = nil
	f.take()
	// Another change: the renderer no longer knows what VPP holds, so it
	// dumps and sends everything still different, the failed change too.
	if err := r.Update(ctx, &service.Changes{Delete: []service.ID{other.ID}}); err != nil {
		t.Fatal(err)
	}
	if x := f.held(tcp("10.96.0.10", 80)); x == nil || endpointAddr(x.Paths[0].DstEp) != vpp.RejectSinkIPv4 {
		t.Errorf("after the failure and another Update VPP holds %+v at the cluster IP, want the reject sink", x)
	}
}

// TestSourceRangesComeBeforeTheirTranslations: a LoadBalancer Service with
// loadBalancerSourceRanges gets, before its translations, one ACL that
// permits (and reflects) each range of a family to each LoadBalancer IP
// and port of that family and denies every other source of it, both
// families, set on the uplink's and the host interconnect's input; when
// the ranges go, the lists are emptied and the ACL deleted.
func TestSourceRangesComeBeforeTheirTranslations(t *testing.T) {
	f := newFakeVPP(t)
	ctx := context.Background()
	r := newRenderer(t, f, Config{})
	if err := r.Resync(ctx, &service.State{Node: testNode, Services: map[service.ID]*service.Service{}}); err != nil {
		t.Fatal(err)
	}
	f.take()
	s := dual()
	s.Ports = s.Ports[1:] // TCP 80 only
	s.LoadBalancerIPs = append(s.LoadBalancerIPs, netip.MustParseAddr("2001:db8:113::10"))
	s.LoadBalancerSourceRanges = []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("2001:db8:51::/48")}
	if err := r.Update(ctx, &service.Changes{Upsert: []*service.Service{s}}); err != nil {
		t.Fatal(err)
	}
	got := f.take()
	if len(got) < 4 {
		t.Fatalf("sent %d requests", len(got))
	}
	add, ok := got[0].(*acl.ACLAddReplace)
	if !ok {
		t.Fatalf("first request %s, want the ACL before any translation", got[0].GetMessageName())
	}
	type rule struct {
		action   acl_types.ACLAction
		src, dst string
		port     uint16
	}
	var rules []rule
	for _, x := range add.R[:4] {
		rules = append(rules, rule{x.IsPermit, x.SrcPrefix.String(), x.DstPrefix.String(), x.DstportOrIcmpcodeFirst})
	}
	wantRules := []rule{
		{acl_types.ACL_ACTION_API_PERMIT_REFLECT, "198.51.100.0/24", "203.0.113.10/32", 80},
		{acl_types.ACL_ACTION_API_DENY, "0.0.0.0/0", "203.0.113.10/32", 80},
		{acl_types.ACL_ACTION_API_PERMIT_REFLECT, "2001:db8:51::/48", "2001:db8:113::10/128", 80},
		{acl_types.ACL_ACTION_API_DENY, "::/0", "2001:db8:113::10/128", 80},
	}
	if !reflect.DeepEqual(rules, wantRules) {
		t.Errorf("ACL rules %+v\nwant %+v", rules, wantRules)
	}
	for i, iface := range []vpp.NodeInterface{vpp.Uplink, vpp.HostInterconnect} {
		l, ok := got[1+i].(*acl.ACLInterfaceSetACLList)
		if !ok || !reflect.DeepEqual(f.lists[iface], []uint32{5}) {
			t.Errorf("request %d: %s; %s's list %v, want the ACL 5", 1+i, got[1+i].GetMessageName(), iface, f.lists[iface])
		}
		_ = l
	}
	for _, m := range got[3:] {
		if _, ok := m.(*cnat.CnatTranslationUpdate); !ok {
			t.Errorf("after the ACL: %s", m.GetMessageName())
		}
	}

	s2 := *s
	s2.LoadBalancerSourceRanges = nil
	if err := r.Update(ctx, &service.Changes{Upsert: []*service.Service{&s2}}); err != nil {
		t.Fatal(err)
	}
	if len(f.acls) != 0 || len(f.lists[vpp.Uplink]) != 0 || len(f.lists[vpp.HostInterconnect]) != 0 {
		t.Errorf("without ranges VPP keeps ACLs %v, lists %v", f.acls, f.lists)
	}
}

// The switch from the NAT44 renderer: the first full sync of a VPP deletes
// the static mappings an earlier vcoild's NAT44 renderer tagged (any
// format, plain and hashed tags), after every translation is in VPP; the
// hostPorts' mappings and untagged ones stay. Later syncs of the same VPP
// do not look again; a new VPP is looked at once more.
func TestFirstSyncRetiresTheNAT44RenderersMappings(t *testing.T) {
	f := newFakeVPP(t)
	ctx := context.Background()
	lo := netip.MustParseAddr("10.100.0.3")
	f.nat44[tcp("10.96.0.10", 80)] = nat44Mapping{lb: true, flags: 0x0a, tag: "vcoil-svc@2 ns/web"}
	f.nat44[udp("10.96.0.11", 53)] = nat44Mapping{local: lo, flags: 0x0a, tag: "vcoil-svc#@2 3f2a"}
	f.nat44[tcp("10.96.0.12", 80)] = nat44Mapping{local: lo, flags: 0x08, tag: "vcoil-svc ns/old"} // format 1
	f.nat44[tcp("203.0.113.1", 30555)] = nat44Mapping{local: lo, flags: 0x0a, tag: "vcoil-hp@2 c1 eth0"}
	f.nat44[tcp("203.0.113.1", 8080)] = nat44Mapping{local: lo, tag: "someone else's"}
	r := newRenderer(t, f, Config{})
	s := dual()
	if err := r.Resync(ctx, &service.State{Node: testNode, Services: map[service.ID]*service.Service{s.ID: s}}); err != nil {
		t.Fatal(err)
	}
	sent := f.take()
	lastUpdate, firstDel := -1, len(sent)
	var deleted []string
	for i, m := range sent {
		switch m := m.(type) {
		case *cnat.CnatTranslationUpdate:
			lastUpdate = i
		case *nat44_ed.Nat44AddDelLbStaticMapping:
			firstDel = min(firstDel, i)
			deleted = append(deleted, netip.AddrFrom4(m.ExternalAddr).String())
		case *nat44_ed.Nat44AddDelStaticMappingV2:
			firstDel = min(firstDel, i)
			deleted = append(deleted, netip.AddrFrom4(m.ExternalIPAddress).String())
		}
	}
	slices.Sort(deleted)
	if want := []string{"10.96.0.10", "10.96.0.11", "10.96.0.12"}; !slices.Equal(deleted, want) {
		t.Errorf("deleted the NAT44 mappings of %v, want %v", deleted, want)
	}
	if lastUpdate < 0 || lastUpdate > firstDel {
		t.Errorf("a translation (request %d) came after a NAT44 mapping was deleted (request %d):\n%s", lastUpdate, firstDel, dumpMsgs(sent))
	}
	if len(f.nat44) != 2 {
		t.Errorf("VPP holds the NAT44 mappings %v, want the hostPort's and the foreign one", f.nat44)
	}

	// A second sync of the same VPP does not look.
	f.nat44[tcp("10.96.0.13", 80)] = nat44Mapping{local: lo, tag: "vcoil-svc@2 ns/late"}
	if err := r.Resync(ctx, &service.State{Node: testNode, Services: map[service.ID]*service.Service{s.ID: s}}); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	for _, m := range f.requests {
		if _, ok := m.(*nat44_ed.Nat44StaticMappingDump); ok {
			t.Error("the second sync of one VPP dumped the NAT44 mappings again")
		}
	}
	f.mu.Unlock()
	f.take()
	// A new VPP (its mappings are put back by hand here) is looked at.
	f.restart()
	f.nat44[tcp("10.96.0.13", 80)] = nat44Mapping{local: lo, tag: "vcoil-svc@2 ns/late"}
	if err := r.Resync(ctx, &service.State{Node: testNode, Services: map[service.ID]*service.Service{s.ID: s}}); err != nil {
		t.Fatal(err)
	}
	if len(f.nat44) != 0 {
		t.Errorf("after a VPP restart the NAT44 mappings %v stay", f.nat44)
	}
}
