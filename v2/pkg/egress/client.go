package egress

import (
	"cmp"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/vcoil/vcoil/v2/pkg/constants"
)

// clientLink is one device of a client pod's plan.
type clientLink struct {
	name  string
	kind  string // "vxlan", "ipip", "ip6tnl"
	alias string
	mtu   int
	// vxlan
	vni uint32
	mac net.HardwareAddr
	// remote is the tunnel's remote end; invalid for a FoU fallback
	// receiver, which accepts from any remote.
	remote netip.Addr
	// local is a FoU tunnel's local address.
	local netip.Addr
	// sport is the FoU source port, 0 for one per flow.
	sport uint16
}

type clientRoute struct {
	dst  netip.Prefix
	link string
	gw   netip.Addr // VXLAN: the virtual gateway
	src  netip.Addr
}

type clientNeigh struct {
	link string
	ip   netip.Addr
	mac  net.HardwareAddr
}

type clientRule struct {
	v6       bool
	priority int
	table    int
	dst      netip.Prefix // invalid: from all
}

// clientPlan is the complete egress state of a client pod's namespace.
type clientPlan struct {
	links  []clientLink
	routes []clientRoute
	neighs []clientNeigh
	rules  []clientRule
	// fou are the families (netlink.FAMILY_V4, _V6) whose FoU port must
	// be open for replies.
	fou []int
	nft bool
}

