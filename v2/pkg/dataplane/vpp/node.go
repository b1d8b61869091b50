package vpp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/fib_types"
	interfaces "go.fd.io/govpp/binapi/interface"
	"go.fd.io/govpp/binapi/interface_types"
	"go.fd.io/govpp/binapi/ip"
	"go.fd.io/govpp/binapi/ip_types"
	"go.fd.io/govpp/binapi/nat44_ed"
	"go.fd.io/govpp/binapi/nat_types"
	"go.fd.io/govpp/binapi/tapv2"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
)

// nodeState is what the node set-up found or made in VPP on the current
// connection.
type nodeState struct {
	loopback     uint32
	interconnect uint32
	uplink       uint32 // ^0 without an uplink
	mtu          int
	natEnabled   bool
	// natForwarding: NAT forwarding was enabled for hostPorts.
	natForwarding bool
	// uplinkIPv4 are the uplink's IPv4 addresses, read when a hostPort
	// first needs them (nil: not read yet).
	uplinkIPv4 []netip.Addr
}

// vppInterface is one line of sw_interface_dump that the driver keeps.
type vppInterface struct {
	swIfIndex uint32
	name      string
	tag       string
	mac       string
	up        bool
	mtu       int
}

// interfaceDump lists VPP's interfaces, or only swIfIndex's when it is not
// ^0.
func interfaceDump(ch channel, swIfIndex uint32) ([]vppInterface, error) {
	var out []vppInterface
	err := vppapi.Dump(ch, &interfaces.SwInterfaceDump{SwIfIndex: index(swIfIndex)},
		func() *interfaces.SwInterfaceDetails { return &interfaces.SwInterfaceDetails{} },
		func(m *interfaces.SwInterfaceDetails) {
			v := vppInterface{
				swIfIndex: uint32(m.SwIfIndex), name: m.InterfaceName, tag: m.Tag,
				up: m.Flags&interface_types.IF_STATUS_API_FLAG_ADMIN_UP != 0, mtu: int(m.LinkMtu),
			}
			if len(m.Mtu) > 0 && m.Mtu[0] != 0 {
				v.mtu = int(m.Mtu[0])
			}
			if m.L2Address != ([6]uint8{}) {
				v.mac = m.L2Address.String()
			}
			out = append(out, v)
		})
	return out, err
}

// uplinkMTU is the MTU pods get from the uplink up: VPP's L3 MTU of it,
// and for an af_packet uplink ("host-" and the kernel link's name, VPP's
// naming) no more than the kernel link's MTU. VPP 25.10 gives a new
// af_packet interface an L3 MTU of 9000 whatever its link's is, and
// forwards pod packets of that size to a link that cannot carry them: the
// veth drops them (VPP counts "tx sendto temporary failure"), or a router
// behind it does, and bulk TCP between nodes stalls. 0 when neither is
// known.
func (d *driver) uplinkMTU(ctx context.Context, up vppInterface) int {
	mtu := up.mtu
	host, ok := strings.CutPrefix(up.name, "host-")
	if !ok {
		return mtu
	}
	link, found, err := d.kernel.LinkMTU(ctx, host)
	switch {
	case err != nil:
		d.log.Error(err, "cannot read the MTU of the uplink's kernel link; pods get VPP's", "uplink", up.name, "link", host, "mtu", mtu)
	case found && link > 0 && (mtu == 0 || link < mtu):
		if mtu != 0 && !d.mtuWarned {
			d.log.Info("the uplink's MTU in VPP is larger than its kernel link's; pods get the link's (set VPP's with \"set interface mtu packet\" in its start-up configuration)",
				"uplink", up.name, "vppMTU", mtu, "link", host, "linkMTU", link)
			d.mtuWarned = true
		}
		mtu = link
	}
	return mtu
}

