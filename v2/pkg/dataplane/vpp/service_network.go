package vpp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"go.fd.io/govpp/binapi/fib_types"
	"go.fd.io/govpp/binapi/ip"
)

// SetServiceNetwork records net as desired state and, when VPP is synced,
// routes it now; every resync routes it again (a restarted VPP, or a new
// host interconnect, has lost it). While VPP is not synced it only records
// it.
func (d *driver) SetServiceNetwork(ctx context.Context, net ServiceNetwork) error {
	if s := net.Source; s.IsValid() && !s.Is4() {
		return fmt.Errorf("service network: source %s is not IPv4", s)
	}
	if s := net.SourceIPv6; s.IsValid() && !s.Is6() {
		return fmt.Errorf("service network: IPv6 source %s is not IPv6", s)
	}
	for _, p := range net.CIDRs {
		if !p.IsValid() {
			return errors.New("service network: a CIDR is invalid")
		}
	}
	for _, f := range net.Refused {
		if !f.Addr.Is4() || (f.Protocol != 6 && f.Protocol != 17) || f.Port == 0 {
			return fmt.Errorf("service network: refused frontend %v protocol %d port %d: want IPv4, TCP (6) or UDP (17) and a port", f.Addr, f.Protocol, f.Port)
		}
	}
	for _, np := range net.NodePorts {
		if (np.Protocol != 6 && np.Protocol != 17) || np.Port == 0 || !(np.ClusterIP.Is4() || (net.IPv6 && np.ClusterIP.Is6())) || np.ClusterPort == 0 {
			return fmt.Errorf("service network: node port %d protocol %d to %v port %d: want TCP (6) or UDP (17), ports and an IPv4 cluster IP (or IPv6, with IPv6 Services)", np.Port, np.Protocol, np.ClusterIP, np.ClusterPort)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.serviceNet = ServiceNetwork{CIDRs: slices.Clone(net.CIDRs), Source: net.Source, SourceIPv6: net.SourceIPv6, IPv6: net.IPv6, Sinks: net.Sinks, Refused: slices.Clone(net.Refused), NodePorts: slices.Clone(net.NodePorts)}
	d.serviceNetKnown = true
	if !d.synced {
		return nil
	}
	if err := d.syncServiceNetwork(ctx); err != nil {
		return fmt.Errorf("route the service network: %w", err)
	}
	return nil
}

// serviceCIDRs are the service CIDRs, masked; without IPv6 Services, IPv6
// ones are dropped (logged once): NAT44-ED serves IPv4 only. The caller
// holds d.mu.
func (d *driver) serviceCIDRs() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range d.serviceNet.CIDRs {
		if !p.Addr().Is4() && !d.serviceNet.IPv6 {
			if !d.loggedIPv6 {
				d.loggedIPv6 = true
				d.log.Info("IPv6 service CIDRs are not routed into VPP: its NAT44 serves IPv4 services only", "cidr", p)
			}
			continue
		}
		if m := p.Masked(); !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return out
}

// serviceRoute is one route of the service network in VPP.
type serviceRoute struct {
	dst  netip.Prefix
	drop bool // else via the node's end of the host interconnect
}

// syncServiceNetwork makes the node's kernel and VPP route the service
// network: the kernel (through the kernel interface) sends the service
// CIDRs into VPP with the NAT loopback as source and holds the sinks'
// rules; VPP sends the CIDRs, the NAT loopback and the reject sink back to
// the kernel and drops the drop sink. VPP's routes to the node's end of
// the interconnect that are not wanted (an earlier CIDR or NAT loopback)
// are deleted: only the service network and the default route use that
// next hop. The caller holds d.mu.
func (d *driver) syncServiceNetwork(ctx context.Context) error {
	if !d.serviceNetKnown {
		return nil
	}
	net := d.serviceNet
	cidrs := d.serviceCIDRs()
	kerr := d.kernel.SyncServiceNetwork(ctx, ServiceNetwork{CIDRs: cidrs, Source: net.Source, SourceIPv6: net.SourceIPv6, IPv6: net.IPv6,
		Sinks: net.Sinks, Refused: net.Refused, NodePorts: net.NodePorts})

	var want []serviceRoute
	for _, p := range cidrs {
		want = append(want, serviceRoute{dst: p})
	}
	if net.Source.IsValid() {
		want = append(want, serviceRoute{dst: hostPrefix(net.Source)})
	}
	if net.SourceIPv6.IsValid() {
		want = append(want, serviceRoute{dst: hostPrefix(net.SourceIPv6)})
	}
	if net.Sinks {
		want = append(want, serviceRoute{dst: hostPrefix(RejectSinkIPv4)}, serviceRoute{dst: hostPrefix(DropSinkIPv4), drop: true})
	}
	have, err := d.serviceRoutes()
	if err != nil {
		return errors.Join(kerr, err)
	}
	errs := []error{kerr}
	hostOf := func(p netip.Prefix) netip.Addr {
		if p.Addr().Is6() {
			return InterconnectHostIPv6.Addr()
		}
		return InterconnectHostIPv4.Addr()
	}
	for _, r := range have {
		if slices.Contains(want, r) {
			continue
		}
		path := viaPath(d.node.interconnect, hostOf(r.dst))
		if r.drop {
			path = dropPath(r.dst.Addr())
		}
		if err := delRoute(d.ch, r.dst, path); err != nil {
			errs = append(errs, err)
		}
	}
	for _, r := range want {
		if slices.Contains(have, r) {
			continue
		}
		path := viaPath(d.node.interconnect, hostOf(r.dst))
		if r.drop {
			path = dropPath(r.dst.Addr())
		}
		if err := addRoute(d.ch, r.dst, path); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// serviceRoutes reads VPP's main tables and returns the routes that are
// the service network's: through the host interconnect to the node's end
// (except the default routes), and the drop sink's drop. Only the service
// network and the default routes use that next hop.
func (d *driver) serviceRoutes() ([]serviceRoute, error) {
	var out []serviceRoute
	for _, host := range []netip.Addr{InterconnectHostIPv4.Addr(), InterconnectHostIPv6.Addr()} {
		err := apiRoutes(d.ch, 0, host.Is6(),
			func(r *ip.IPRouteV2) {
				p := fromVPPPrefix(r.Prefix)
				// The interconnect's own entries (its subnet, the node
				// end's neighbor) are not service routes.
				if p.Bits() == 0 || len(r.Paths) != 1 || p.Overlaps(InterconnectVPPIPv4.Masked()) || (p.Addr().Is6() && p.Addr().IsLinkLocalUnicast()) {
					return
				}
				path := r.Paths[0]
				nh := netip.AddrFrom4(path.Nh.Address.GetIP4())
				if host.Is6() {
					nh = netip.AddrFrom16(path.Nh.Address.GetIP6())
				}
				switch {
				case path.Type == fib_types.FIB_API_PATH_TYPE_DROP && p == hostPrefix(DropSinkIPv4):
					out = append(out, serviceRoute{dst: p, drop: true})
				case path.Type == fib_types.FIB_API_PATH_TYPE_NORMAL && path.SwIfIndex == d.node.interconnect && nh == host:
					out = append(out, serviceRoute{dst: p})
				}
			})
		if err != nil {
			return nil, fmt.Errorf("list VPP's routes: %w", err)
		}
	}
	return out, nil
}
