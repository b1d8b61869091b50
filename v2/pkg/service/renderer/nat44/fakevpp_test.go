package nat44

import (
	"context"
	"fmt"
	"io"
	"log"
	"maps"
	"net/netip"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.fd.io/govpp/adapter/mock"
	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/acl"
	"go.fd.io/govpp/binapi/memclnt"
	"go.fd.io/govpp/binapi/nat44_ed"
	"go.fd.io/govpp/binapi/nat_types"
	"go.fd.io/govpp/core"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
)

func TestMain(m *testing.M) {
	// GoVPP's mock adapter logs every reply with the standard logger.
	log.SetOutput(io.Discard)
	os.Exit(m.Run())
}

// fakeVPP answers the renderer's requests through GoVPP's mock adapter as
// VPP 25.10's NAT44-ED and ACL plugins do (the return values and quirks of
// nat44_ed.c, nat44_ed_api.c and acl.c), keeps what they would hold, and
// records every request (control pings aside).
type fakeVPP struct {
	t       *testing.T
	mock    *vpptest.Mock
	adapter *mock.VppAdapter
	conn    *core.Connection

	mu       sync.Mutex
	requests []api.Message
	// lb and static are the mappings by frontend; lbOrder keeps the order
	// of locals as VPP's pool would (new ones at the end).
	lb         map[mappingKey]*nat44_ed.Nat44AddDelLbStaticMapping
	static     map[mappingKey]*nat44_ed.Nat44AddDelStaticMappingV2
	twiceNAT   []netip.Addr
	forwarding bool
	acls       map[uint32]*acl.ACLAddReplace
	nextACL    uint32
	// fail, when set, may refuse a request with a retval before it is
	// handled.
	fail func(api.Message) api.VPPApiError
}

func newFakeVPP(t *testing.T) *fakeVPP {
	m := vpptest.NewMock(t, Messages())
	f := &fakeVPP{t: t, mock: m, adapter: m.Adapter,
		lb: map[mappingKey]*nat44_ed.Nat44AddDelLbStaticMapping{}, static: map[mappingKey]*nat44_ed.Nat44AddDelStaticMappingV2{},
		acls: map[uint32]*acl.ACLAddReplace{}, nextACL: 3}
	f.adapter.MockReplyHandler(f.handle)
	conn, err := core.Connect(f.adapter)
	if err != nil {
		t.Fatal(err)
	}
	f.conn = conn
	t.Cleanup(conn.Disconnect)
	return f
}

func (f *fakeVPP) handle(dto mock.MessageDTO) ([]byte, uint16, bool) {
	// The mock adapter gives control_ping a fixed ID without a name.
	if vpptest.IsControlPing(dto) {
		return f.mock.Reply(dto, &memclnt.ControlPingReply{}, 0)
	}
	req, ok := f.mock.Decode(dto)
	if !ok {
		return nil, 0, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, normalize(req))
	if details, ok := f.dump(req); ok {
		// The details go through the adapter's reply queue, which answers
		// with the request's context; the control ping that follows ends
		// the dump.
		f.adapter.MockReply(details...)
		return nil, 0, false
	}
	var rv api.VPPApiError
	if f.fail != nil {
		rv = f.fail(req)
	}
	reply := f.mock.NewReply(dto.MsgName)
	if rv == 0 {
		rv = f.apply(req, reply)
	}
	return f.mock.Reply(dto, reply, rv)
}

// dump answers the dump requests.
func (f *fakeVPP) dump(req api.Message) ([]api.Message, bool) {
	var out []api.Message
	switch m := req.(type) {
	case *nat44_ed.Nat44LbStaticMappingDump:
		for _, k := range slices.SortedFunc(maps.Keys(f.lb), compareKeys) {
			x := f.lb[k]
			// VPP 25.10 does not return the affinity.
			out = append(out, &nat44_ed.Nat44LbStaticMappingDetails{ExternalAddr: x.ExternalAddr, ExternalPort: x.ExternalPort,
				Protocol: x.Protocol, Flags: x.Flags, Tag: x.Tag, LocalNum: uint32(len(x.Locals)), Locals: slices.Clone(x.Locals)})
		}
	case *nat44_ed.Nat44StaticMappingDump:
		for _, k := range slices.SortedFunc(maps.Keys(f.static), compareKeys) {
			x := f.static[k]
			out = append(out, &nat44_ed.Nat44StaticMappingDetails{Flags: x.Flags, LocalIPAddress: x.LocalIPAddress,
				ExternalIPAddress: x.ExternalIPAddress, Protocol: x.Protocol, LocalPort: x.LocalPort, ExternalPort: x.ExternalPort,
				ExternalSwIfIndex: noInterface, VrfID: x.VrfID, Tag: x.Tag})
		}
	case *nat44_ed.Nat44AddressDump:
		for _, a := range f.twiceNAT {
			out = append(out, &nat44_ed.Nat44AddressDetails{IPAddress: ip4(a), VrfID: ^uint32(0), Flags: nat_types.NAT_IS_TWICE_NAT})
		}
	case *acl.ACLDump:
		for _, i := range slices.Sorted(maps.Keys(f.acls)) {
			if m.ACLIndex == ^uint32(0) || m.ACLIndex == i {
				a := f.acls[i]
				out = append(out, &acl.ACLDetails{ACLIndex: i, Tag: a.Tag, Count: uint32(len(a.R)), R: slices.Clone(a.R)})
			}
		}
	default:
		return nil, false
	}
	return out, true
}