// ensureNode makes vcoil's loopback, the host interconnect, the uplink and
// VPP's default routes, from the interface dump ifs. The caller holds d.mu.
func (d *driver) ensureNode(ctx context.Context, ifs []vppInterface) error {
	ch := d.ch
	n := nodeState{uplink: ^uint32(0), mtu: d.cfg.MTU}
	byTag := func(tag string) (vppInterface, bool) {
		i := slices.IndexFunc(ifs, func(v vppInterface) bool { return v.tag == tag })
		if i < 0 {
			return vppInterface{}, false
		}
		return ifs[i], true
	}

	// The uplink first: it gives the MTU, and a missing one is worth
	// waiting for before anything is made.
	if d.cfg.Uplink != "" {
		i := slices.IndexFunc(ifs, func(v vppInterface) bool { return v.name == d.cfg.Uplink })
		if i < 0 {
			return fmt.Errorf("uplink %q is not a VPP interface (create it in startup.conf, e.g. with a startup-config \"create host-interface\" or a DPDK dev stanza)", d.cfg.Uplink)
		}
		up := ifs[i]
		n.uplink = up.swIfIndex
		if n.mtu == 0 {
			n.mtu = d.uplinkMTU(ctx, up)
		}
		if err := d.ensureAddresses(up.swIfIndex, d.cfg.Uplink, d.cfg.UplinkAddresses); err != nil {
			return err
		}
		if !up.up {
			if err := setUp(ch, up.swIfIndex, d.cfg.Uplink); err != nil {
				return err
			}
		}
	}
	if n.mtu == 0 {
		n.mtu = DefaultMTU
	}

	// vcoil's loopback: the address pod interfaces borrow.
	if lo, ok := byTag(loopbackTag); ok {
		n.loopback = lo.swIfIndex
	} else {
		reply := &interfaces.CreateLoopbackReply{}
		if err := vppapi.Call(ch, &interfaces.CreateLoopback{}, reply); err != nil {
			return fmt.Errorf("create vcoil's loopback: %w", err)
		}
		n.loopback = uint32(reply.SwIfIndex)
		if err := tag(ch, n.loopback, loopbackTag); err != nil {
			return err
		}
		d.log.Info("created vcoil's loopback in VPP", "swIfIndex", n.loopback)
	}
	if err := d.ensureAddresses(n.loopback, loopbackTag, []netip.Prefix{LoopbackIPv4}); err != nil {
		return err
	}
	if err := enableIPv6(ch, n.loopback); err != nil {
		return fmt.Errorf("enable IPv6 on vcoil's loopback: %w", err)
	}
	if err := setUp(ch, n.loopback, loopbackTag); err != nil {
		return err
	}

	// The host interconnect: vcoil's own (tagged), else one that VPP's
	// start-up configuration attached to the veth (a node whose kernel
	// reaches its network only through VPP needs it before vcoild runs),
	// which vcoild adopts, else a new one.
	premade := slices.IndexFunc(ifs, func(v vppInterface) bool {
		return d.cfg.HostInterconnect == AFPacket && v.name == afPacketName(HostInterconnectVPPName) && v.tag == ""
	})
	if hi, ok := byTag(interconnectTag); ok {
		n.interconnect = hi.swIfIndex
	} else if premade >= 0 {
		n.interconnect = ifs[premade].swIfIndex
		if err := tag(ch, n.interconnect, interconnectTag); err != nil {
			return err
		}
		d.log.Info("adopted the host interconnect made by VPP's start-up configuration", "name", ifs[premade].name, "swIfIndex", n.interconnect)
	} else {
		sw, err := d.createInterconnect(ctx, n.mtu)
		if err != nil {
			return err
		}
		n.interconnect = sw
	}
	if err := d.ensureAddresses(n.interconnect, interconnectTag, []netip.Prefix{InterconnectVPPIPv4}); err != nil {
		return err
	}
	if err := enableIPv6(ch, n.interconnect); err != nil {
		return fmt.Errorf("enable IPv6 on the host interconnect: %w", err)
	}
	if err := vppapi.Call(ch, &ip.SwInterfaceIP6SetLinkLocalAddress{SwIfIndex: index(n.interconnect), IP: ip_types.IP6Address(InterconnectVPPIPv6.As16())},
		&ip.SwInterfaceIP6SetLinkLocalAddressReply{}); err != nil {
		return fmt.Errorf("set the host interconnect's link-local address %s: %w", InterconnectVPPIPv6, err)
	}
	if err := setUp(ch, n.interconnect, interconnectTag); err != nil {
		return err
	}
	if err := d.kernel.SetUpHost(ctx); err != nil {
		return fmt.Errorf("set up the node's end of the host interconnect: %w", err)
	}

	// Default routes: through the uplink's gateway where there is one,
	// else through the host.
	for _, r := range []struct {
		gw, host netip.Addr
		dst      netip.Prefix
	}{
		{d.cfg.UplinkGatewayIPv4, InterconnectHostIPv4.Addr(), netip.MustParsePrefix("0.0.0.0/0")},
		{d.cfg.UplinkGatewayIPv6, InterconnectHostIPv6.Addr(), netip.MustParsePrefix("::/0")},
	} {
		if r.dst.Addr().Is4() && d.cfg.SNAT != nil {
			continue // syncSNAT routes it into the SNAT pipes
		}
		path := viaPath(n.interconnect, r.host)
		if r.gw.IsValid() {
			path = viaPath(n.uplink, r.gw)
		}
		if err := addRoute(ch, r.dst, path); err != nil {
			return err
		}
	}
	d.node = n
	if err := d.syncSNAT(ifs); err != nil {
		return fmt.Errorf("SNAT of pods' traffic leaving the node: %w", err)
	}
	return nil
}

