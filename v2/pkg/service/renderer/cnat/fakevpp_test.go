package cnat

import (
	"context"
	"io"
	"log"
	"maps"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"

	"go.fd.io/govpp/adapter/mock"
	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/acl"
	"go.fd.io/govpp/binapi/cnat"
	"go.fd.io/govpp/binapi/interface_types"
	"go.fd.io/govpp/binapi/ip_types"
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
// VPP 25.10's cnat plugin does (cnat_api.c, cnat_translation.c), keeps
// what it would hold and records every request (control pings aside).
type fakeVPP struct {
	t       *testing.T
	mock    *vpptest.Mock
	adapter *mock.VppAdapter
	conn    *core.Connection

	mu       sync.Mutex
	requests []api.Message
	// byKey holds the translations; their ID field is VPP's index.
	byKey  map[key]*cnat.CnatTranslation
	nextID uint32
	// acls are the ACL plugin's ACLs by index.
	acls    map[uint32]*acl.ACLAddReplace
	nextACL uint32
	// fail, when set, may refuse a request with a retval before it is
	// handled.
	fail func(api.Message) api.VPPApiError

	// The dataplane's side.
	inc      vpp.Incarnation
	networks []vpp.ServiceNetwork
	snats    []vpp.CnatSNAT
	// lists are the renderer's input ACLs by node interface.
	lists map[vpp.NodeInterface][]uint32
	// nat44 are NAT44-ED's static mappings (plain and load-balancing),
	// by external address, protocol and port.
	nat44 map[key]nat44Mapping
}

// nat44Mapping is a NAT44-ED static mapping as VPP 25.10 dumps it.
type nat44Mapping struct {
	lb    bool
	flags uint8
	local netip.Addr
	tag   string
}

func newFakeVPP(t *testing.T) *fakeVPP {
	m := vpptest.NewMock(t, append(Messages(), nat44Messages()...))
	f := &fakeVPP{t: t, mock: m, adapter: m.Adapter, byKey: map[key]*cnat.CnatTranslation{}, inc: 1, nat44: map[key]nat44Mapping{},
		acls: map[uint32]*acl.ACLAddReplace{}, nextACL: 5, lists: map[vpp.NodeInterface][]uint32{}}
	f.adapter.MockReplyHandler(f.handle)
	conn, err := core.Connect(f.adapter)
	if err != nil {
		t.Fatal(err)
	}
	f.conn = conn
	t.Cleanup(conn.Disconnect)
	return f
}

func (f *fakeVPP) Channel(context.Context, int) (api.Channel, vpp.NodeInterfaces, error) {
	ch, err := f.conn.NewAPIChannel()
	return ch, vpp.NodeInterfaces{Incarnation: f.inc, Uplink: 1, HostInterconnect: 2, Loopback: 3}, err
}

func (f *fakeVPP) SetServiceNetwork(_ context.Context, n vpp.ServiceNetwork) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.networks = append(f.networks, n)
	return nil
}

func (f *fakeVPP) SetCnatPods(_ context.Context, s vpp.CnatSNAT) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snats = append(f.snats, s)
	return nil
}

func (f *fakeVPP) SetInterfaceACLs(_ context.Context, inc vpp.Incarnation, iface vpp.NodeInterface, owner vpp.ACLOwner, input []uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if owner != vpp.ACLServices || inc != f.inc {
		f.t.Errorf("SetInterfaceACLs owner %v incarnation %d (VPP's is %d)", owner, inc, f.inc)
	}
	sw := map[vpp.NodeInterface]interface_types.InterfaceIndex{vpp.Uplink: 1, vpp.HostInterconnect: 2}[iface]
	f.requests = append(f.requests, &acl.ACLInterfaceSetACLList{SwIfIndex: sw, Acls: input})
	f.lists[iface] = input
	return nil
}

// restart is a new VPP: empty, another incarnation.
func (f *fakeVPP) restart() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.byKey)
	clear(f.acls)
	clear(f.lists)
	clear(f.nat44)
	f.inc++
}