// apply changes the fake's state as VPP would, returning VPP's retval.
func (f *fakeVPP) apply(req, reply api.Message) api.VPPApiError {
	switch m := req.(type) {
	case *nat44_ed.Nat44ForwardingEnableDisable:
		f.forwarding = m.Enable
	case *nat44_ed.Nat44AddDelAddressRange:
		a := fromIP4(m.FirstIPAddress)
		i := slices.Index(f.twiceNAT, a)
		switch {
		case m.IsAdd && i >= 0:
			return api.VALUE_EXIST
		case m.IsAdd:
			f.twiceNAT = append(f.twiceNAT, a)
		case i < 0:
			return api.NO_SUCH_ENTRY
		default:
			f.twiceNAT = slices.Delete(f.twiceNAT, i, i+1)
		}
	case *nat44_ed.Nat44AddDelLbStaticMapping:
		k := mappingKey{fromIP4(m.ExternalAddr), m.Protocol, m.ExternalPort}
		if !m.IsAdd {
			if _, ok := f.static[k]; ok {
				return api.INVALID_VALUE
			}
			if _, ok := f.lb[k]; !ok {
				return api.NO_SUCH_ENTRY
			}
			delete(f.lb, k)
			return 0
		}
		if f.lb[k] != nil || f.static[k] != nil {
			return api.VALUE_EXIST
		}
		if len(m.Locals) < 2 {
			return api.INVALID_VALUE
		}
		f.checkSum(k, m.Locals)
		x := *m
		if x.Flags&nat_types.NAT_IS_TWICE_NAT != 0 {
			x.Flags &^= nat_types.NAT_IS_SELF_TWICE_NAT // the API handler's "else if"
		}
		x.Locals = slices.Clone(m.Locals)
		f.lb[k] = &x
	case *nat44_ed.Nat44AddDelStaticMappingV2:
		k := mappingKey{fromIP4(m.ExternalIPAddress), m.Protocol, m.ExternalPort}
		if !m.IsAdd {
			if _, ok := f.lb[k]; ok {
				return 0 // VPP answers 0 and deletes nothing
			}
			if _, ok := f.static[k]; !ok {
				return api.NO_SUCH_ENTRY
			}
			delete(f.static, k)
			return 0
		}
		if f.lb[k] != nil || f.static[k] != nil {
			return api.VALUE_EXIST
		}
		x := *m
		f.static[k] = &x
	case *nat44_ed.Nat44LbStaticMappingAddDelLocal:
		k := mappingKey{fromIP4(m.ExternalAddr), m.Protocol, m.ExternalPort}
		x := f.lb[k]
		if x == nil {
			if f.static[k] != nil {
				return api.INVALID_VALUE
			}
			return api.NO_SUCH_ENTRY
		}
		i := slices.IndexFunc(x.Locals, func(l nat44_ed.Nat44LbAddrPort) bool {
			return l.Addr == m.Local.Addr && l.Port == m.Local.Port && l.VrfID == m.Local.VrfID
		})
		switch {
		case m.IsAdd && i >= 0:
			return api.VALUE_EXIST
		case m.IsAdd:
			x.Locals = append(x.Locals, m.Local)
			f.checkSum(k, x.Locals)
		case i < 0:
			return api.NO_SUCH_ENTRY
		case len(x.Locals) < 3:
			return api.UNSPECIFIED
		default:
			x.Locals = slices.Delete(x.Locals, i, i+1)
		}
		x.LocalNum = uint32(len(x.Locals))
	case *acl.ACLAddReplace:
		i := m.ACLIndex
		if i == ^uint32(0) {
			i = f.nextACL
			f.nextACL++
		} else if f.acls[i] == nil {
			return api.NO_SUCH_ENTRY
		}
		x := *m
		x.R = slices.Clone(m.R)
		f.acls[i] = &x
		reply.(*acl.ACLAddReplaceReply).ACLIndex = i
	case *acl.ACLDel:
		if f.acls[m.ACLIndex] == nil {
			return api.NO_SUCH_ENTRY
		}
		delete(f.acls, m.ACLIndex)
	default:
		f.t.Errorf("fake VPP: no handler for %s", req.GetMessageName())
		return api.UNSPECIFIED
	}
	return 0
}