// planClient turns cfg into the kernel objects it needs; uplinkMTU is the
// MTU of the pod's interface. It is pure, and it is where cfg is
// validated.
func planClient(cfg ClientConfig, uplinkMTU int) (clientPlan, error) {
	var p clientPlan
	if len(cfg.Egresses) == 0 {
		return p, nil // removing needs no addresses
	}
	if err := checkPodIPs(cfg.PodIPs); err != nil {
		return p, err
	}
	podIPs := sortAddrs(cfg.PodIPs)
	pod4, has4 := addrOf(podIPs, true)
	pod6, has6 := addrOf(podIPs, false)
	podAddr := func(who string, d netip.Prefix) (netip.Addr, error) {
		if d.Addr().Is4() && has4 {
			return pod4, nil
		}
		if d.Addr().Is6() && has6 {
			return pod6, nil
		}
		return netip.Addr{}, invalid("%s: destination %v is %s but the pod has no %s address", who, d, familyName(familyOf(d.Addr())), familyName(familyOf(d.Addr())))
	}
	for _, e := range cfg.Excluded {
		if !e.IsValid() {
			return p, invalid("excluded network %v is not a valid prefix", e)
		}
	}

	type owned struct {
		dst    netip.Prefix
		egress string
	}
	var all []owned
	seen := map[string]bool{}
	var fou4, fou6 bool
	var serviceIPs []netip.Addr
	egs := slices.Clone(cfg.Egresses)
	slices.SortFunc(egs, func(a, b ClientEgress) int { return cmp.Compare(a.Egress.String(), b.Egress.String()) })
	for _, eg := range egs {
		who := "Egress " + eg.Egress.String()
		if eg.Egress.Name == "" || eg.Egress.Namespace == "" {
			return p, invalid("an Egress without namespace or name (%q)", eg.Egress.String())
		}
		if seen[eg.Egress.String()] {
			return p, invalid("%s is listed twice", who)
		}
		seen[eg.Egress.String()] = true
		dests, err := checkDestinations(who, eg.Destinations)
		if err != nil {
			return p, err
		}
		if len(eg.ServiceIPs) == 0 {
			return p, invalid("%s has no Service address", who)
		}
		for _, s := range eg.ServiceIPs {
			if !s.IsValid() || s.Zone() != "" || s.Is4In6() {
				return p, invalid("%s: Service address %v is not a plain IPv4 or IPv6 address", who, s)
			}
		}
		svc := sortAddrs(eg.ServiceIPs)
		serviceIPs = append(serviceIPs, svc...)
		for _, d := range dests {
			all = append(all, owned{d, eg.Egress.String()})
		}
		alias := clientAlias(eg.Egress)
		switch eg.Kind {
		case KindVXLAN:
			remote := svc[0]
			if (remote.Is4() && !has4) || (remote.Is6() && !has6) {
				return p, invalid("%s: Service address %s is %s but the pod has no %s address", who, remote, familyName(familyOf(remote)), familyName(familyOf(remote)))
			}
			overhead := vxlanOverhead4
			if remote.Is6() {
				overhead = vxlanOverhead6
			}
			vni := VNI(eg.Egress)
			name := clientLinkName(eg.Egress, "x")
			p.links = append(p.links, clientLink{name: name, kind: "vxlan", alias: alias, mtu: uplinkMTU - overhead,
				vni: vni, mac: ClientMAC(podIPs), remote: remote})
			var gw4, gw6 bool
			for _, d := range dests {
				src, err := podAddr(who, d)
				if err != nil {
					return p, err
				}
				gw := gatewayIPv4
				if d.Addr().Is6() {
					gw, gw6 = gatewayIPv6, true
				} else {
					gw4 = true
				}
				p.routes = append(p.routes, clientRoute{dst: d, link: name, gw: gw, src: src})
			}
			if gw4 {
				p.neighs = append(p.neighs, clientNeigh{link: name, ip: gatewayIPv4, mac: RouterMAC(vni)})
			}
			if gw6 {
				p.neighs = append(p.neighs, clientNeigh{link: name, ip: gatewayIPv6, mac: RouterMAC(vni)})
			}
		case KindFoU:
			var sport uint16 = fouPort
			if eg.FoUSourcePortAuto {
				sport = 0
			}
			for _, s := range svc {
				local, ok := addrOf(podIPs, s.Is4())
				if !ok {
					continue // the pod cannot use this family's Service address
				}
				kind, suffix, overhead := "ipip", "4", fouOverhead4
				if s.Is6() {
					kind, suffix, overhead = "ip6tnl", "6", fouOverhead6
					fou6 = true
				} else {
					fou4 = true
				}
				p.links = append(p.links, clientLink{name: clientLinkName(eg.Egress, suffix), kind: kind, alias: alias,
					mtu: uplinkMTU - overhead, remote: s, local: local, sport: sport})
			}
			for _, d := range dests {
				src, err := podAddr(who, d)
				if err != nil {
					return p, err
				}
				if _, ok := addrOf(svc, d.Addr().Is4()); !ok {
					return p, invalid("%s: destination %v needs an %s Service address for a FoU tunnel", who, d, familyName(familyOf(d.Addr())))
				}
				suffix := "4"
				if d.Addr().Is6() {
					suffix = "6"
				}
				p.routes = append(p.routes, clientRoute{dst: d, link: clientLinkName(eg.Egress, suffix), src: src})
			}
		default:
			return p, invalid("%s: unknown encapsulation %q (want fou or vxlan)", who, eg.Kind)
		}
	}
	// Destinations of two Egresses must not overlap: one table holds them.
	slices.SortFunc(all, func(a, b owned) int { return comparePrefixes(a.dst, b.dst) })
	for i := range all {
		for j := i + 1; j < len(all) && all[i].dst.Overlaps(all[j].dst); j++ {
			if all[i].egress != all[j].egress {
				return p, invalid("destination %v of Egress %s overlaps destination %v of Egress %s",
					all[i].dst, all[i].egress, all[j].dst, all[j].egress)
			}
		}
	}
	if fou4 {
		p.links = append(p.links, clientLink{name: clientFallback4, kind: "ipip", alias: fallbackAlias, mtu: uplinkMTU - fouOverhead4, local: pod4, sport: fouPort})
		p.fou = append(p.fou, netlink.FAMILY_V4)
	}
	if fou6 {
		p.links = append(p.links, clientLink{name: clientFallback6, kind: "ip6tnl", alias: fallbackAlias, mtu: uplinkMTU - fouOverhead6, local: pod6, sport: fouPort})
		p.fou = append(p.fou, netlink.FAMILY_V6)
	}
	for _, l := range p.links {
		if l.mtu < 576 {
			return p, invalid("the pod's interface MTU %d leaves %d for tunnel %s", uplinkMTU, l.mtu, l.name)
		}
	}
	slices.SortFunc(p.links, func(a, b clientLink) int { return cmp.Compare(a.name, b.name) })
	slices.SortFunc(p.routes, func(a, b clientRoute) int { return comparePrefixes(a.dst, b.dst) })

	// Rules, per family that has destinations: the cluster's networks and
	// the Services' addresses (the tunnels' own packets) to main, then
	// everything else through the egress table.
	for _, v6 := range []bool{false, true} {
		if !slices.ContainsFunc(p.routes, func(r clientRoute) bool { return r.dst.Addr().Is6() == v6 }) {
			continue
		}
		var excl []netip.Prefix
		for _, e := range cfg.Excluded {
			if e.Addr().Is6() == v6 {
				excl = append(excl, e.Masked())
			}
		}
		for _, s := range serviceIPs {
			if s.Is6() == v6 {
				excl = append(excl, hostPrefix(s))
			}
		}
		slices.SortFunc(excl, comparePrefixes)
		excl = slices.Compact(excl)
		for _, e := range excl {
			p.rules = append(p.rules, clientRule{v6: v6, priority: constants.EgressExcludeRulePriority, table: unix.RT_TABLE_MAIN, dst: e})
		}
		p.rules = append(p.rules, clientRule{v6: v6, priority: constants.EgressRulePriority, table: constants.EgressTable})
	}
	p.nft = len(p.links) > 0
	return p, nil
}
