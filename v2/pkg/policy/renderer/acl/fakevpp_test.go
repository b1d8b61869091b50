package acl

import (
	"context"
	"fmt"
	"io"
	"log"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.fd.io/govpp/adapter/mock"
	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/acl"
	"go.fd.io/govpp/binapi/acl_types"
	"go.fd.io/govpp/binapi/memclnt"
	"go.fd.io/govpp/binapi/vlib"
	"go.fd.io/govpp/core"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
)

func TestMain(m *testing.M) {
	// GoVPP's mock adapter logs every reply with the standard logger.
	log.SetOutput(io.Discard)
	os.Exit(m.Run())
}

// fakeVPP answers the renderer's ACL requests through GoVPP's mock adapter
// as VPP 25.10's acl plugin does (acl.c: new indexes from the pool, the
// most recently freed first; NO_SUCH_ENTRY for unknown indexes; an ACL
// held by an interface list cannot be deleted), and doubles as the
// dataplane: it keeps the interfaces' policy lists that SetACLLists sets.
// Every request and every SetACLLists call goes into one log, in order.
type fakeVPP struct {
	t       *testing.T
	mock    *vpptest.Mock
	adapter *mock.VppAdapter
	conn    *core.Connection

	mu    sync.Mutex
	log   []string
	acls  map[uint32]*acl.ACLAddReplace
	next  uint32
	free  []uint32
	lists map[string]vpp.ACLLists
	inc   vpp.Incarnation
	// uplink is the node's uplink (vpp.NoInterface: none).
	uplink uint32
	// fail, when set, may refuse a request with a retval; failLists may
	// refuse a SetACLLists call.
	fail      func(api.Message) api.VPPApiError
	failLists func([]vpp.ACLSetting) error
}

func newFakeVPP(t *testing.T) *fakeVPP {
	m := vpptest.NewMock(t, Messages())
	f := &fakeVPP{t: t, mock: m, adapter: m.Adapter, acls: map[uint32]*acl.ACLAddReplace{},
		lists: map[string]vpp.ACLLists{}, inc: 1, uplink: 1}
	f.adapter.MockReplyHandler(f.handle)
	conn, err := core.Connect(f.adapter)
	if err != nil {
		t.Fatal(err)
	}
	f.conn = conn
	t.Cleanup(conn.Disconnect)
	return f
}

// restart is a VPP that died and came back, in a new incarnation.
func (f *fakeVPP) restart() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.acls)
	clear(f.lists)
	f.next, f.free = 0, nil
	f.inc++
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
	f.log = append(f.log, msgString(req))
	if d, ok := req.(*acl.ACLDump); ok {
		var out []api.Message
		for _, i := range slices.Sorted(maps.Keys(f.acls)) {
			if d.ACLIndex == ^uint32(0) || d.ACLIndex == i {
				a := f.acls[i]
				out = append(out, &acl.ACLDetails{ACLIndex: i, Tag: a.Tag, Count: uint32(len(a.R)), R: slices.Clone(a.R)})
			}
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
		rv = f.apply(req, reply)
	}
	return f.mock.Reply(dto, reply, rv)
}

func (f *fakeVPP) apply(req, reply api.Message) api.VPPApiError {
	switch m := req.(type) {
	case *acl.ACLAddReplace:
		x := m.ACLIndex
		if x == ^uint32(0) {
			if n := len(f.free); n > 0 {
				x, f.free = f.free[n-1], f.free[:n-1]
			} else {
				x = f.next
				f.next++
			}
		} else if f.acls[x] == nil {
			return api.NO_SUCH_ENTRY
		}
		c := *m
		c.R = slices.Clone(m.R)
		f.acls[x] = &c
		reply.(*acl.ACLAddReplaceReply).ACLIndex = x
	case *acl.ACLDel:
		if f.acls[m.ACLIndex] == nil {
			return api.NO_SUCH_ENTRY
		}
		for _, l := range f.lists {
			if slices.Contains(l.Input, m.ACLIndex) {
				return api.ACL_IN_USE_INBOUND
			}
			if slices.Contains(l.Output, m.ACLIndex) {
				return api.ACL_IN_USE_OUTBOUND
			}
		}
		delete(f.acls, m.ACLIndex)
		f.free = append(f.free, m.ACLIndex)
	}
	return 0
}

