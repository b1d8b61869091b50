package vpp

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"go.fd.io/govpp/adapter/mock"
	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/acl"
	"go.fd.io/govpp/binapi/acl_types"
	interfaces "go.fd.io/govpp/binapi/interface"
	"go.fd.io/govpp/binapi/interface_types"
	"go.fd.io/govpp/binapi/ip"
	"go.fd.io/govpp/binapi/ip_types"
	"go.fd.io/govpp/binapi/memclnt"
	"go.fd.io/govpp/binapi/nat44_ed"
	"go.fd.io/govpp/binapi/nat_types"
	"go.fd.io/govpp/binapi/vpe"
	"go.fd.io/govpp/core"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

// stateVPP answers the node state's dumps through GoVPP's mock adapter with
// a fixed VPP: the uplink, vcoil's loopback, one TAP pod and an af_packet
// pod, vcoil's ACLs and mappings beside someone else's. It logs every
// request.
type stateVPP struct {
	t    *testing.T
	mock *vpptest.Mock
	mu   sync.Mutex
	log  []string
}

func v4(s string) ip_types.IP4Address { return netip.MustParseAddr(s).As4() }

func vppPrefix(s string) ip_types.Prefix {
	p := netip.MustParsePrefix(s)
	return ip_types.Prefix{Address: ip_types.NewAddress(p.Addr().AsSlice()), Len: uint8(p.Bits())}
}

