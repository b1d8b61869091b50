package vpp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/acl"
	"go.fd.io/govpp/binapi/af_packet"
	"go.fd.io/govpp/binapi/fib"
	"go.fd.io/govpp/binapi/fib_types"
	interfaces "go.fd.io/govpp/binapi/interface"
	"go.fd.io/govpp/binapi/interface_types"
	"go.fd.io/govpp/binapi/ip"
	"go.fd.io/govpp/binapi/ip_neighbor"
	"go.fd.io/govpp/binapi/ip_types"
	"go.fd.io/govpp/binapi/memclnt"
	"go.fd.io/govpp/binapi/nat44_ed"
	"go.fd.io/govpp/binapi/nat_types"
	"go.fd.io/govpp/binapi/tapv2"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
)

// The FIB sources of the fake: the API's has VPP 25.10's number (the
// driver reads it by name), another stands for the entries VPP's plugins
// make (cnat's tracking of its backends).
const (
	fakeSourceAPI = 8
	fakeSourceRR  = 16
)

var fakeFIBSources = []fib.FibSource{
	{ID: 1, Name: "special"}, {ID: 4, Name: "interface"}, {ID: fakeSourceAPI, Name: "API"}, {ID: fakeSourceRR, Name: "recursive-resolution"},
}

// fakeVPP is a small model of VPP behind the channel interface: it answers
// every message the driver sends as VPP 25.10 does (indexes, tags,
// addresses, routes, NAT features, the retvals of repeats), records each
// request, and can fail a chosen request, die and restart with a new PID.
type fakeVPP struct {
	mu     sync.Mutex
	pid    uint32
	next   uint32
	ifs    map[uint32]*fakeIf
	routes map[netip.Prefix]fib_types.FibPath
	// otherRoutes are entries of another FIB source than the API's (as
	// cnat's tracking of its backends makes), which vcoil must leave be.
	otherRoutes map[netip.Prefix]fib_types.FibPath
	neigh       map[string]bool
	nat         bool
	natFeat     map[uint32]map[nat_types.NatConfigFlags]bool
	// natBroken are the interfaces whose NAT feature arc VPP 25.10 would
	// have left inconsistent (see Nat44InterfaceAddDelFeature).
	natBroken map[uint32]bool
	sent      []api.Message
	// failWhen, when it returns non-zero for a request, makes VPP answer
	// that retval (once per match).
	failWhen func(api.Message) int32
	down     bool
	unknown  []string
	// gen counts VPP processes: a renderer's channel (Channel) fails once
	// the VPP it was opened on is gone, as GoVPP's do when the
	// connection drops. opened are the buffer sizes of those channels.
	gen    int
	opened []int
	// aclLists are the interfaces' ACL lists: n_input, then the indexes.
	aclLists map[uint32][]uint32
	// snat models what SNAT uses (snat_fake_test.go).
	snat *fakeSNAT
	// static are the plain static mappings by external key
	// (hostport_fake_test.go).
	static map[string]*fakeStaticMapping
	// source models source validation (source_fake_test.go).
	source *fakeSource
	// aclPlugin models the ACLs themselves (guard_fake_test.go).
	aclPlugin *fakeACLs
	// cnat models cnat's SNAT policy and pod features (cnat_fake_test.go).
	cnat *fakeCnat
}

type fakeIf struct {
	sw         uint32
	name, tag  string
	up         bool
	mac        net.HardwareAddr
	mtu        uint32
	addrs      []netip.Prefix
	unnumbered uint32 // ^0: none
	ip6        bool   // IPv6 enabled: enabling again is VALUE_EXIST
	tap        *tapv2.TapCreateV3
	hostIf     string // af_packet
}

func newFakeVPP() *fakeVPP {
	f := &fakeVPP{pid: 100}
	f.reset()
	return f
}

// reset is VPP's state after start: local0 only.
func (f *fakeVPP) reset() {
	f.next = 1
	f.ifs = map[uint32]*fakeIf{0: {sw: 0, name: "local0", unnumbered: ^uint32(0)}}
	f.routes = map[netip.Prefix]fib_types.FibPath{}
	f.otherRoutes = map[netip.Prefix]fib_types.FibPath{}
	f.neigh = map[string]bool{}
	f.nat = false
	f.natFeat = map[uint32]map[nat_types.NatConfigFlags]bool{}
	f.natBroken = map[uint32]bool{}
	f.aclLists = map[uint32][]uint32{}
	f.snat = newFakeSNAT()
	f.static = map[string]*fakeStaticMapping{}
	f.source = newFakeSource()
	f.aclPlugin = newFakeACLs()
	f.cnat = nil
}

