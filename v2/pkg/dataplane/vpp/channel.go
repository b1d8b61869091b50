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

// checkMessages fails, naming them, when VPP does not know every message
// the driver sends (or knows it with another CRC). A plugin vcoil cannot do
// without is named first, as the readiness check reports it.
func checkMessages(ch channel) error {
	if err := ch.CheckCompatiblity(urpfMessages()...); err != nil {
		var ce *api.CompatibilityError
		if !errors.As(err, &ce) {
			return fmt.Errorf("check the messages VPP knows: %w", err)
		}
		return fmt.Errorf("%w: VPP plugin %s is not loaded (source validation needs it): VPP does not know %v",
			ErrIncompatible, URPFPlugin, ce.IncompatibleMessages)
	}
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

// URPFPlugin is the VPP plugin whose messages source validation sends.
const URPFPlugin = "urpf_plugin.so"

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