// checkSum fails the test when the probabilities of a mapping's locals
// would overflow the u8 in which VPP keeps their running sum (VPP accepts
// them, then picks wrongly or divides by zero).
func (f *fakeVPP) checkSum(k mappingKey, ls []nat44_ed.Nat44LbAddrPort) {
	sum := 0
	for _, l := range ls {
		sum += int(l.Probability)
	}
	if sum > 255 || sum == 0 {
		f.t.Errorf("fake VPP: LB mapping %s: probabilities sum to %d, which VPP's u8 cannot hold", k, sum)
	}
}

// take returns the requests recorded since the last take.
func (f *fakeVPP) take() []api.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.requests
	f.requests = nil
	return r
}

func (f *fakeVPP) setFail(fail func(api.Message) api.VPPApiError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = fail
}

// normalize makes decoded empty lists nil, as the tests write them.
func normalize(m api.Message) api.Message {
	switch x := m.(type) {
	case *nat44_ed.Nat44AddDelLbStaticMapping:
		if len(x.Locals) == 0 {
			x.Locals = nil
		}
	case *acl.ACLAddReplace:
		if len(x.R) == 0 {
			x.R = nil
		}
	}
	return m
}

// fakeDataplane gives channels on the fake VPP's connection and records the
// calls of the dataplane's services API.
type fakeDataplane struct {
	vpp   *fakeVPP
	ifs   vpp.NodeInterfaces
	calls []string
	// wrap, when set, wraps each channel handed out.
	wrap func(api.Channel) api.Channel
}

func (d *fakeDataplane) Channel(ctx context.Context, maxInFlight int) (api.Channel, vpp.NodeInterfaces, error) {
	ch, err := d.vpp.conn.NewAPIChannelBuffered(maxInFlight+16, maxInFlight+16)
	if err != nil {
		return nil, d.ifs, err
	}
	if d.wrap != nil {
		ch = d.wrap(ch)
	}
	return ch, d.ifs, nil
}

func (d *fakeDataplane) SetNodeNATRole(ctx context.Context, iface vpp.NodeInterface, role vpp.NATRole) error {
	d.calls = append(d.calls, fmt.Sprintf("SetNodeNATRole %s %s", iface, role))
	return nil
}

func (d *fakeDataplane) SetPodNATRoles(ctx context.Context, backends []netip.Addr) error {
	d.calls = append(d.calls, fmt.Sprintf("SetPodNATRoles %v", backends))
	return nil
}

func (d *fakeDataplane) SetServiceNetwork(ctx context.Context, net vpp.ServiceNetwork) error {
	call := fmt.Sprintf("SetServiceNetwork %v %v sinks=%v", net.CIDRs, net.Source, net.Sinks)
	for _, f := range net.Refused {
		call += fmt.Sprintf(" refused=%v/%d/%d", f.Addr, f.Protocol, f.Port)
	}
	for _, np := range net.NodePorts {
		call += fmt.Sprintf(" nodeport=%d/%d->%v:%d", np.Protocol, np.Port, np.ClusterIP, np.ClusterPort)
	}
	d.calls = append(d.calls, call)
	return nil
}

func (d *fakeDataplane) SetInterfaceACLs(ctx context.Context, inc vpp.Incarnation, iface vpp.NodeInterface, owner vpp.ACLOwner, input []uint32) error {
	d.calls = append(d.calls, fmt.Sprintf("SetInterfaceACLs %d %s %d %v", inc, iface, owner, input))
	return nil
}

func (d *fakeDataplane) take() []string {
	c := d.calls
	d.calls = nil
	return c
}

// expectRequests compares the requests VPP got with want, message by
// message.
func expectRequests(t *testing.T, got, want []api.Message) {
	t.Helper()
	for i := 0; i < max(len(got), len(want)); i++ {
		switch {
		case i >= len(got):
			t.Errorf("request %d: missing %s %+v", i, want[i].GetMessageName(), want[i])
		case i >= len(want):
			t.Errorf("request %d: unexpected %s %+v", i, got[i].GetMessageName(), got[i])
		case !reflect.DeepEqual(got[i], want[i]):
			t.Errorf("request %d:\n got %s %+v\nwant %s %+v", i, got[i].GetMessageName(), got[i], want[i].GetMessageName(), want[i])
		}
	}
}

func checkCalls(t *testing.T, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Errorf("dataplane calls:\n got %s\nwant %s", strings.Join(got, "\n     "), strings.Join(want, "\n     "))
	}
}