// Channel and SetACLLists make the fake the renderer's Dataplane.
func (f *fakeVPP) Channel(_ context.Context, maxInFlight int) (api.Channel, vpp.NodeInterfaces, error) {
	ch, err := f.conn.NewAPIChannelBuffered(maxInFlight+16, maxInFlight+16)
	if err != nil {
		return nil, vpp.NodeInterfaces{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return ch, vpp.NodeInterfaces{Incarnation: f.inc, Uplink: f.uplink, HostInterconnect: 2, Loopback: 3}, nil
}

func (f *fakeVPP) SetACLLists(_ context.Context, inc vpp.Incarnation, owner vpp.ACLOwner, settings []vpp.ACLSetting) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if owner != vpp.ACLPolicy {
		return fmt.Errorf("owner %d", owner)
	}
	if inc != f.inc {
		return fmt.Errorf("incarnation %d is stale, VPP is in incarnation %d: resync", inc, f.inc)
	}
	var s []string
	for _, x := range settings {
		s = append(s, fmt.Sprintf("%s in=%v out=%v", ifName(x.Interface), x.Lists.Input, x.Lists.Output))
	}
	f.log = append(f.log, "set_acl_lists "+strings.Join(s, ", "))
	if f.failLists != nil {
		if err := f.failLists(settings); err != nil {
			return err
		}
	}
	for _, x := range settings {
		for _, i := range slices.Concat(x.Lists.Input, x.Lists.Output) {
			if f.acls[i] == nil {
				f.t.Errorf("fake VPP: %s gets ACL %d, which does not exist", ifName(x.Interface), i)
			}
		}
		if len(x.Lists.Input)+len(x.Lists.Output) == 0 {
			delete(f.lists, ifName(x.Interface))
		} else {
			f.lists[ifName(x.Interface)] = x.Lists
		}
	}
	return nil
}

func ifName(i vpp.ACLInterface) string {
	if i.Pod.IsValid() {
		return i.Pod.String()
	}
	return string(i.Node)
}

// take returns the log since the last take.
func (f *fakeVPP) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.log
	f.log = nil
	return out
}

// state is VPP's ACLs (index: tag and rules) and the interfaces' lists.
func (f *fakeVPP) state() (acls []string, lists []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, i := range slices.Sorted(maps.Keys(f.acls)) {
		acls = append(acls, fmt.Sprintf("%d %q %s", i, f.acls[i].Tag, rulesString(f.acls[i].R)))
	}
	for _, n := range slices.Sorted(maps.Keys(f.lists)) {
		lists = append(lists, fmt.Sprintf("%s in=%v out=%v", n, f.lists[n].Input, f.lists[n].Output))
	}
	return acls, lists
}

func msgString(m api.Message) string {
	switch x := m.(type) {
	case *acl.ACLAddReplace:
		idx := "new"
		if x.ACLIndex != ^uint32(0) {
			idx = fmt.Sprint(x.ACLIndex)
		}
		return fmt.Sprintf("acl_add_replace %s %q count=%d %s", idx, x.Tag, x.Count, rulesString(x.R))
	case *acl.ACLDel:
		return fmt.Sprintf("acl_del %d", x.ACLIndex)
	case *acl.ACLDump:
		return fmt.Sprintf("acl_dump %d", int32(x.ACLIndex))
	case *vlib.CliInband:
		return fmt.Sprintf("cli_inband %q", x.Cmd)
	}
	return m.GetMessageName()
}

// rulesString writes rules as "[action proto src:ports > dst:ports; ...]".
func rulesString(rs []acl_types.ACLRule) string {
	var s []string
	for _, r := range rs {
		s = append(s, ruleString(r))
	}
	return "[" + strings.Join(s, "; ") + "]"
}

func ruleString(r acl_types.ACLRule) string {
	action := map[acl_types.ACLAction]string{0: "deny", 1: "permit", 2: "reflect"}[r.IsPermit]
	ports := func(a, b uint16) string {
		if a == 0 && b == 65535 {
			return ""
		}
		if a == b {
			return fmt.Sprintf(":%d", a)
		}
		return fmt.Sprintf(":%d-%d", a, b)
	}
	flags := ""
	if r.TCPFlagsMask != 0 {
		flags = fmt.Sprintf(" flags=%#02x/%#02x", r.TCPFlagsValue, r.TCPFlagsMask)
	}
	return fmt.Sprintf("%s %d %s%s > %s%s%s", action, r.Proto,
		r.SrcPrefix, ports(r.SrcportOrIcmptypeFirst, r.SrcportOrIcmptypeLast),
		r.DstPrefix, ports(r.DstportOrIcmpcodeFirst, r.DstportOrIcmpcodeLast), flags)
}

func wantLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s:\n got:\n  %s\nwant:\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}