// createInterconnect makes VPP's end of the host interconnect (a tun in
// the node namespace, or af_packet on a veth) and tags it.
func (d *driver) createInterconnect(ctx context.Context, mtu int) (uint32, error) {
	ch := d.ch
	var sw uint32
	switch d.cfg.HostInterconnect {
	case TAP:
		req := d.tapRequest(interconnectTag, HostInterconnectName, d.cfg.NodeNetns, mtu)
		reply := &tapv2.TapCreateV3Reply{}
		if err := vppapi.Call(ch, req, reply); err != nil {
			return 0, fmt.Errorf("create the host interconnect %s: %w", HostInterconnectName, err)
		}
		sw = uint32(reply.SwIfIndex)
	case AFPacket:
		if err := d.kernel.CreateHostVeth(ctx, mtu); err != nil {
			return 0, fmt.Errorf("create the host interconnect's veth: %w", err)
		}
		s, err := createAfPacket(ch, HostInterconnectVPPName, nil, afPacketHostFrames)
		if err != nil {
			return 0, fmt.Errorf("attach the host interconnect %s: %w", HostInterconnectVPPName, err)
		}
		sw = s
		if err := tag(ch, sw, interconnectTag); err != nil {
			return 0, err
		}
	}
	d.log.Info("created the host interconnect", "type", d.cfg.HostInterconnect, "swIfIndex", sw, "host", HostInterconnectName)
	return sw, nil
}

// ensureAddresses adds the prefixes swIfIndex lacks.
func (d *driver) ensureAddresses(swIfIndex uint32, what string, want []netip.Prefix) error {
	if len(want) == 0 {
		return nil
	}
	var have []netip.Prefix
	for _, v6 := range []bool{false, true} {
		err := vppapi.Dump(d.ch, &ip.IPAddressDump{SwIfIndex: index(swIfIndex), IsIPv6: v6},
			func() *ip.IPAddressDetails { return &ip.IPAddressDetails{} },
			func(m *ip.IPAddressDetails) { have = append(have, fromVPPPrefix(ip_types.Prefix(m.Prefix))) })
		if err != nil {
			return fmt.Errorf("list the addresses of %s: %w", what, err)
		}
	}
	for _, p := range want {
		if slices.Contains(have, p) {
			continue
		}
		req := &interfaces.SwInterfaceAddDelAddress{SwIfIndex: index(swIfIndex), IsAdd: true, Prefix: ip_types.AddressWithPrefix(vppapi.Prefix(p))}
		if err := vppapi.IgnoreRetval(vppapi.Call(d.ch, req, &interfaces.SwInterfaceAddDelAddressReply{}), api.DUPLICATE_IF_ADDRESS); err != nil {
			return fmt.Errorf("add %s to %s: %w", p, what, err)
		}
	}
	return nil
}

// enableIPv6 enables IPv6 on an interface; one that has it already (a
// VPP that outlived vcoild) answers VALUE_EXIST, which is success.
func enableIPv6(ch channel, swIfIndex uint32) error {
	req := &ip.SwInterfaceIP6EnableDisable{SwIfIndex: index(swIfIndex), Enable: true}
	return vppapi.IgnoreRetval(vppapi.Call(ch, req, &ip.SwInterfaceIP6EnableDisableReply{}), api.VALUE_EXIST)
}

func tag(ch channel, swIfIndex uint32, t string) error {
	req := &interfaces.SwInterfaceTagAddDel{IsAdd: true, SwIfIndex: index(swIfIndex), Tag: t}
	if err := vppapi.Call(ch, req, &interfaces.SwInterfaceTagAddDelReply{}); err != nil {
		return fmt.Errorf("tag interface %d %q: %w", swIfIndex, t, err)
	}
	return nil
}

func setUp(ch channel, swIfIndex uint32, what string) error {
	req := &interfaces.SwInterfaceSetFlags{SwIfIndex: index(swIfIndex), Flags: interface_types.IF_STATUS_API_FLAG_ADMIN_UP}
	if err := vppapi.Call(ch, req, &interfaces.SwInterfaceSetFlagsReply{}); err != nil {
		return fmt.Errorf("set %s up: %w", what, err)
	}
	return nil
}