func (f *stateVPP) handle(dto mock.MessageDTO) ([]byte, uint16, bool) {
	if vpptest.IsControlPing(dto) {
		return f.mock.Reply(dto, &memclnt.ControlPingReply{}, 0)
	}
	if dto.MsgID == 200 {
		// The mock adapter gives sw_interface_dump a fixed ID without a
		// name too.
		dto.MsgName = "sw_interface_dump"
	}
	req, ok := f.mock.Decode(dto)
	if !ok {
		return nil, 0, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	up := interface_types.IF_STATUS_API_FLAG_ADMIN_UP | interface_types.IF_STATUS_API_FLAG_LINK_UP
	var details []api.Message
	switch m := req.(type) {
	case *vpe.ShowVersion:
		f.log = append(f.log, "show_version")
		return f.mock.Reply(dto, &vpe.ShowVersionReply{Program: "vpe", Version: "25.10-release"}, 0)
	case *interfaces.SwInterfaceDump:
		f.log = append(f.log, fmt.Sprintf("sw_interface_dump %d", m.SwIfIndex))
		details = []api.Message{
			&interfaces.SwInterfaceDetails{SwIfIndex: 0, InterfaceName: "local0"},
			&interfaces.SwInterfaceDetails{SwIfIndex: 4, InterfaceName: "host-vcvpp0123456789", Tag: "vcoil c2 eth0", Flags: up},
			&interfaces.SwInterfaceDetails{SwIfIndex: 1, InterfaceName: "host-eth1", Flags: up},
			&interfaces.SwInterfaceDetails{SwIfIndex: 2, InterfaceName: "loop0", Tag: "vcoil-loopback", Flags: up},
			&interfaces.SwInterfaceDetails{SwIfIndex: 3, InterfaceName: "tap3", Tag: "vcoil c1 eth0", Flags: up},
		}
	case *ip.IPAddressDump:
		f.log = append(f.log, fmt.Sprintf("ip_address_dump %d ipv6=%t", m.SwIfIndex, m.IsIPv6))
		addrs := map[[2]any][]string{
			{interface_types.InterfaceIndex(1), false}: {"198.18.0.10/24"},
			{interface_types.InterfaceIndex(1), true}:  {"2001:db8:18::10/64"},
			{interface_types.InterfaceIndex(2), false}: {"169.254.1.1/32"},
		}[[2]any{m.SwIfIndex, m.IsIPv6}]
		for _, a := range addrs {
			details = append(details, &ip.IPAddressDetails{SwIfIndex: m.SwIfIndex, Prefix: ip_types.AddressWithPrefix(vppPrefix(a))})
		}
	case *nat44_ed.Nat44InterfaceDump:
		f.log = append(f.log, "nat44_interface_dump")
		details = []api.Message{
			&nat44_ed.Nat44InterfaceDetails{SwIfIndex: 1, Flags: nat_types.NAT_IS_OUTSIDE},
			&nat44_ed.Nat44InterfaceDetails{SwIfIndex: 3, Flags: nat_types.NAT_IS_INSIDE | nat_types.NAT_IS_OUTSIDE},
			&nat44_ed.Nat44InterfaceDetails{SwIfIndex: 4, Flags: nat_types.NAT_IS_INSIDE},
		}
	case *acl.ACLInterfaceListDump:
		f.log = append(f.log, fmt.Sprintf("acl_interface_list_dump %d", m.SwIfIndex))
		details = []api.Message{
			&acl.ACLInterfaceListDetails{SwIfIndex: 1, Count: 1, NInput: 1, Acls: []uint32{0}},
			&acl.ACLInterfaceListDetails{SwIfIndex: 3, Count: 3, NInput: 1, Acls: []uint32{1, 2, 5}},
		}
	case *acl.ACLDump:
		f.log = append(f.log, fmt.Sprintf("acl_dump %d", m.ACLIndex))
		rule := acl_types.ACLRule{IsPermit: acl_types.ACL_ACTION_API_PERMIT, SrcPrefix: vppPrefix("10.1.0.0/16"), DstPrefix: vppPrefix("10.1.0.5/32"),
			Proto: ip_types.IP_API_PROTO_TCP, SrcportOrIcmptypeLast: 65535, DstportOrIcmpcodeFirst: 80, DstportOrIcmpcodeLast: 80}
		deny := acl_types.ACLRule{SrcPrefix: vppPrefix("0.0.0.0/0"), DstPrefix: vppPrefix("0.0.0.0/0"), SrcportOrIcmptypeLast: 65535, DstportOrIcmpcodeLast: 65535}
		reflect := acl_types.ACLRule{IsPermit: acl_types.ACL_ACTION_API_PERMIT_REFLECT, SrcPrefix: vppPrefix("::/0"), DstPrefix: vppPrefix("::/0"),
			Proto: ip_types.IP_API_PROTO_UDP, SrcportOrIcmptypeFirst: 1000, SrcportOrIcmptypeLast: 2000, DstportOrIcmpcodeLast: 65535}
		details = []api.Message{
			&acl.ACLDetails{ACLIndex: 0, Tag: "vcoil-svc-source-ranges", Count: 2, R: []acl_types.ACLRule{rule, deny}},
			&acl.ACLDetails{ACLIndex: 5, Tag: "someone-else", Count: 1, R: []acl_types.ACLRule{deny}},
			&acl.ACLDetails{ACLIndex: 2, Tag: "vcoil-pol reflect", Count: 1, R: []acl_types.ACLRule{reflect}},
			&acl.ACLDetails{ACLIndex: 1, Tag: "vcoil-pol t1", Count: 0},
		}
	case *nat44_ed.Nat44StaticMappingDump:
		f.log = append(f.log, "nat44_static_mapping_dump")
		details = []api.Message{
			&nat44_ed.Nat44StaticMappingDetails{ExternalIPAddress: v4("198.18.0.10"), ExternalPort: 8080, Protocol: 6,
				LocalIPAddress: v4("10.1.0.5"), LocalPort: 80, Flags: nat_types.NAT_IS_OUT2IN_ONLY, ExternalSwIfIndex: ^interface_types.InterfaceIndex(0), Tag: "vcoil-hp# abc"},
			&nat44_ed.Nat44StaticMappingDetails{ExternalIPAddress: v4("198.18.0.10"), ExternalPort: 22, Protocol: 6,
				LocalIPAddress: v4("10.1.0.9"), LocalPort: 22, Tag: "admin"},
		}
	case *nat44_ed.Nat44LbStaticMappingDump:
		f.log = append(f.log, "nat44_lb_static_mapping_dump")
		details = []api.Message{
			&nat44_ed.Nat44LbStaticMappingDetails{ExternalAddr: v4("10.96.0.10"), ExternalPort: 53, Protocol: 17,
				Flags: nat_types.NAT_IS_SELF_TWICE_NAT | nat_types.NAT_IS_OUT2IN_ONLY, Affinity: 10800, Tag: "vcoil-svc kube-system/dns:dns", LocalNum: 2,
				Locals: []nat44_ed.Nat44LbAddrPort{{Addr: v4("10.1.0.7"), Port: 53, Probability: 50}, {Addr: v4("10.1.0.6"), Port: 53, Probability: 50}}},
		}
	default:
		f.t.Errorf("fake VPP: the node state sent %s", dto.MsgName)
		return nil, 0, false
	}
	f.mock.Adapter.MockReply(details...)
	return nil, 0, false
}

// newStateDriver is a driver connected to stateVPP, as the supervisor
// leaves it after a sync: a channel opener, an incarnation, a resync and
// wired pods.
func newStateDriver(t *testing.T) (*driver, *stateVPP) {
	f := &stateVPP{t: t, mock: vpptest.NewMock(t, stateMessages())}
	f.mock.Adapter.MockReplyHandler(f.handle)
	conn, err := core.Connect(f.mock.Adapter)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Disconnect)
	d := newDriver(Config{APISocket: "/run/vpp/api.sock"}, testr.New(t), nil, nil)
	d.open = func(buffer int) (api.Channel, error) { return conn.NewAPIChannelBuffered(buffer, buffer) }
	return d, f
}

