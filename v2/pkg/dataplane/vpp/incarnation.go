package vpp

import (
	"context"
	"fmt"

	"go.fd.io/govpp/api"
)

// channelSlack is room in a renderer's channel beyond its pipelined
// requests: the replies of a dump, and a control ping, arrive together.
const channelSlack = 64

// Channel opens a channel for a renderer on the current connection. It is
// the renderer's own: its pipelined requests do not queue behind the
// driver's, and the driver's lock is not held while it is used.
func (d *driver) Channel(ctx context.Context, maxInFlight int) (api.Channel, NodeInterfaces, error) {
	if maxInFlight < 1 {
		return nil, NodeInterfaces{}, fmt.Errorf("open an API channel for %d requests in flight: want at least 1", maxInFlight)
	}
	if err := d.lockReady(ctx); err != nil {
		return nil, NodeInterfaces{}, fmt.Errorf("open an API channel: %w", err)
	}
	defer d.mu.Unlock()
	if d.open == nil {
		return nil, NodeInterfaces{}, fmt.Errorf("open an API channel: %w: no connection", ErrNotReady)
	}
	ch, err := d.open(maxInFlight + channelSlack)
	if err != nil {
		return nil, NodeInterfaces{}, err
	}
	return ch, d.nodeInterfaces(), nil
}

// nodeInterfaces are the node's interfaces in this incarnation; the caller
// holds d.mu.
func (d *driver) nodeInterfaces() NodeInterfaces {
	n := NodeInterfaces{Incarnation: d.incarnation, Uplink: NoInterface, HostInterconnect: d.node.interconnect, Loopback: d.node.loopback}
	if d.cfg.Uplink != "" {
		n.Uplink = d.node.uplink
	}
	return n
}

func (d *driver) Resynced() <-chan Incarnation { return d.resynced }

// announce puts the incarnation just synced on resynced, once per
// incarnation, replacing a value nobody read: a renderer needs to know
// that it must resync, not how often VPP restarted. It never blocks. The
// caller holds d.mu (the driver is resynced's only sender).
func (d *driver) announce() {
	if d.announced == d.incarnation {
		return
	}
	d.announced = d.incarnation
	select {
	case <-d.resynced:
	default:
	}
	select {
	case d.resynced <- d.incarnation:
	default:
	}
}