// addRoute installs dst with path as its only path: adding the same route
// again replaces it, which makes it idempotent.
func addRoute(ch channel, dst netip.Prefix, path fib_types.FibPath) error {
	req := &ip.IPRouteAddDel{IsAdd: true, Route: ip.IPRoute{Prefix: vppapi.Prefix(dst), NPaths: 1, Paths: []fib_types.FibPath{path}}}
	if err := vppapi.Call(ch, req, &ip.IPRouteAddDelReply{}); err != nil {
		return fmt.Errorf("add route %s: %w", dst, err)
	}
	return nil
}

// delRoute removes dst; a missing route is no error.
func delRoute(ch channel, dst netip.Prefix, path fib_types.FibPath) error {
	req := &ip.IPRouteAddDel{IsAdd: false, Route: ip.IPRoute{Prefix: vppapi.Prefix(dst), NPaths: 1, Paths: []fib_types.FibPath{path}}}
	if err := vppapi.IgnoreRetval(vppapi.Call(ch, req, &ip.IPRouteAddDelReply{}), api.NO_SUCH_ENTRY); err != nil {
		return fmt.Errorf("delete route %s: %w", dst, err)
	}
	return nil
}

// blockRoutes is the Dataplane's BlockRoutes.
type blockRoutes struct{ d *driver }

// Sync records the node's blocks and routes them. While VPP is not synced
// it only records them: the resync routes them.
func (b blockRoutes) Sync(ctx context.Context, blocks []netip.Prefix) error {
	d := b.d
	d.mu.Lock()
	defer d.mu.Unlock()
	d.blocks = slices.Clone(blocks)
	d.blocksKnown = true
	if !d.synced {
		return nil
	}
	if err := d.syncBlocks(ctx); err != nil {
		return fmt.Errorf("route the node's blocks: %w", err)
	}
	return nil
}

// syncBlocks routes d.blocks in the kernel and VPP and removes the routes
// of blocks the node no longer has. The caller holds d.mu.
func (d *driver) syncBlocks(ctx context.Context) error {
	if !d.blocksKnown {
		return nil
	}
	removed, kerr := d.kernel.SyncBlockRoutes(ctx, d.blocks)
	var errs []error
	if kerr != nil {
		errs = append(errs, kerr)
	}
	for _, p := range removed {
		if err := delRoute(d.ch, p, dropPath(p.Addr())); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range d.blocks {
		if err := addRoute(d.ch, p, dropPath(p.Addr())); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ensureNAT enables NAT44-ED once per VPP process, when the first role is
// set.
func (d *driver) ensureNAT() error {
	if d.node.natEnabled {
		return nil
	}
	req := &nat44_ed.Nat44EdPluginEnableDisable{Enable: true, Sessions: d.cfg.NATSessions}
	if err := vppapi.IgnoreRetval(vppapi.Call(d.ch, req, &nat44_ed.Nat44EdPluginEnableDisableReply{}), api.FEATURE_ALREADY_ENABLED); err != nil {
		return fmt.Errorf("enable NAT44-ED: %w", err)
	}
	// With the cnat renderer no NAT44 renderer turns NAT forwarding on,
	// and without it NAT44-ED drops the traffic of the pods (NAT frontends
	// for hostPorts) that matches no session and no mapping.
	if d.cnat != nil {
		if err := vppapi.Call(d.ch, &nat44_ed.Nat44ForwardingEnableDisable{Enable: true}, &nat44_ed.Nat44ForwardingEnableDisableReply{}); err != nil {
			return fmt.Errorf("enable NAT forwarding: %w", err)
		}
		if err := d.cnatTwiceNATPool(); err != nil {
			return err
		}
	}
	d.node.natEnabled = true
	return nil
}

// cnatTwiceNATPool puts the IPv4 NAT loopback in NAT44-ED's twice-NAT
// pool, which the NAT44 renderer keeps when it runs: a pod reaching its own
// hostPort (a SELF_TWICE_NAT mapping) is source-NATed to it. An earlier
// NAT loopback stays in the pool (the loopback changes only with the
// node's blocks). The caller holds d.mu; NAT44-ED is enabled.
func (d *driver) cnatTwiceNATPool() error {
	a := d.cnat.IPv4
	if !a.IsValid() {
		return nil
	}
	req := &nat44_ed.Nat44AddDelAddressRange{FirstIPAddress: ip_types.IP4Address(a.As4()), LastIPAddress: ip_types.IP4Address(a.As4()),
		VrfID: ^uint32(0), IsAdd: true, Flags: nat_types.NAT_IS_TWICE_NAT}
	if err := vppapi.IgnoreRetval(vppapi.Call(d.ch, req, &nat44_ed.Nat44AddDelAddressRangeReply{}), api.VALUE_EXIST); err != nil {
		return fmt.Errorf("add the NAT loopback %s to the twice-NAT pool (hostPorts): %w", a, err)
	}
	return nil
}