func TestStateSourceDumpsVPPAndKeepsVcoilsObjects(t *testing.T) {
	d, f := newStateDriver(t)
	synced := time.Date(2026, 11, 26, 2, 30, 0, 0, time.UTC)
	d.incarnation = 3
	d.recordResync(synced.Add(-time.Minute), synced.Add(-time.Minute+time.Second), fmt.Errorf("list VPP's interfaces: timeout"))
	d.recordResync(synced.Add(-1500*time.Millisecond), synced, nil)

	st := &nodestate.State{}
	if err := d.StateSource().Fill(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	wantLog := []string{
		"show_version",
		"sw_interface_dump 4294967295",
		"ip_address_dump 0 ipv6=false", "ip_address_dump 0 ipv6=true",
		"ip_address_dump 1 ipv6=false", "ip_address_dump 1 ipv6=true",
		"ip_address_dump 2 ipv6=false", "ip_address_dump 2 ipv6=true",
		"ip_address_dump 3 ipv6=false", "ip_address_dump 3 ipv6=true",
		"ip_address_dump 4 ipv6=false", "ip_address_dump 4 ipv6=true",
		"nat44_interface_dump",
		"acl_interface_list_dump 4294967295",
		"acl_dump 4294967295",
		"nat44_static_mapping_dump",
		"nat44_lb_static_mapping_dump",
	}
	if !reflect.DeepEqual(f.log, wantLog) {
		t.Errorf("requests:\n got %s\nwant %s", strings.Join(f.log, "\n     "), strings.Join(wantLog, "\n     "))
	}
	p := netip.MustParsePrefix
	ap := netip.MustParseAddrPort
	want := &nodestate.VPP{
		Connected: true, Version: "25.10-release", Incarnation: 3,
		Resync: nodestate.Sync{Last: synced, Duration: 1.5, Attempted: synced, Errors: 1},
		Interfaces: []nodestate.VPPInterface{
			{Index: 0, Name: "local0"},
			{Index: 1, Name: "host-eth1", Up: true, Addresses: []netip.Prefix{p("198.18.0.10/24"), p("2001:db8:18::10/64")}, NAT: "out", InputACLs: []uint32{0}},
			{Index: 2, Name: "loop0", Tag: "vcoil-loopback", Up: true, Addresses: []netip.Prefix{p("169.254.1.1/32")}},
			{Index: 3, Name: "tap3", Tag: "vcoil c1 eth0", Up: true, NAT: "in out", InputACLs: []uint32{1}, OutputACLs: []uint32{2, 5}},
			{Index: 4, Name: "host-vcvpp0123456789", Tag: "vcoil c2 eth0", Up: true, NAT: "in"},
		},
		ACLs: []nodestate.VPPACL{
			{Index: 0, Tag: "vcoil-svc-source-ranges", Rules: []string{"permit tcp 10.1.0.0/16 > 10.1.0.5/32:80", "deny any 0.0.0.0/0 > 0.0.0.0/0"}},
			{Index: 1, Tag: "vcoil-pol t1", Rules: []string{}},
			{Index: 2, Tag: "vcoil-pol reflect", Rules: []string{"permit+reflect udp ::/0:1000-2000 > ::/0"}},
		},
		NATMappings: []nodestate.VPPNATMapping{
			{External: ap("10.96.0.10:53"), Protocol: "UDP", Tag: "vcoil-svc kube-system/dns:dns", Flags: []string{"self-twice-nat", "out2in-only"}, Affinity: 10800,
				Locals: []nodestate.VPPNATLocal{{Address: ap("10.1.0.6:53"), Probability: 50}, {Address: ap("10.1.0.7:53"), Probability: 50}}},
			{External: ap("198.18.0.10:8080"), Protocol: "TCP", Tag: "vcoil-hp# abc", Flags: []string{"out2in-only"},
				Locals: []nodestate.VPPNATLocal{{Address: ap("10.1.0.5:80")}}},
		},
	}
	if !reflect.DeepEqual(st.VPP, want) {
		t.Errorf("VPP state:\n got %+v\nwant %+v", st.VPP, want)
	}
}

// Without a connection the state says so, with the reason, and sends
// nothing.
func TestStateSourceWithoutConnection(t *testing.T) {
	d, f := newStateDriver(t)
	d.open = nil
	d.incarnation = 2
	d.why = fmt.Errorf("lost VPP (pid 42) at /run/vpp/api.sock: EOF")
	st := &nodestate.State{}
	err := d.StateSource().Fill(context.Background(), st)
	if err == nil || err.Error() != "not connected to VPP at /run/vpp/api.sock: lost VPP (pid 42) at /run/vpp/api.sock: EOF" {
		t.Errorf("error = %v", err)
	}
	if want := (&nodestate.VPP{Incarnation: 2}); !reflect.DeepEqual(st.VPP, want) {
		t.Errorf("VPP state = %+v, want %+v", st.VPP, want)
	}
	if len(f.log) != 0 {
		t.Errorf("sent %v without a connection", f.log)
	}
}

func TestPodInterfacesAreTheWiredPods(t *testing.T) {
	d, _ := newStateDriver(t)
	tap := dataplane.PodKey{ContainerID: "c1", IfName: "eth0"}
	veth := dataplane.PodKey{ContainerID: "c2", IfName: "eth0"}
	unwired := dataplane.PodKey{ContainerID: "c3", IfName: "eth0"}
	d.pods[tap] = &podState{pod: dataplane.Pod{PodKey: tap}, wired: true, swIfIndex: 3, vppName: "tap3"}
	d.pods[veth] = &podState{pod: dataplane.Pod{PodKey: veth}, wired: true, swIfIndex: 4, vppName: "host-vcvpp0123456789"}
	d.pods[unwired] = &podState{pod: dataplane.Pod{PodKey: unwired}, swIfIndex: 5, vppName: "tap5"}
	got, err := d.PodInterfaces(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[dataplane.PodKey]nodestate.Interface{
		tap:  {Kind: "tap", Name: "tap3", Index: 3},
		veth: {Kind: "af_packet", Name: "host-vcvpp0123456789", Index: 4, HostName: "vcvpp0123456789"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("PodInterfaces:\n got %+v\nwant %+v", got, want)
	}
}

func TestACLRuleText(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule acl_types.ACLRule
		want string
	}{
		{"an ICMP rule names type and code when it narrows them",
			acl_types.ACLRule{IsPermit: 1, SrcPrefix: vppPrefix("10.0.0.0/8"), DstPrefix: vppPrefix("0.0.0.0/0"), Proto: ip_types.IP_API_PROTO_ICMP,
				SrcportOrIcmptypeFirst: 8, SrcportOrIcmptypeLast: 8, DstportOrIcmpcodeFirst: 0, DstportOrIcmpcodeLast: 255},
			"permit icmp 10.0.0.0/8 > 0.0.0.0/0 type 8-8 code 0-255"},
		{"TCP flags are shown as value/mask",
			acl_types.ACLRule{SrcPrefix: vppPrefix("0.0.0.0/0"), DstPrefix: vppPrefix("10.1.0.5/32"), Proto: ip_types.IP_API_PROTO_TCP,
				SrcportOrIcmptypeLast: 65535, DstportOrIcmpcodeFirst: 1, DstportOrIcmpcodeLast: 1023, TCPFlagsMask: 0x12, TCPFlagsValue: 0x02},
			"deny tcp 0.0.0.0/0 > 10.1.0.5/32:1-1023 flags 0x02/0x12"},
		{"an SCTP port range", acl_types.ACLRule{IsPermit: 2, SrcPrefix: vppPrefix("fd00::/64"), DstPrefix: vppPrefix("::/0"), Proto: ip_types.IP_API_PROTO_SCTP,
			SrcportOrIcmptypeLast: 65535, DstportOrIcmpcodeFirst: 5000, DstportOrIcmpcodeLast: 5010},
			"permit+reflect sctp fd00::/64 > ::/0:5000-5010"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ACLRuleText(tc.rule); got != tc.want {
				t.Errorf("ACLRuleText = %q, want %q", got, tc.want)
			}
		})
	}
}
