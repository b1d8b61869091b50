package vpp

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.fd.io/govpp/adapter/socketclient"
	"go.fd.io/govpp/api"
	"go.fd.io/govpp/core"
)

// channel is the part of GoVPP's api.Channel the driver uses. Everything
// the driver sends goes through it, so the tests replace it with a
// recording fake VPP and assert the exact messages.
type channel interface {
	SendRequest(msg api.Message) api.RequestCtx
	SendMultiRequest(msg api.Message) api.MultiRequestCtx
	CheckCompatiblity(msgs ...api.Message) error
	Close()
}

// connection is one connection to VPP: the driver's own channel, a way to
// open more channels on it (for the renderers, Channel), and the function
// that closes it (the driver's channel, and the connection, which makes
// the renderers' channels fail).
type connection struct {
	ch channel
	// open returns a new channel on this connection whose request and
	// reply queues hold buffer messages.
	open  func(buffer int) (api.Channel, error)
	close func()
}

// dialer opens one connection to VPP.
type dialer func(ctx context.Context) (connection, error)

// socketDialer connects through the binary API socket at path.
func socketDialer(path string, replyTimeout time.Duration) dialer {
	return func(context.Context) (connection, error) {
		client := socketclient.NewVppClient(path)
		client.SetClientName("vcoild")
		conn, err := core.Connect(client)
		if err != nil {
			return connection{}, fmt.Errorf("connect to VPP at %s: %w", path, err)
		}
		ch, err := conn.NewAPIChannel()
		if err != nil {
			conn.Disconnect()
			return connection{}, fmt.Errorf("open an API channel to VPP at %s: %w", path, err)
		}
		ch.SetReplyTimeout(replyTimeout)
		open := func(buffer int) (api.Channel, error) {
			c, err := conn.NewAPIChannelBuffered(buffer, buffer)
			if err != nil {
				return nil, fmt.Errorf("open an API channel to VPP at %s: %w", path, err)
			}
			c.SetReplyTimeout(replyTimeout)
			return c, nil
		}
		return connection{ch: ch, open: open, close: func() { ch.Close(); conn.Disconnect() }}, nil
	}
}

// vppError is a request VPP refused or did not answer, naming the message.
type vppError struct {
	msg string
	err error
}

func (e *vppError) Error() string { return e.msg + ": " + e.err.Error() }
func (e *vppError) Unwrap() error { return e.err }

// call sends req and waits for its reply; a reply with retval != 0 is an
// error (GoVPP turns it into api.VPPApiError).
func call(ch channel, req, reply api.Message) error {
	if err := ch.SendRequest(req).ReceiveReply(reply); err != nil {
		return &vppError{msg: req.GetMessageName(), err: err}
	}
	return nil
}

// dump sends a dump request and hands each detail message to each, which
// must copy what it keeps.
func dump[T api.Message](ch channel, req api.Message, newDetail func() T, each func(T)) error {
	rc := ch.SendMultiRequest(req)
	for {
		d := newDetail()
		last, err := rc.ReceiveReply(d)
		if err != nil {
			return &vppError{msg: req.GetMessageName(), err: err}
		}
		if last {
			return nil
		}
		each(d)
	}
}

// isRetval reports whether err is VPP's answer code want.
func isRetval(err error, want api.VPPApiError) bool {
	var e api.VPPApiError
	return errors.As(err, &e) && e == want
}

// ignoreRetval turns the answers that mean "already so" into success.
func ignoreRetval(err error, codes ...api.VPPApiError) error {
	for _, c := range codes {
		if isRetval(err, c) {
			return nil
		}
	}
	return err
}

// checkMessages fails, naming them, when VPP does not know every message
// the driver sends (or knows it with another CRC).
func checkMessages(ch channel) error {
	err := ch.CheckCompatiblity(messages()...)
	if err == nil {
		return nil
	}
	var ce *api.CompatibilityError
	if errors.As(err, &ce) {
		return fmt.Errorf("%w: VPP does not know %d of the %d messages vcoil sends: %v (vcoil is built for VPP %s)",
			ErrIncompatible, len(ce.IncompatibleMessages), len(messages()), ce.IncompatibleMessages, VPPVersion)
	}
	return fmt.Errorf("check the messages VPP knows: %w", err)
}

// wait sleeps for d unless ctx ends first.
func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
