package vpp

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.fd.io/govpp/adapter/mock"
	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/acl"
	interfaces "go.fd.io/govpp/binapi/interface"
	"go.fd.io/govpp/binapi/interface_types"
	"go.fd.io/govpp/binapi/memclnt"
	"go.fd.io/govpp/binapi/nat44_ed"
	"go.fd.io/govpp/core"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// tagsVPP is a VPP behind GoVPP's mock adapter holding objects with these
// tags; it answers NewerObjects' dumps and records what it was sent.
type tagsVPP struct {
	ifs, acls, static, lb []string
	sent                  []string
}

func (v *tagsVPP) dialer(t *testing.T) dialer {
	m := vpptest.NewMock(t, append([]api.Message{&interfaces.SwInterfaceDump{}, &interfaces.SwInterfaceDetails{}}, formatMessages()...))
	m.Adapter.MockReplyHandler(func(dto mock.MessageDTO) ([]byte, uint16, bool) {
		if vpptest.IsControlPing(dto) {
			return m.Reply(dto, &memclnt.ControlPingReply{}, 0)
		}
		if dto.MsgID == 200 && dto.MsgName == "" {
			// The mock adapter gives sw_interface_dump a fixed ID without
			// a name.
			dto.MsgName = "sw_interface_dump"
		}
		req, ok := m.Decode(dto)
		if !ok {
			return nil, 0, false
		}
		v.sent = append(v.sent, req.GetMessageName())
		var out []api.Message
		switch req.(type) {
		case *interfaces.SwInterfaceDump:
			for i, tag := range v.ifs {
				out = append(out, &interfaces.SwInterfaceDetails{SwIfIndex: interface_types.InterfaceIndex(i), InterfaceName: fmt.Sprintf("if%d", i), Tag: tag})
			}
		case *acl.ACLDump:
			for i, tag := range v.acls {
				out = append(out, &acl.ACLDetails{ACLIndex: uint32(i), Tag: tag})
			}
		case *nat44_ed.Nat44StaticMappingDump:
			for i, tag := range v.static {
				out = append(out, &nat44_ed.Nat44StaticMappingDetails{ExternalPort: uint16(8000 + i), Protocol: 6, Tag: tag})
			}
		case *nat44_ed.Nat44LbStaticMappingDump:
			for i, tag := range v.lb {
				out = append(out, &nat44_ed.Nat44LbStaticMappingDetails{ExternalPort: uint16(80 + i), Protocol: 6, Tag: tag})
			}
		}
		m.Adapter.MockReply(out...)
		return nil, 0, false
	})
	return func(context.Context) (connection, error) {
		conn, err := core.Connect(m.Adapter)
		if err != nil {
			return connection{}, err
		}
		ch, err := conn.NewAPIChannel()
		if err != nil {
			conn.Disconnect()
			return connection{}, err
		}
		return connection{ch: ch, close: func() { ch.Close(); conn.Disconnect() }}, nil
	}
}

// Before vcoild's parts start, the tags of every kind of object vcoild
// tags in VPP are read, with dumps only: objects of this format, of format
// 1 and of others pass; a newer tag on any of them is refused, naming
// each object, as formatversion.ErrNewer.
func TestNewerObjectsReadsEveryTagOfVPPChangingNothing(t *testing.T) {
	current := &tagsVPP{
		ifs:    []string{"", loopbackTag, "vcoil c0ffee eth0", podTag(podA.PodKey), "someone else's"},
		acls:   []string{"vcoil-pol@2 local-1", "vcoil-pol reflect", "calico"},
		static: []string{hostPortTag(podA.PodKey)},
		lb:     []string{"vcoil-svc@2 default/web:80/TCP"},
	}
	if err := newerObjects(ctx(t), current.dialer(t)); err != nil {
		t.Fatalf("current and format 1 tags: %v", err)
	}
	wantLines(t, "the requests", current.sent, []string{"sw_interface_dump", "acl_dump", "nat44_static_mapping_dump", "nat44_lb_static_mapping_dump"})

	newer := &tagsVPP{
		ifs:    []string{loopbackTag, "vcoil@3 c0ffee eth0"},
		acls:   []string{"vcoil-pol@2 local-1", "vcoil-pol@3 local-2"},
		static: []string{"vcoil-hp@3 c0ffee eth0"},
		lb:     []string{"vcoil-svc@7 default/web:80/TCP"},
	}
	err := newerObjects(ctx(t), newer.dialer(t))
	if !errors.Is(err, formatversion.ErrNewer) {
		t.Fatalf("newer tags: %v, want formatversion.ErrNewer", err)
	}
	for _, want := range []string{`VPP interface 1 (if1), tag "vcoil@3 c0ffee eth0"`, `VPP ACL 1, tag "vcoil-pol@3 local-2"`,
		`VPP static mapping 0.0.0.0:8000/6, tag "vcoil-hp@3 c0ffee eth0"`, `VPP load-balancing static mapping 0.0.0.0:80/6, tag "vcoil-svc@7`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not name %s: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), "local-1") {
		t.Errorf("the refusal names an ACL of this format: %v", err)
	}
}

// A VPP that cannot be read is no newer state: the error says why, at
// once when its socket is missing.
func TestNewerObjectsOfAnUnreachableVPPIsNoHold(t *testing.T) {
	start := time.Now()
	err := NewerObjects(ctx(t), filepath.Join(t.TempDir(), "api.sock"), 0)
	if err == nil || errors.Is(err, formatversion.ErrNewer) || !strings.Contains(err.Error(), "VPP's API socket") {
		t.Fatalf("a missing socket: %v, want an error that is no newer format", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("a missing socket took %s", took)
	}
	refused := func(context.Context) (connection, error) { return connection{}, errors.New("connection refused") }
	if err := newerObjects(ctx(t), refused); err == nil || errors.Is(err, formatversion.ErrNewer) {
		t.Fatalf("a refused connection: %v", err)
	}
}