// restart is a VPP that died and came back: empty, with another PID, and
// what startup.conf makes (boot).
func (f *fakeVPP) restart(boot ...func(*fakeVPP)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reset()
	for _, b := range boot {
		b(f)
	}
	f.pid++
	f.gen++
	f.down = false
}

func (f *fakeVPP) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

func (f *fakeVPP) dialer() dialer {
	return func(context.Context) (connection, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.down {
			return connection{}, errors.New("dial unix api.sock: connect: connection refused")
		}
		// The fake's connection survives a restart (the driver sees the
		// new PID in its ping), so a renderer's channel belongs to the VPP
		// process it was opened on.
		open := func(buffer int) (api.Channel, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.opened = append(f.opened, buffer)
			return &fakeChannel{f: f, gen: f.gen, renderer: true}, nil
		}
		return connection{ch: &fakeChannel{f: f}, open: open, close: func() {}}, nil
	}
}

// take returns the requests recorded since the last take, without control
// pings (the supervisor's pings interleave with everything).
func (f *fakeVPP) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, m := range f.sent {
		if _, ok := m.(*memclnt.ControlPing); !ok {
			out = append(out, msgString(m))
		}
	}
	f.sent = nil
	return out
}

// fakeChannel is a channel to the fake VPP: the driver's, or one a
// renderer got from Channel, which works only while the VPP process it
// was opened on lives.
type fakeChannel struct {
	f        *fakeVPP
	gen      int
	renderer bool
}

func (c *fakeChannel) Close() {}

func (c *fakeChannel) SetReplyTimeout(time.Duration) {}

func (c *fakeChannel) SubscribeNotification(chan api.Message, api.Message) (api.SubscriptionCtx, error) {
	return nil, errors.New("fake VPP: no notifications")
}

// gone reports whether the channel's VPP is gone; the caller holds c.f.mu.
func (c *fakeChannel) gone() bool { return c.f.down || (c.renderer && c.gen != c.f.gen) }

