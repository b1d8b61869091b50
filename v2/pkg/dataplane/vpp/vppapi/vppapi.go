// Package vppapi holds the small helpers every part of vcoil that talks to
// VPP's binary API through GoVPP shares: the VPP dataplane's driver and the
// renderers that program VPP on their own channels. A request VPP refuses
// or does not answer becomes an error that names the message.
package vppapi

import (
	"errors"
	"fmt"
	"net/netip"

	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/ip_types"
)

// Requester is the part of GoVPP's api.Channel that sends requests.
type Requester interface {
	SendRequest(msg api.Message) api.RequestCtx
	SendMultiRequest(msg api.Message) api.MultiRequestCtx
}

// Error is a request VPP refused or did not answer, naming the message.
type Error struct {
	Msg string
	Err error
}

func (e *Error) Error() string { return e.Msg + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Call sends req and waits for its reply; a reply with retval != 0 is an
// error (GoVPP turns it into api.VPPApiError).
func Call(ch Requester, req, reply api.Message) error {
	if err := ch.SendRequest(req).ReceiveReply(reply); err != nil {
		return &Error{Msg: req.GetMessageName(), Err: err}
	}
	return nil
}

// Dump sends a dump request and hands each detail message to each, which
// must copy what it keeps.
func Dump[T api.Message](ch Requester, req api.Message, newDetail func() T, each func(T)) error {
	rc := ch.SendMultiRequest(req)
	for {
		d := newDetail()
		last, err := rc.ReceiveReply(d)
		if err != nil {
			return &Error{Msg: req.GetMessageName(), Err: err}
		}
		if last {
			return nil
		}
		each(d)
	}
}

// IsRetval reports whether err is VPP's answer code want.
func IsRetval(err error, want api.VPPApiError) bool {
	var e api.VPPApiError
	return errors.As(err, &e) && e == want
}

// IgnoreRetval turns the answers that mean "already so" into success.
func IgnoreRetval(err error, codes ...api.VPPApiError) error {
	for _, c := range codes {
		if IsRetval(err, c) {
			return nil
		}
	}
	return err
}

// Prefix is p in VPP's type.
func Prefix(p netip.Prefix) ip_types.Prefix {
	return ip_types.Prefix{Address: ip_types.NewAddress(p.Addr().AsSlice()), Len: uint8(p.Bits())}
}

// PipelineOp is one request of a pipelined batch: the request, the reply
// to receive it in, and whether VPP answering NO_SUCH_ENTRY means done (a
// deletion of what is already gone).
type PipelineOp struct {
	Req, Reply api.Message
	Del        bool
}

// PipelineError is the first failure of a pipelined batch: the index of
// the request, the error naming its message, and how many requests failed.
type PipelineError struct {
	Index, Failed int
	Err           *Error
}

func (e *PipelineError) Error() string { return e.Err.Error() }
func (e *PipelineError) Unwrap() error { return e.Err }

// Pipeline sends n requests (op(i) gives the i-th) on ch with up to
// maxInFlight sent and not yet answered, receiving the replies in the order
// sent: VPP handles one client's requests in order, so a request that
// depends on an earlier one (an addition after the deletion of the same
// key) needs no wait, and a batch costs no round trip per request (what
// matters for API handlers that stop VPP's workers while they run, as the
// ACL plugin's). done(i), when not nil, runs for each request that
// succeeded.
//
// Every reply is received, even after a failure, so that the channel holds
// no stale replies and nothing is in flight when Pipeline returns. The
// error, a *PipelineError, is the first failure.
func Pipeline(ch Requester, n, maxInFlight int, op func(i int) PipelineOp, done func(i int)) error {
	inFlight := make([]api.RequestCtx, 0, maxInFlight)
	var first *PipelineError
	failed := 0
	receive := func(i int, rc api.RequestCtx) {
		o := op(i)
		e := rc.ReceiveReply(o.Reply)
		if e != nil && o.Del && IsRetval(e, api.NO_SUCH_ENTRY) {
			e = nil
		}
		if e != nil {
			failed++
			if first == nil {
				first = &PipelineError{Index: i, Err: &Error{Msg: o.Req.GetMessageName(), Err: e}}
			}
			return
		}
		if done != nil {
			done(i)
		}
	}
	next := 0 // the oldest request whose reply is awaited
	for i := range n {
		if len(inFlight) == maxInFlight {
			receive(next, inFlight[0])
			inFlight = inFlight[1:]
			next++
		}
		inFlight = append(inFlight, ch.SendRequest(op(i).Req))
	}
	for _, rc := range inFlight {
		receive(next, rc)
		next++
	}
	if first == nil {
		return nil
	}
	first.Failed = failed
	return first
}

// CheckMessages fails, naming them, when VPP lacks some of msgs: who says
// what sends them and needs says what VPP needs for them (the plugins to
// load), for the error.
func CheckMessages(ch interface {
	CheckCompatiblity(...api.Message) error
}, who, needs string, msgs []api.Message) error {
	err := ch.CheckCompatiblity(msgs...)
	if err == nil {
		return nil
	}
	var ce *api.CompatibilityError
	if errors.As(err, &ce) {
		return fmt.Errorf("VPP does not know %d of the %d messages %s sends (%s): %v",
			len(ce.IncompatibleMessages), len(msgs), who, needs, ce.IncompatibleMessages)
	}
	return fmt.Errorf("check the messages %s sends: %w", who, err)
}
