// Package vppapi holds the small helpers every part of vcoil that talks to
// VPP's binary API through GoVPP shares: the VPP dataplane's driver and the
// renderers that program VPP on their own channels. A request VPP refuses
// or does not answer becomes an error that names the message.
package vppapi

import (
	"errors"
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