func (c *fakeChannel) CheckCompatiblity(msgs ...api.Message) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	var unknown []string
	for _, m := range msgs {
		if n := m.GetMessageName() + "_" + m.GetCrcString(); slices.Contains(c.f.unknown, n) {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	return &api.CompatibilityError{IncompatibleMessages: unknown}
}

type fakeReply struct {
	replies []api.Message
	err     error
}

func (r *fakeReply) ReceiveReply(msg api.Message) error {
	if r.err != nil {
		return r.err
	}
	reflect.ValueOf(msg).Elem().Set(reflect.ValueOf(r.replies[0]).Elem())
	if f := reflect.ValueOf(msg).Elem().FieldByName("Retval"); f.IsValid() {
		return api.RetvalToVPPApiError(int32(f.Int()))
	}
	return nil
}

type fakeMulti struct {
	replies []api.Message
	err     error
}

func (r *fakeMulti) ReceiveReply(msg api.Message) (bool, error) {
	if r.err != nil {
		return false, r.err
	}
	if len(r.replies) == 0 {
		return true, nil
	}
	reflect.ValueOf(msg).Elem().Set(reflect.ValueOf(r.replies[0]).Elem())
	r.replies = r.replies[1:]
	return false, nil
}

func (c *fakeChannel) SendRequest(msg api.Message) api.RequestCtx {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	c.f.sent = append(c.f.sent, msg)
	recordSent(msg)
	if c.gone() {
		return &fakeReply{err: errors.New("VPP API socket closed")}
	}
	reply, retval := c.f.handle(msg)
	if c.f.failWhen != nil {
		if rv := c.f.failWhen(msg); rv != 0 {
			c.f.failWhen = nil
			retval = rv
		}
	}
	if retval != 0 {
		reflect.ValueOf(reply).Elem().FieldByName("Retval").SetInt(int64(retval))
	}
	return &fakeReply{replies: []api.Message{reply}}
}

func (c *fakeChannel) SendMultiRequest(msg api.Message) api.MultiRequestCtx {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	c.f.sent = append(c.f.sent, msg)
	recordSent(msg)
	if c.gone() {
		return &fakeMulti{err: errors.New("VPP API socket closed")}
	}
	return &fakeMulti{replies: c.f.handleDump(msg)}
}

func (f *fakeVPP) add(i *fakeIf) *fakeIf {
	i.sw = f.next
	i.unnumbered = ^uint32(0)
	f.next++
	f.ifs[i.sw] = i
	return i
}

func (f *fakeVPP) byName(name string) *fakeIf {
	for _, i := range f.ifs {
		if i.name == name {
			return i
		}
	}
	return nil
}

func (f *fakeVPP) deleteIf(sw uint32) {
	delete(f.ifs, sw)
	// VPP removes the interface's features, not its uRPF configuration.
	delete(f.source.feature, sw)
	delete(f.natFeat, sw)
	for p, path := range f.routes {
		if path.SwIfIndex == sw {
			delete(f.routes, p)
		}
	}
}

// handle answers a request: the reply and its retval.
func (f *fakeVPP) handle(msg api.Message) (api.Message, int32) {
	if reply, retval, ok := f.handleACL(msg); ok {
		return reply, retval
	}
	if reply, retval, ok := f.handleSource(msg); ok {
		return reply, retval
	}
	if reply, retval, ok := f.handleSNAT(msg); ok {
		return reply, retval
	}
	if reply, retval, ok := f.handleHostPort(msg); ok {
		return reply, retval
	}
	if reply, retval, ok := f.handleCnat(msg); ok {
		return reply, retval
	}
	switch m := msg.(type) {
	case *memclnt.ControlPing:
		return &memclnt.ControlPingReply{VpePID: f.pid}, 0
	case *interfaces.CreateLoopback:
		i := f.add(&fakeIf{mac: net.HardwareAddr{0xde, 0xad, 0, 0, 0, byte(f.next)}})
		i.name = fmt.Sprintf("loop%d", i.sw)
		return &interfaces.CreateLoopbackReply{SwIfIndex: index(i.sw)}, 0
	case *interfaces.SwInterfaceTagAddDel:
		i := f.ifs[uint32(m.SwIfIndex)]
		if i == nil {
			return &interfaces.SwInterfaceTagAddDelReply{}, int32(api.INVALID_SW_IF_INDEX)
		}
		i.tag = m.Tag
		return &interfaces.SwInterfaceTagAddDelReply{}, 0
	case *interfaces.SwInterfaceSetFlags:
		i := f.ifs[uint32(m.SwIfIndex)]
		if i == nil {
			return &interfaces.SwInterfaceSetFlagsReply{}, int32(api.INVALID_SW_IF_INDEX)
		}
		i.up = m.Flags&interface_types.IF_STATUS_API_FLAG_ADMIN_UP != 0
		return &interfaces.SwInterfaceSetFlagsReply{}, 0
	case *interfaces.SwInterfaceSetUnnumbered:
		i, src := f.ifs[uint32(m.UnnumberedSwIfIndex)], f.ifs[uint32(m.SwIfIndex)]
		if i == nil || src == nil {
			return &interfaces.SwInterfaceSetUnnumberedReply{}, int32(api.INVALID_SW_IF_INDEX)
		}
		i.unnumbered = src.sw
		return &interfaces.SwInterfaceSetUnnumberedReply{}, 0
	case *interfaces.SwInterfaceAddDelAddress:
		i := f.ifs[uint32(m.SwIfIndex)]
		if i == nil {
			return &interfaces.SwInterfaceAddDelAddressReply{}, int32(api.INVALID_SW_IF_INDEX)
		}
		p := fromVPPPrefix(ip_types.Prefix(m.Prefix))
		if m.IsAdd {
			if slices.Contains(i.addrs, p) {
				return &interfaces.SwInterfaceAddDelAddressReply{}, int32(api.DUPLICATE_IF_ADDRESS)
			}
			i.addrs = append(i.addrs, p)
		} else {
			i.addrs = slices.DeleteFunc(i.addrs, func(q netip.Prefix) bool { return q == p })
		}
		return &interfaces.SwInterfaceAddDelAddressReply{}, 0
	case *ip.SwInterfaceIP6EnableDisable:
		i := f.ifs[uint32(m.SwIfIndex)]
		if i == nil {
			return &ip.SwInterfaceIP6EnableDisableReply{}, int32(api.INVALID_SW_IF_INDEX)
		}
		if m.Enable && i.ip6 {
			return &ip.SwInterfaceIP6EnableDisableReply{}, int32(api.VALUE_EXIST)
		}
		i.ip6 = m.Enable
		return &ip.SwInterfaceIP6EnableDisableReply{}, 0
	case *ip.SwInterfaceIP6SetLinkLocalAddress:
		return &ip.SwInterfaceIP6SetLinkLocalAddressReply{}, f.invalid(m.SwIfIndex)
	case *ip.IPRouteAddDel:
		p := fromVPPPrefix(m.Route.Prefix)
		if m.IsAdd {
			f.routes[p] = m.Route.Paths[0]
			return &ip.IPRouteAddDelReply{}, 0
		}
		if _, ok := f.routes[p]; !ok {
			return &ip.IPRouteAddDelReply{}, int32(api.NO_SUCH_ENTRY)
		}
		delete(f.routes, p)
		return &ip.IPRouteAddDelReply{}, 0
	case *ip_neighbor.IPNeighborAddDel:
		k := fmt.Sprintf("%d %s %s", m.Neighbor.SwIfIndex, fromVPPAddress(m.Neighbor.IPAddress), m.Neighbor.MacAddress)
		if m.IsAdd {
			f.neigh[k] = true
			return &ip_neighbor.IPNeighborAddDelReply{}, f.invalid(m.Neighbor.SwIfIndex)
		}
		if !f.neigh[k] {
			return &ip_neighbor.IPNeighborAddDelReply{}, int32(api.NO_SUCH_ENTRY)
		}
		delete(f.neigh, k)
		return &ip_neighbor.IPNeighborAddDelReply{}, 0
	case *tapv2.TapCreateV3:
		i := f.add(&fakeIf{tag: m.Tag, tap: m, mtu: m.HostMtuSize})
		i.name = fmt.Sprintf("tap%d", i.sw)
		if m.TapFlags&tapv2.TAP_API_FLAG_TUN == 0 {
			i.mac = net.HardwareAddr{0x02, 0xfe, 0, 0, 0, byte(i.sw)}
		}
		return &tapv2.TapCreateV3Reply{SwIfIndex: index(i.sw)}, 0
	case *tapv2.TapDeleteV2:
		i := f.ifs[uint32(m.SwIfIndex)]
		if i == nil || i.tap == nil {
			return &tapv2.TapDeleteV2Reply{}, int32(api.INVALID_SW_IF_INDEX)
		}
		f.deleteIf(i.sw)
		return &tapv2.TapDeleteV2Reply{}, 0
	case *af_packet.AfPacketCreateV3:
		if f.byName(afPacketName(m.HostIfName)) != nil {
			return &af_packet.AfPacketCreateV3Reply{}, int32(api.IF_ALREADY_EXISTS)
		}
		i := f.add(&fakeIf{name: afPacketName(m.HostIfName), hostIf: m.HostIfName, mac: m.HwAddr.ToMAC(), mtu: 1500})
		return &af_packet.AfPacketCreateV3Reply{SwIfIndex: index(i.sw)}, 0
	case *af_packet.AfPacketDelete:
		i := f.byName(afPacketName(m.HostIfName))
		if i == nil {
			return &af_packet.AfPacketDeleteReply{}, int32(api.INVALID_INTERFACE)
		}
		f.deleteIf(i.sw)
		return &af_packet.AfPacketDeleteReply{}, 0
	case *nat44_ed.Nat44EdPluginEnableDisable:
		if f.nat == m.Enable {
			return &nat44_ed.Nat44EdPluginEnableDisableReply{}, int32(api.FEATURE_ALREADY_ENABLED)
		}
		f.nat = m.Enable
		return &nat44_ed.Nat44EdPluginEnableDisableReply{}, 0
	case *nat44_ed.Nat44InterfaceAddDelFeature:
		if !f.nat {
			return &nat44_ed.Nat44InterfaceAddDelFeatureReply{}, int32(api.UNSUPPORTED)
		}
		sw := uint32(m.SwIfIndex)
		if f.ifs[sw] == nil {
			return &nat44_ed.Nat44InterfaceAddDelFeatureReply{}, int32(api.INVALID_SW_IF_INDEX)
		}
		if f.natFeat[sw] == nil {
			f.natFeat[sw] = map[nat_types.NatConfigFlags]bool{}
		}
		if m.IsAdd {
			if f.natFeat[sw][m.Flags] {
				return &nat44_ed.Nat44InterfaceAddDelFeatureReply{}, int32(api.VALUE_EXIST)
			}
			f.natFeat[sw][m.Flags] = true
		} else {
			if !f.natFeat[sw][m.Flags] {
				if len(f.natFeat[sw]) == 0 {
					return &nat44_ed.Nat44InterfaceAddDelFeatureReply{}, int32(api.NO_SUCH_ENTRY)
				}
				// VPP 25.10 removes an interface's one feature when asked
				// to remove the other: it answers success, forgets the
				// interface and leaves the feature's node in its arc.
				f.natBroken[sw] = true
				delete(f.natFeat, sw)
				return &nat44_ed.Nat44InterfaceAddDelFeatureReply{}, 0
			}
			delete(f.natFeat[sw], m.Flags)
		}
		return &nat44_ed.Nat44InterfaceAddDelFeatureReply{}, 0
	case *acl.ACLInterfaceSetACLList:
		if f.ifs[uint32(m.SwIfIndex)] == nil {
			return &acl.ACLInterfaceSetACLListReply{}, int32(api.INVALID_SW_IF_INDEX)
		}
		if int(m.Count) != len(m.Acls) || m.NInput > m.Count {
			return &acl.ACLInterfaceSetACLListReply{}, int32(api.INVALID_VALUE)
		}
		f.aclLists[uint32(m.SwIfIndex)] = append([]uint32{uint32(m.NInput)}, m.Acls...)
		return &acl.ACLInterfaceSetACLListReply{}, 0
	case *acl.ACLInterfaceAddDel:
		// acl.c: an addition appends; a removal moves the last ACL of
		// that side into the removed one's place (vec_del1).
		sw := uint32(m.SwIfIndex)
		if f.ifs[sw] == nil {
			return &acl.ACLInterfaceAddDelReply{}, int32(api.INVALID_SW_IF_INDEX)
		}
		l := f.aclLists[sw]
		if l == nil {
			l = []uint32{0}
		}
		in, out := slices.Clone(l[1:1+l[0]]), slices.Clone(l[1+l[0]:])
		side := &out
		if m.IsInput {
			side = &in
		}
		i := slices.Index(*side, m.ACLIndex)
		switch {
		case m.IsAdd && i >= 0:
			return &acl.ACLInterfaceAddDelReply{}, int32(api.ACL_IN_USE_OUTBOUND)
		case m.IsAdd:
			*side = append(*side, m.ACLIndex)
		case i < 0:
			return &acl.ACLInterfaceAddDelReply{}, int32(api.NO_SUCH_ENTRY)
		default:
			(*side)[i] = (*side)[len(*side)-1]
			*side = (*side)[:len(*side)-1]
		}
		f.aclLists[sw] = append(append([]uint32{uint32(len(in))}, in...), out...)
		return &acl.ACLInterfaceAddDelReply{}, 0
	}
	panic(fmt.Sprintf("fake VPP: no handler for %T", msg))
}

func (f *fakeVPP) invalid(sw interface_types.InterfaceIndex) int32 {
	if f.ifs[uint32(sw)] == nil {
		return int32(api.INVALID_SW_IF_INDEX)
	}
	return 0
}

func (f *fakeVPP) sortedIfs() []*fakeIf {
	var out []*fakeIf
	for _, i := range f.ifs {
		out = append(out, i)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].sw < out[b].sw })
	return out
}