func (f *fakeVPP) handle(dto mock.MessageDTO) ([]byte, uint16, bool) {
	if vpptest.IsControlPing(dto) {
		return f.mock.Reply(dto, &memclnt.ControlPingReply{}, 0)
	}
	req, ok := f.mock.Decode(dto)
	if !ok {
		return nil, 0, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, req)
	if _, ok := req.(*acl.ACLDump); ok {
		var out []api.Message
		for _, i := range slices.Sorted(maps.Keys(f.acls)) {
			a := f.acls[i]
			out = append(out, &acl.ACLDetails{ACLIndex: i, Tag: a.Tag, Count: uint32(len(a.R)), R: slices.Clone(a.R)})
		}
		f.adapter.MockReply(out...)
		return nil, 0, false
	}
	switch req.(type) {
	case *nat44_ed.Nat44LbStaticMappingDump, *nat44_ed.Nat44StaticMappingDump:
		_, lb := req.(*nat44_ed.Nat44LbStaticMappingDump)
		var out []api.Message
		for _, k := range slices.SortedFunc(maps.Keys(f.nat44), compareKeys) {
			m := f.nat44[k]
			switch {
			case m.lb != lb:
			case lb:
				out = append(out, &nat44_ed.Nat44LbStaticMappingDetails{ExternalAddr: ip4(k.Addr), ExternalPort: k.Port, Protocol: k.Proto,
					Flags: nat_types.NatConfigFlags(m.flags), Tag: m.tag})
			default:
				out = append(out, &nat44_ed.Nat44StaticMappingDetails{ExternalIPAddress: ip4(k.Addr), ExternalPort: k.Port, Protocol: k.Proto,
					LocalIPAddress: ip4(m.local), LocalPort: k.Port, Flags: nat_types.NatConfigFlags(m.flags), Tag: m.tag})
			}
		}
		f.adapter.MockReply(out...)
		return nil, 0, false
	}
	if _, ok := req.(*cnat.CnatTranslationDump); ok {
		var out []api.Message
		for _, k := range slices.SortedFunc(maps.Keys(f.byKey), compareKeys) {
			x := *f.byKey[k]
			// VPP 25.10 returns neither the flags, nor is_real_ip, nor
			// the flow hash; a path's flags are its tracker's (1: active).
			x.Flags, x.IsRealIP, x.FlowHashConfig = 0, 0, 0
			x.Paths = slices.Clone(x.Paths)
			for i := range x.Paths {
				x.Paths[i].Flags = 1
			}
			out = append(out, &cnat.CnatTranslationDetails{Translation: x})
		}
		f.adapter.MockReply(out...)
		return nil, 0, false
	}
	var rv api.VPPApiError
	if f.fail != nil {
		rv = f.fail(req)
	}
	reply := f.mock.NewReply(dto.MsgName)
	if rv == 0 {
		switch m := req.(type) {
		case *cnat.CnatTranslationUpdate:
			tr := m.Translation
			if len(tr.Paths) == 0 {
				// vec_validate (paths, n_paths - 1) on a u32: VPP dies.
				f.t.Errorf("fake VPP: translation of %v without paths: VPP 25.10 dies of it", tr.Vip)
			}
			k := key{endpointAddr(tr.Vip), uint8(tr.IPProto), tr.Vip.Port}
			if old, ok := f.byKey[k]; ok {
				// The LB type and hash stay those of the creation.
				tr.ID, tr.LbType, tr.FlowHashConfig = old.ID, old.LbType, old.FlowHashConfig
			} else {
				tr.ID = f.nextID
				f.nextID++
			}
			f.byKey[k] = &tr
			reply.(*cnat.CnatTranslationUpdateReply).ID = tr.ID
		case *acl.ACLAddReplace:
			i := m.ACLIndex
			if i == ^uint32(0) {
				i = f.nextACL
				f.nextACL++
			} else if f.acls[i] == nil {
				rv = api.INVALID_VALUE
				break
			}
			f.acls[i] = m
			reply.(*acl.ACLAddReplaceReply).ACLIndex = i
		case *acl.ACLDel:
			if f.acls[m.ACLIndex] == nil {
				rv = api.INVALID_VALUE
				break
			}
			delete(f.acls, m.ACLIndex)
		case *nat44_ed.Nat44AddDelLbStaticMapping:
			rv = f.delNAT44(key{netip.AddrFrom4(m.ExternalAddr), m.Protocol, m.ExternalPort}, true, uint8(m.Flags), m.IsAdd)
		case *nat44_ed.Nat44AddDelStaticMappingV2:
			rv = f.delNAT44(key{netip.AddrFrom4(m.ExternalIPAddress), m.Protocol, m.ExternalPort}, false, uint8(m.Flags), m.IsAdd)
		case *cnat.CnatTranslationDel:
			rv = api.NO_SUCH_ENTRY
			for k, x := range f.byKey {
				if x.ID == m.ID {
					delete(f.byKey, k)
					rv = 0
				}
			}
		}
	}
	return f.mock.Reply(dto, reply, rv)
}

// take returns the requests recorded since the last call, dumps aside.
func (f *fakeVPP) take() []api.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []api.Message
	for _, r := range f.requests {
		switch r.(type) {
		case *cnat.CnatTranslationDump, *acl.ACLDump, *nat44_ed.Nat44LbStaticMappingDump, *nat44_ed.Nat44StaticMappingDump:
		default:
			out = append(out, r)
		}
	}
	f.requests = nil
	return out
}

// held returns VPP's translation at k (nil: none).
func (f *fakeVPP) held(k key) *cnat.CnatTranslation {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byKey[k]
}

func (f *fakeVPP) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.byKey)
}

func tcp(a string, port uint16) key { return key{netip.MustParseAddr(a), protoTCP, port} }
func udp(a string, port uint16) key { return key{netip.MustParseAddr(a), protoUDP, port} }

// delNAT44 deletes a static mapping as NAT44-ED does: it must exist, be
// of the kind of the request and be deleted with its flags. The renderer
// never adds one.
func (f *fakeVPP) delNAT44(k key, lb bool, flags uint8, isAdd bool) api.VPPApiError {
	if isAdd {
		f.t.Errorf("fake VPP: the cnat renderer added the NAT44 static mapping of %s", k)
		return api.UNSPECIFIED
	}
	m, ok := f.nat44[k]
	if !ok || m.lb != lb {
		return api.NO_SUCH_ENTRY
	}
	if m.flags != flags {
		return api.INVALID_VALUE
	}
	delete(f.nat44, k)
	return 0
}

func ip4(a netip.Addr) ip_types.IP4Address { return ip_types.IP4Address(a.As4()) }
