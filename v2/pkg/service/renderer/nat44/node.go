package nat44

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/nat44_ed"
	"go.fd.io/govpp/binapi/nat_types"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// syncNode configures what every mapping relies on, in an order where each
// step finds what it needs:
//
//  1. NAT roles of the node's interfaces (the first one enables NAT44-ED,
//     which static mappings need). The host interconnect is a frontend
//     (the node's processes are clients) and a backend (hostNetwork
//     endpoints, the reject sink). The uplink is a frontend (outside
//     clients) and, as in the Contiv design, a backend too: remote
//     backends sit behind it, and their replies to this node's pods (a
//     cluster IP is not twice-NATed) come back through it. On VPP 25.10
//     with one thread NAT44-ED found those replies through the session's
//     flow on the outside feature alone; the inside feature costs nothing
//     and keeps them translated where that lookup would not (worker
//     handoff between the two features was not tried).
//  2. NAT forwarding: without it, NAT44-ED's in2out node drops the plain
//     traffic of inside interfaces (pods) that matches no session and no
//     mapping; with it, such traffic passes untranslated.
//  3. The twice-NAT pool holds exactly the node's IPv4 NAT loopback, the
//     source of twice-NATed and self-twice-NATed traffic: VPP picks any
//     address of the pool, so a stale one would be used too.
//  4. The service network (service CIDRs, the NAT loopback, the sinks and
//     the frontends the node's kernel refuses to the node's own clients).
//  5. The NAT roles of pods.
func (r *Renderer) syncNode(ctx context.Context, ch api.Channel, ifs vpp.NodeInterfaces) error {
	if ifs.Uplink != vpp.NoInterface {
		if err := r.dp.SetNodeNATRole(ctx, vpp.Uplink, vpp.NATFrontend|vpp.NATBackend); err != nil {
			return fmt.Errorf("NAT44 service renderer: %w", err)
		}
	}
	if err := r.dp.SetNodeNATRole(ctx, vpp.HostInterconnect, vpp.NATFrontend|vpp.NATBackend); err != nil {
		return fmt.Errorf("NAT44 service renderer: %w", err)
	}
	if err := vppapi.Call(ch, &nat44_ed.Nat44ForwardingEnableDisable{Enable: true}, &nat44_ed.Nat44ForwardingEnableDisableReply{}); err != nil {
		return fmt.Errorf("NAT44 service renderer: enable NAT forwarding: %w", err)
	}
	loopback := r.natLoopback()
	if err := r.syncTwiceNATPool(ch, loopback); err != nil {
		return err
	}
	if err := r.syncServiceNetwork(ctx, true); err != nil {
		return err
	}
	return r.syncPodRoles(ctx, true)
}

// syncServiceNetwork tells the dataplane the service network: the service
// CIDRs, the NAT loopback, the sinks and the frontends refused through the
// reject sink; always, or only when the refused frontends changed.
func (r *Renderer) syncServiceNetwork(ctx context.Context, always bool) error {
	if !always && !r.refusedChanged {
		return nil
	}
	var cidrs []netip.Prefix
	for _, p := range r.cfg.ServiceCIDRs {
		if p.Addr().Is4() {
			cidrs = append(cidrs, p.Masked())
		}
	}
	refused := make([]vpp.Frontend, 0, len(r.refused))
	for _, k := range slices.SortedFunc(maps.Keys(r.refused), compareKeys) {
		refused = append(refused, vpp.Frontend{Addr: k.Addr, Protocol: k.Proto, Port: k.Port})
	}
	net := vpp.ServiceNetwork{CIDRs: cidrs, Source: r.natLoopback(), Sinks: true, Refused: refused, NodePorts: r.nodePorts()}
	if err := r.dp.SetServiceNetwork(ctx, net); err != nil {
		r.refusedChanged = true
		return fmt.Errorf("NAT44 service renderer: set the service network: %w", err)
	}
	r.refusedChanged = false
	return nil
}