func (f *fakeVPP) handleDump(msg api.Message) []api.Message {
	if out, ok := f.handleACLDump(msg); ok {
		return out
	}
	if out, ok := f.handleSourceDump(msg); ok {
		return out
	}
	if out, ok := f.handleSNATDump(msg); ok {
		return out
	}
	if out, ok := f.handleHostPortDump(msg); ok {
		return out
	}
	var out []api.Message
	switch m := msg.(type) {
	case *interfaces.SwInterfaceDump:
		for _, i := range f.sortedIfs() {
			if m.SwIfIndex != ^interface_types.InterfaceIndex(0) && uint32(m.SwIfIndex) != i.sw {
				continue
			}
			d := &interfaces.SwInterfaceDetails{SwIfIndex: index(i.sw), InterfaceName: i.name, Tag: i.tag, Mtu: []uint32{i.mtu, 0, 0, 0}}
			if i.up {
				d.Flags = interface_types.IF_STATUS_API_FLAG_ADMIN_UP
			}
			if i.mac != nil {
				copy(d.L2Address[:], i.mac)
			}
			out = append(out, d)
		}
	case *ip.IPAddressDump:
		if i := f.ifs[uint32(m.SwIfIndex)]; i != nil {
			for _, p := range i.addrs {
				if p.Addr().Is6() == m.IsIPv6 {
					out = append(out, &ip.IPAddressDetails{SwIfIndex: m.SwIfIndex, Prefix: ip_types.AddressWithPrefix(vppapi.Prefix(p))})
				}
			}
		}
	case *fib.FibSourceDump:
		for _, s := range fakeFIBSources {
			out = append(out, &fib.FibSourceDetails{Src: s})
		}
	case *ip.IPRouteV2Dump:
		// The routes added through the API, and the entries VPP's plugins
		// make (source fakeSourceRR), as VPP dumps them: every source
		// with Src 0, else that source's.
		for _, rs := range []struct {
			src    uint8
			routes map[netip.Prefix]fib_types.FibPath
		}{{fakeSourceAPI, f.routes}, {fakeSourceRR, f.otherRoutes}} {
			if m.Src != 0 && m.Src != rs.src {
				continue
			}
			var ps []netip.Prefix
			for p := range rs.routes {
				if p.Addr().Is6() == m.Table.IsIP6 {
					ps = append(ps, p)
				}
			}
			slices.SortFunc(ps, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
			for _, p := range ps {
				out = append(out, &ip.IPRouteV2Details{Route: ip.IPRouteV2{Prefix: vppapi.Prefix(p), Src: rs.src, NPaths: 1, Paths: []fib_types.FibPath{rs.routes[p]}}})
			}
		}
	case *nat44_ed.Nat44InterfaceDump:
		var sws []uint32
		for sw, fs := range f.natFeat {
			if len(fs) > 0 {
				sws = append(sws, sw)
			}
		}
		slices.Sort(sws)
		for _, sw := range sws {
			var flags nat_types.NatConfigFlags
			if f.natFeat[sw][nat_types.NAT_IS_INSIDE] {
				flags |= nat_types.NAT_IS_INSIDE
			}
			if f.natFeat[sw][0] {
				flags |= nat_types.NAT_IS_OUTSIDE
			}
			out = append(out, &nat44_ed.Nat44InterfaceDetails{SwIfIndex: index(sw), Flags: flags})
		}
	case *tapv2.SwInterfaceTapV2Dump:
		for _, i := range f.sortedIfs() {
			if i.tap != nil {
				out = append(out, &tapv2.SwInterfaceTapV2Details{SwIfIndex: i.sw, HostIfName: i.tap.HostIfName, HostNamespace: i.tap.HostNamespace, HostMtuSize: i.tap.HostMtuSize})
			}
		}
	default:
		panic(fmt.Sprintf("fake VPP: no dump handler for %T", msg))
	}
	return out
}

// msgString renders a request with the fields that matter, for exact
// comparisons that stay readable.
func msgString(msg api.Message) string {
	if s, ok := guardMsgString(msg); ok {
		return s
	}
	if s, ok := sourceMsgString(msg); ok {
		return s
	}
	if s, ok := snatMsgString(msg); ok {
		return s
	}
	if s, ok := hostPortMsg(msg); ok {
		return s
	}
	if s, ok := cnatMsgString(msg); ok {
		return s
	}
	switch m := msg.(type) {
	case *nat44_ed.Nat44InterfaceDump:
		return "nat44_interface_dump"
	case *interfaces.SwInterfaceDump:
		if m.SwIfIndex == ^interface_types.InterfaceIndex(0) {
			return "sw_interface_dump all"
		}
		return fmt.Sprintf("sw_interface_dump %d", m.SwIfIndex)
	case *interfaces.CreateLoopback:
		return "create_loopback"
	case *interfaces.SwInterfaceTagAddDel:
		return fmt.Sprintf("sw_interface_tag_add_del add=%t %d %q", m.IsAdd, m.SwIfIndex, m.Tag)
	case *interfaces.SwInterfaceSetFlags:
		return fmt.Sprintf("sw_interface_set_flags %d flags=%d", m.SwIfIndex, m.Flags)
	case *interfaces.SwInterfaceSetUnnumbered:
		return fmt.Sprintf("sw_interface_set_unnumbered add=%t %d uses %d", m.IsAdd, m.UnnumberedSwIfIndex, m.SwIfIndex)
	case *interfaces.SwInterfaceAddDelAddress:
		return fmt.Sprintf("sw_interface_add_del_address add=%t %d %s", m.IsAdd, m.SwIfIndex, fromVPPPrefix(ip_types.Prefix(m.Prefix)))
	case *ip.SwInterfaceIP6EnableDisable:
		return fmt.Sprintf("sw_interface_ip6_enable_disable %d enable=%t", m.SwIfIndex, m.Enable)
	case *ip.SwInterfaceIP6SetLinkLocalAddress:
		return fmt.Sprintf("sw_interface_ip6_set_link_local_address %d %s", m.SwIfIndex, netip.AddrFrom16(m.IP))
	case *ip.IPAddressDump:
		return fmt.Sprintf("ip_address_dump %d ip6=%t", m.SwIfIndex, m.IsIPv6)
	case *fib.FibSourceDump:
		return "fib_source_dump"
	case *ip.IPRouteV2Dump:
		return fmt.Sprintf("ip_route_v2_dump src=%d table=%d ip6=%t", m.Src, m.Table.TableID, m.Table.IsIP6)
	case *ip.IPRouteAddDel:
		return fmt.Sprintf("ip_route_add_del add=%t %s %s", m.IsAdd, fromVPPPrefix(m.Route.Prefix), pathString(m.Route.Paths))
	case *ip_neighbor.IPNeighborAddDel:
		return fmt.Sprintf("ip_neighbor_add_del add=%t %d %s %s flags=%d", m.IsAdd, m.Neighbor.SwIfIndex,
			fromVPPAddress(m.Neighbor.IPAddress), m.Neighbor.MacAddress, m.Neighbor.Flags)
	case *tapv2.TapCreateV3:
		return fmt.Sprintf("tap_create_v3 tag=%q host_if=%q ns=%q(%t) mtu=%d(%t) flags=%d random_mac=%t queues=%d/%d rings=%d/%d",
			m.Tag, m.HostIfName, m.HostNamespace, m.HostNamespaceSet, m.HostMtuSize, m.HostMtuSet, m.TapFlags,
			m.UseRandomMac, m.NumRxQueues, m.NumTxQueues, m.RxRingSz, m.TxRingSz)
	case *tapv2.TapDeleteV2:
		return fmt.Sprintf("tap_delete_v2 %d", m.SwIfIndex)
	case *tapv2.SwInterfaceTapV2Dump:
		return "sw_interface_tap_v2_dump"
	case *af_packet.AfPacketCreateV3:
		return fmt.Sprintf("af_packet_create_v3 host_if=%q mode=%d mac=%s random=%t frames=%dx%d/%dx%d flags=%d",
			m.HostIfName, m.Mode, m.HwAddr, m.UseRandomHwAddr, m.RxFramesPerBlock, m.RxFrameSize, m.TxFramesPerBlock, m.TxFrameSize, m.Flags)
	case *af_packet.AfPacketDelete:
		return fmt.Sprintf("af_packet_delete host_if=%q", m.HostIfName)
	case *nat44_ed.Nat44EdPluginEnableDisable:
		return fmt.Sprintf("nat44_ed_plugin_enable_disable enable=%t sessions=%d", m.Enable, m.Sessions)
	case *nat44_ed.Nat44InterfaceAddDelFeature:
		return fmt.Sprintf("nat44_interface_add_del_feature add=%t %d flags=%d", m.IsAdd, m.SwIfIndex, m.Flags)
	case *acl.ACLInterfaceSetACLList:
		return fmt.Sprintf("acl_interface_set_acl_list %d count=%d n_input=%d acls=%v", m.SwIfIndex, m.Count, m.NInput, m.Acls)
	case *acl.ACLInterfaceAddDel:
		return fmt.Sprintf("acl_interface_add_del add=%t input=%t %d acl=%d", m.IsAdd, m.IsInput, m.SwIfIndex, m.ACLIndex)
	case *memclnt.ControlPing:
		return "control_ping"
	}
	return fmt.Sprintf("%T", msg)
}

func pathString(paths []fib_types.FibPath) string {
	var s []string
	for _, p := range paths {
		switch p.Type {
		case fib_types.FIB_API_PATH_TYPE_DROP:
			s = append(s, "drop")
		default:
			var nh netip.Addr
			if p.Proto == fib_types.FIB_API_PATH_NH_PROTO_IP4 {
				nh = netip.AddrFrom4(p.Nh.Address.GetIP4())
			} else {
				nh = netip.AddrFrom16(p.Nh.Address.GetIP6())
			}
			s = append(s, fmt.Sprintf("via %s %d", nh, p.SwIfIndex))
		}
	}
	return strings.Join(s, ",")
}

// sentNames collects the names of every request any test made the driver
// send; TestMain checks it against messages().
var sentNames sync.Map

func recordSent(m api.Message) { sentNames.Store(m.GetMessageName(), true) }

// fakeKernel records the kernel calls and answers them from a small model
// of the node's pod veths.
type fakeKernel struct {
	mu     sync.Mutex
	calls  []string
	veths  map[string]dataplane.PodKey
	failOn string // a call name that fails
	blocks []netip.Prefix
	// mtus are the node namespace's links' MTUs that LinkMTU reads (a
	// read: not recorded among the calls).
	mtus map[string]int
}

func newFakeKernel() *fakeKernel { return &fakeKernel{veths: map[string]dataplane.PodKey{}} }

func (k *fakeKernel) record(format string, args ...any) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	c := fmt.Sprintf(format, args...)
	k.calls = append(k.calls, c)
	if k.failOn != "" && strings.HasPrefix(c, k.failOn) {
		return fmt.Errorf("kernel says no to %s", c)
	}
	return nil
}

