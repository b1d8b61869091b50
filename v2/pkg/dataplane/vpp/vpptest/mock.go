package vpptest

import (
	"reflect"
	"testing"

	"go.fd.io/govpp/adapter/mock"
	"go.fd.io/govpp/api"
	"go.fd.io/govpp/codec"
)

// Mock is what a fake VPP behind GoVPP's mock adapter needs to answer a
// component's requests: its messages by name, decoding, and encoding
// replies with a return value. The fakes of the renderers' unit tests
// use it; what a request does is theirs.
type Mock struct {
	t       testing.TB
	Adapter *mock.VppAdapter
	request map[string]func() api.Message
	reply   map[string]func() api.Message
}

// NewMock indexes msgs, requests and their replies in pairs as the
// renderers' Messages functions list them.
func NewMock(t testing.TB, msgs []api.Message) *Mock {
	m := &Mock{t: t, Adapter: mock.NewVppAdapter(), request: map[string]func() api.Message{}, reply: map[string]func() api.Message{}}
	for i := 0; i+1 < len(msgs); i += 2 {
		q, r := reflect.TypeOf(msgs[i]).Elem(), reflect.TypeOf(msgs[i+1]).Elem()
		m.request[msgs[i].GetMessageName()] = func() api.Message { return reflect.New(q).Interface().(api.Message) }
		m.reply[msgs[i].GetMessageName()] = func() api.Message { return reflect.New(r).Interface().(api.Message) }
	}
	return m
}

// IsControlPing says whether dto is a control ping (the mock adapter
// gives it a fixed ID without a name).
func IsControlPing(dto mock.MessageDTO) bool {
	return dto.MsgName == "control_ping" || dto.MsgID == 100
}

// Decode returns the request dto carries; an unknown or undecodable one
// fails the test and returns false.
func (m *Mock) Decode(dto mock.MessageDTO) (api.Message, bool) {
	newReq, ok := m.request[dto.MsgName]
	if !ok {
		m.t.Errorf("fake VPP: unexpected message %s", dto.MsgName)
		return nil, false
	}
	req := newReq()
	if err := codec.DecodeMsg(dto.Data, req); err != nil {
		m.t.Errorf("fake VPP: decode %s: %v", dto.MsgName, err)
		return nil, false
	}
	return req, true
}

// NewReply returns an empty reply to the request named name.
func (m *Mock) NewReply(name string) api.Message { return m.reply[name]() }

// Reply encodes reply, with return value rv, as the mock adapter's reply
// handler returns it.
func (m *Mock) Reply(dto mock.MessageDTO, reply api.Message, rv api.VPPApiError) ([]byte, uint16, bool) {
	if rv != 0 {
		reflect.ValueOf(reply).Elem().FieldByName("Retval").SetInt(int64(rv))
	}
	data, err := m.Adapter.ReplyBytes(dto, reply)
	if err != nil {
		m.t.Errorf("fake VPP: encode %s: %v", reply.GetMessageName(), err)
		return nil, 0, false
	}
	id, _ := m.Adapter.GetMsgID(reply.GetMessageName(), reply.GetCrcString())
	return data, id, true
}