// nodePorts are the node ports of every service, each once (a port two
// services claim goes to the first by namespace and name), sorted.
func (r *Renderer) nodePorts() []vpp.NodePort {
	type key struct {
		proto uint8
		port  uint16
	}
	seen := map[key]bool{}
	var out []vpp.NodePort
	for _, id := range slices.SortedFunc(maps.Keys(r.perService), service.ID.Compare) {
		for _, np := range r.perService[id].nodePorts {
			if k := (key{np.Protocol, np.Port}); !seen[k] {
				seen[k] = true
				out = append(out, np)
			}
		}
	}
	slices.SortFunc(out, func(a, b vpp.NodePort) int {
		if c := cmp.Compare(a.Protocol, b.Protocol); c != 0 {
			return c
		}
		return cmp.Compare(a.Port, b.Port)
	})
	return out
}

// natLoopback is the node's IPv4 NAT loopback (invalid without one).
func (r *Renderer) natLoopback() netip.Addr {
	for _, a := range r.node.NATLoopback {
		if a.Is4() {
			return a
		}
	}
	return netip.Addr{}
}

func (r *Renderer) syncTwiceNATPool(ch api.Channel, loopback netip.Addr) error {
	var pool []netip.Addr
	err := vppapi.Dump(ch, &nat44_ed.Nat44AddressDump{}, func() *nat44_ed.Nat44AddressDetails { return &nat44_ed.Nat44AddressDetails{} },
		func(d *nat44_ed.Nat44AddressDetails) {
			if d.Flags&nat_types.NAT_IS_TWICE_NAT != 0 {
				pool = append(pool, fromIP4(d.IPAddress))
			}
		})
	if err != nil {
		return fmt.Errorf("NAT44 service renderer: dump NAT addresses: %w", err)
	}
	for _, a := range pool {
		if a == loopback {
			continue
		}
		r.log.Info("Removing an address from the twice-NAT pool", "address", a, "natLoopback", loopback)
		if err := vppapi.Call(ch, twiceNATAddress(a, false), &nat44_ed.Nat44AddDelAddressRangeReply{}); err != nil {
			return fmt.Errorf("NAT44 service renderer: remove %s from the twice-NAT pool: %w", a, err)
		}
	}
	if !loopback.IsValid() {
		r.log.Info("The node has no IPv4 NAT loopback: hairpin and twice-NATed service traffic will fail")
	} else if !slices.Contains(pool, loopback) {
		if err := vppapi.Call(ch, twiceNATAddress(loopback, true), &nat44_ed.Nat44AddDelAddressRangeReply{}); err != nil {
			return fmt.Errorf("NAT44 service renderer: add the NAT loopback %s to the twice-NAT pool: %w", loopback, err)
		}
	}
	return nil
}

// twiceNATAddress adds or removes a in the twice-NAT pool, for every VRF
// (vrf_id ~0, as the CLI's default).
func twiceNATAddress(a netip.Addr, isAdd bool) *nat44_ed.Nat44AddDelAddressRange {
	return &nat44_ed.Nat44AddDelAddressRange{FirstIPAddress: ip4(a), LastIPAddress: ip4(a), VrfID: ^uint32(0),
		IsAdd: isAdd, Flags: nat_types.NAT_IS_TWICE_NAT}
}

// syncPodRoles tells the dataplane which pods back services, when that
// changed (or always).
func (r *Renderer) syncPodRoles(ctx context.Context, always bool) error {
	if !always && r.podBackends != nil && !r.backendsChanged {
		return nil
	}
	backends := slices.SortedFunc(maps.Keys(r.backends), netip.Addr.Compare)
	if backends == nil {
		backends = []netip.Addr{}
	}
	if err := r.dp.SetPodNATRoles(ctx, backends); err != nil {
		r.podBackends = nil
		return fmt.Errorf("NAT44 service renderer: set the NAT roles of %d backend pods: %w", len(backends), err)
	}
	r.podBackends, r.backendsChanged = backends, false
	return nil
}