func (k *fakeKernel) take() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	c := k.calls
	k.calls = nil
	return c
}

func (k *fakeKernel) CreateHostVeth(_ context.Context, mtu int) error {
	return k.record("CreateHostVeth mtu=%d", mtu)
}
func (k *fakeKernel) LinkMTU(_ context.Context, name string) (int, bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	mtu, ok := k.mtus[name]
	return mtu, ok, nil
}
func (k *fakeKernel) SetUpHost(context.Context) error { return k.record("SetUpHost") }
func (k *fakeKernel) SyncBlockRoutes(_ context.Context, blocks []netip.Prefix) ([]netip.Prefix, error) {
	if err := k.record("SyncBlockRoutes %v", blocks); err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	var removed []netip.Prefix
	for _, b := range k.blocks {
		if !slices.Contains(blocks, b) {
			removed = append(removed, b)
		}
	}
	k.blocks = slices.Clone(blocks)
	return removed, nil
}
func (k *fakeKernel) SyncServiceNetwork(_ context.Context, net ServiceNetwork) error {
	return k.record("SyncServiceNetwork cidrs=%v source=%s sinks=%t", net.CIDRs, net.Source, net.Sinks)
}
func (k *fakeKernel) SyncHostPorts(_ context.Context, dnats []HostPortDNAT) error {
	var s []string
	for _, h := range dnats {
		s = append(s, fmt.Sprintf("%s/%d/%d->%s:%d", h.Addr, h.Protocol, h.Port, h.PodAddr, h.PodPort))
	}
	return k.record("SyncHostPorts %v", s)
}
func (k *fakeKernel) CreatePodVeth(_ context.Context, pod dataplane.Pod, node string, mac net.HardwareAddr, mtu int) error {
	if err := k.record("CreatePodVeth %s %s/%s mac=%s mtu=%d", node, pod.Netns, pod.IfName, mac, mtu); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.veths[node] = pod.PodKey
	return nil
}
func (k *fakeKernel) PodVeths(context.Context) (map[string]dataplane.PodKey, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string]dataplane.PodKey{}
	for n, key := range k.veths {
		out[n] = key
	}
	return out, nil
}
func (k *fakeKernel) DeleteNodeLink(_ context.Context, name string) error {
	if err := k.record("DeleteNodeLink %s", name); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.veths, name)
	return nil
}
func (k *fakeKernel) MoveToPod(_ context.Context, from string, pod dataplane.Pod) error {
	return k.record("MoveToPod %s -> %s/%s", from, pod.Netns, pod.IfName)
}
func (k *fakeKernel) ConfigurePod(_ context.Context, pod dataplane.Pod) error {
	if pod.NoChecksumOffload {
		return k.record("ConfigurePod %s/%s %s %s no-checksum-offload", pod.Netns, pod.IfName, pod.IPv4, pod.IPv6)
	}
	return k.record("ConfigurePod %s/%s %s %s", pod.Netns, pod.IfName, pod.IPv4, pod.IPv6)
}
func (k *fakeKernel) CheckPod(_ context.Context, pod dataplane.Pod, typ InterfaceType, mtu int) error {
	return k.record("CheckPod %s/%s %s mtu=%d", pod.Netns, pod.IfName, typ, mtu)
}
