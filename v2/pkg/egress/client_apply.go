package egress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/nft"
)

// ApplyClient makes the pod's netns (a path such as /var/run/netns/x or
// /proc/PID/ns/net) match cfg exactly and idempotently: one tunnel device
// per Egress (two for a dual-stack FoU Egress), routes of its destinations
// in constants.EgressTable, rules that send cfg.Excluded and the Services'
// addresses to the main table first, MTU = the pod interface's MTU minus
// the encapsulation's overhead, a TCP MSS clamp, loose reverse path
// filtering on the tunnel devices (off on the FoU fallback receivers, see
// rpOff). Empty cfg.Egresses removes everything vcoil's egress put there,
// and is done at once when the namespace is already gone. What already
// matches is left untouched, so a second call changes nothing and does not
// disturb traffic.
func ApplyClient(ctx context.Context, netnsPath string, cfg ClientConfig) error {
	if _, err := planClient(cfg, 1500); err != nil {
		return fmt.Errorf("egress of pod netns %s: %w", netnsPath, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	k, err := openKernel(netnsPath)
	var gone ns.NSPathNotExistErr
	if len(cfg.Egresses) == 0 && errors.As(err, &gone) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("egress of pod: %w", err)
	}
	defer k.Close()
	plan := clientPlan{}
	if len(cfg.Egresses) > 0 {
		uplink, err := k.linkOf(sortAddrs(cfg.PodIPs)[0])
		if err != nil {
			return fmt.Errorf("egress of pod netns %s: %w", netnsPath, err)
		}
		if plan, err = planClient(cfg, uplink.Attrs().MTU); err != nil {
			return fmt.Errorf("egress of pod netns %s: %w", netnsPath, err)
		}
	}
	if err := k.applyClient(ctx, plan); err != nil {
		return fmt.Errorf("egress of pod netns %s: %w", netnsPath, err)
	}
	return nil
}

func (k *kernel) applyClient(ctx context.Context, p clientPlan) error {
	// A newer vcoil's egress set this pod up: change nothing.
	if err := k.checkNFTFormat(ctx); err != nil {
		return err
	}
	// Removals of what no longer belongs first (rules before the routes and
	// links they lead to), then additions in an order in which each step
	// finds what it needs: links, FoU ports, neighbours, routes, rules.
	if err := k.syncRules(p.rules, false); err != nil {
		return err
	}
	links, err := k.syncClientLinks(p.links)
	if err != nil {
		return err
	}
	if err := k.syncFoUPorts(p.fou); err != nil {
		return err
	}
	if err := k.syncClientNeighs(links, p.neighs); err != nil {
		return err
	}
	if err := k.syncClientRoutes(links, p.routes); err != nil {
		return err
	}
	if err := k.syncRules(p.rules, true); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return k.syncClientNFT(ctx, p.nft)
}

// syncClientLinks deletes the package's links that are not in want or
// differ from it, creates the missing ones, and returns want's links by
// name.
func (k *kernel) syncClientLinks(want []clientLink) (map[string]netlink.Link, error) {
	have, err := k.ourLinks()
	if err != nil {
		return nil, err
	}
	out := map[string]netlink.Link{}
	for name, l := range have {
		i := slices.IndexFunc(want, func(w clientLink) bool { return w.name == name })
		if i >= 0 && linkMatches(l, want[i]) {
			out[name] = l
			continue
		}
		if err := k.deleteLink(l); err != nil {
			return nil, err
		}
	}
	for _, w := range want {
		if _, ok := out[w.name]; ok {
			if w.kind == "vxlan" {
				if err := k.vxlanDefaultFDB(out[w.name], w.remote); err != nil {
					return nil, err
				}
			}
			continue
		}
		rp := rpLoose
		if w.alias == fallbackAlias {
			rp = rpOff
		}
		l, err := k.addLink(w.netlinkLink(), w.alias, rp)
		if err != nil {
			return nil, err
		}
		if w.kind == "vxlan" {
			if err := k.vxlanDefaultFDB(l, w.remote); err != nil {
				return nil, err
			}
		}
		out[w.name] = l
	}
	return out, nil
}

// netlinkLink is the link to create for w.
func (w clientLink) netlinkLink() netlink.Link {
	la := netlink.NewLinkAttrs()
	la.Name = w.name
	la.MTU = w.mtu
	switch w.kind {
	case "vxlan":
		la.HardwareAddr = w.mac
		return &netlink.Vxlan{LinkAttrs: la, VxlanId: int(w.vni), Group: w.remote.AsSlice(), Port: vxlanPort, Learning: false}
	case "ipip":
		t := &netlink.Iptun{LinkAttrs: la, Local: w.local.AsSlice(), EncapType: tunnelEncapFoU, EncapDport: fouPort, EncapSport: w.sport, PMtuDisc: 1}
		if w.remote.IsValid() {
			t.Remote = w.remote.AsSlice()
		}
		return t
	default:
		t := &netlink.Ip6tnl{LinkAttrs: la, Local: w.local.AsSlice(), Proto: unix.IPPROTO_IPV6, Flags: ip6TnlIgnEncapLimit,
			EncapType: tunnelEncapFoU, EncapDport: fouPort, EncapSport: w.sport}
		if w.remote.IsValid() {
			t.Remote = w.remote.AsSlice()
		}
		return t
	}
}

// linkMatches says whether an existing link is w; any difference means
// deleting and recreating it.
func linkMatches(l netlink.Link, w clientLink) bool {
	a := l.Attrs()
	if a.Alias != w.alias || a.MTU != w.mtu || a.Flags&netUp == 0 {
		return false
	}
	switch t := l.(type) {
	case *netlink.Vxlan:
		return w.kind == "vxlan" && t.VxlanId == int(w.vni) && toAddr(t.Group) == w.remote && t.Port == vxlanPort &&
			!t.Learning && bytes.Equal(a.HardwareAddr, w.mac)
	case *netlink.Iptun:
		return w.kind == "ipip" && sameRemote(t.Remote, w.remote) && toAddr(t.Local) == w.local &&
			t.EncapType == tunnelEncapFoU && t.EncapDport == fouPort && t.EncapSport == w.sport
	case *netlink.Ip6tnl:
		return w.kind == "ip6tnl" && sameRemote(t.Remote, w.remote) && toAddr(t.Local) == w.local &&
			t.EncapType == tunnelEncapFoU && t.EncapDport == fouPort && t.EncapSport == w.sport
	}
	return false
}

// sameRemote compares a tunnel's remote end as the kernel reports it with
// the plan's, where none (a fallback receiver) is reported as the
// unspecified address.
func sameRemote(got net.IP, want netip.Addr) bool {
	if !want.IsValid() {
		return got == nil || got.IsUnspecified()
	}
	return toAddr(got) == want
}

// vxlanDefaultFDB makes sure the link's default FDB entry (all-zero MAC)
// points at remote, which the kernel creates from the link's remote.
func (k *kernel) vxlanDefaultFDB(l netlink.Link, remote netip.Addr) error {
	zero := make([]byte, 6)
	fdb, err := k.NL.NeighList(l.Attrs().Index, unix.AF_BRIDGE)
	if err != nil {
		return fmt.Errorf("list FDB of %s in %s: %w", l.Attrs().Name, k.Path, err)
	}
	for _, n := range fdb {
		if bytes.Equal(n.HardwareAddr, zero) && toAddr(n.IP) == remote {
			return nil
		}
	}
	n := &netlink.Neigh{LinkIndex: l.Attrs().Index, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
		State: netlink.NUD_PERMANENT | netlink.NUD_NOARP, IP: remote.AsSlice(), HardwareAddr: zero}
	if err := k.NL.NeighAppend(n); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("add FDB entry 00:00:00:00:00:00 dst %s on %s in %s: %w", remote, l.Attrs().Name, k.Path, err)
	}
	return nil
}

// syncFoUPorts opens the FoU port for each family in want (IPIP for IPv4,
// IPv6-in-IPv6 for IPv6) and closes the package's ports of other families.
func (k *kernel) syncFoUPorts(want []int) error {
	if len(want) == 0 {
		if _, err := netlink.FouFamilyId(); err != nil {
			return nil // no FoU in this kernel: nothing can be open
		}
	}
	h, err := k.genetlink()
	if err != nil {
		return err
	}
	for _, f := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		proto := unix.IPPROTO_IPIP
		if f == netlink.FAMILY_V6 {
			proto = unix.IPPROTO_IPV6
		}
		port := netlink.Fou{Family: f, Port: fouPort, Protocol: proto, EncapType: netlink.FOU_ENCAP_DIRECT}
		have, err := h.FouList(f)
		if err != nil {
			return fmt.Errorf("list %s FoU ports in %s: %w", familyName(f), k.Path, err)
		}
		open := slices.ContainsFunc(have, func(x netlink.Fou) bool { return x.Port == fouPort && x.Protocol == proto })
		switch {
		case slices.Contains(want, f) && !open:
			if err := h.FouAdd(port); err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("open %s FoU port %d ipproto %d in %s: %w", familyName(f), fouPort, proto, k.Path, err)
			}
		case !slices.Contains(want, f) && open:
			if err := h.FouDel(port); err != nil && ignoreGone(err) != nil {
				return fmt.Errorf("close %s FoU port %d in %s: %w", familyName(f), fouPort, k.Path, err)
			}
		}
	}
	return nil
}

// syncClientNeighs installs the static neighbours of the VXLAN gateways and
// removes other permanent neighbours from the package's VXLAN links.
func (k *kernel) syncClientNeighs(links map[string]netlink.Link, want []clientNeigh) error {
	for name, l := range links {
		if _, ok := l.(*netlink.Vxlan); !ok {
			continue
		}
		idx := l.Attrs().Index
		var wantHere []netlink.Neigh
		for _, w := range want {
			if w.link == name {
				wantHere = append(wantHere, netlink.Neigh{LinkIndex: idx, Family: familyOf(w.ip), State: netlink.NUD_PERMANENT,
					IP: w.ip.AsSlice(), HardwareAddr: w.mac})
			}
		}
		if err := k.syncNeighs(name, idx, wantHere); err != nil {
			return err
		}
	}
	return nil
}

// syncNeighs makes the permanent neighbours of one link exactly want.
func (k *kernel) syncNeighs(name string, idx int, want []netlink.Neigh) error {
	var have []netlink.Neigh
	for _, f := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		ns, err := k.NL.NeighList(idx, f)
		if err != nil {
			return fmt.Errorf("list neighbours of %s in %s: %w", name, k.Path, err)
		}
		for _, n := range ns {
			if n.State&netlink.NUD_PERMANENT != 0 {
				have = append(have, n)
			}
		}
	}
	for _, h := range have {
		if !slices.ContainsFunc(want, func(w netlink.Neigh) bool { return neighString(w) == neighString(h) }) {
			if err := ignoreGone(k.NL.NeighDel(&h)); err != nil {
				return fmt.Errorf("delete neighbour %s on %s in %s: %w", toAddr(h.IP), name, k.Path, err)
			}
		}
	}
	for _, w := range want {
		if slices.ContainsFunc(have, func(h netlink.Neigh) bool { return neighString(w) == neighString(h) }) {
			continue
		}
		if err := k.NL.NeighSet(&w); err != nil {
			return fmt.Errorf("add neighbour %s lladdr %s on %s in %s: %w", toAddr(w.IP), w.HardwareAddr, name, k.Path, err)
		}
	}
	return nil
}

func (r clientRoute) netlinkRoute(links map[string]netlink.Link) (netlink.Route, error) {
	l, ok := links[r.link]
	if !ok {
		return netlink.Route{}, fmt.Errorf("route %s: no link %s", r.dst, r.link)
	}
	nr := netlink.Route{LinkIndex: l.Attrs().Index, Dst: ipNet(r.dst), Src: r.src.AsSlice(), Table: constants.EgressTable,
		Family: familyOf(r.dst.Addr()), Scope: netlink.SCOPE_UNIVERSE}
	if r.gw.IsValid() {
		nr.Gw = r.gw.AsSlice()
		if r.gw.Is4() {
			// The gateway is on no subnet of the VXLAN link: its
			// neighbour entry is all the link needs.
			nr.Flags = int(netlink.FLAG_ONLINK)
		}
	} else {
		nr.Scope = netlink.SCOPE_LINK
	}
	return nr, nil
}

func routeString(r netlink.Route) string {
	return fmt.Sprintf("%s dev %d via %s src %s", toPrefix(r.Dst), r.LinkIndex, toAddr(r.Gw), toAddr(r.Src))
}

// syncClientRoutes makes the egress table hold exactly want.
func (k *kernel) syncClientRoutes(links map[string]netlink.Link, want []clientRoute) error {
	var wantNL []netlink.Route
	for _, w := range want {
		r, err := w.netlinkRoute(links)
		if err != nil {
			return err
		}
		wantNL = append(wantNL, r)
	}
	return k.syncTable(constants.EgressTable, wantNL)
}

// syncTable makes table hold exactly want (compared by destination,
// link, gateway and source).
func (k *kernel) syncTable(table int, want []netlink.Route) error {
	have, err := k.tableRoutes(table)
	if err != nil {
		return err
	}
	for _, h := range have {
		if h.Dst == nil || (h.Family == netlink.FAMILY_V6 && h.Type != unix.RTN_UNICAST) {
			continue // the kernel's own (none are expected)
		}
		if !slices.ContainsFunc(want, func(w netlink.Route) bool { return routeString(w) == routeString(h) }) {
			if err := ignoreGone(k.NL.RouteDel(&h)); err != nil {
				return fmt.Errorf("delete route %s table %d in %s: %w", toPrefix(h.Dst), table, k.Path, err)
			}
		}
	}
	for _, w := range want {
		if slices.ContainsFunc(have, func(h netlink.Route) bool { return routeString(w) == routeString(h) }) {
			continue
		}
		if err := k.NL.RouteReplace(&w); err != nil {
			return fmt.Errorf("add route %s table %d in %s: %w", toPrefix(w.Dst), table, k.Path, err)
		}
	}
	return nil
}

func ruleKey(v6 bool, priority, table int, dst netip.Prefix, iif string, mark uint32) string {
	return fmt.Sprintf("%t %d %d %s %s %#x", v6, priority, table, dst, iif, mark)
}

func (r clientRule) key() string { return ruleKey(r.v6, r.priority, r.table, r.dst, "", 0) }

func (r clientRule) netlinkRule() *netlink.Rule {
	nr := netlink.NewRule()
	nr.Family = netlink.FAMILY_V4
	if r.v6 {
		nr.Family = netlink.FAMILY_V6
	}
	nr.Priority = r.priority
	nr.Table = r.table
	if r.dst.IsValid() {
		nr.Dst = ipNet(r.dst)
	}
	return nr
}

func nlRuleKey(r netlink.Rule) string {
	return ruleKey(r.Family == netlink.FAMILY_V6, r.Priority, r.Table, toPrefix(r.Dst), r.IifName, r.Mark)
}

// syncRules deletes the client rules at the package's priorities that are
// not in want, or, with add, adds the missing ones.
func (k *kernel) syncRules(want []clientRule, add bool) error {
	have, err := k.rulesAt(constants.EgressExcludeRulePriority, constants.EgressRulePriority)
	if err != nil {
		return err
	}
	haveKeys := map[string]bool{}
	for _, h := range have {
		haveKeys[nlRuleKey(h)] = true
	}
	if !add {
		for _, h := range have {
			if !slices.ContainsFunc(want, func(w clientRule) bool { return w.key() == nlRuleKey(h) }) {
				if err := ignoreGone(k.NL.RuleDel(&h)); err != nil {
					return fmt.Errorf("delete rule %s in %s: %w", nlRuleKey(h), k.Path, err)
				}
			}
		}
		return nil
	}
	for _, w := range want {
		if haveKeys[w.key()] {
			continue
		}
		if err := k.NL.RuleAdd(w.netlinkRule()); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("add rule %s in %s: %w", w.key(), k.Path, err)
		}
	}
	return nil
}

// clampComment identifies the client's MSS clamp rule, so that a second
// ApplyClient finds it in place and leaves it.
const clampComment = "vcoil egress: clamp TCP MSS to the tunnel's MTU"

// clampRule clamps the MSS of SYNs leaving through a tunnel to the route's
// MTU: the pod's own stack already derives it from the tunnel's MTU, but
// an application that sets its own MSS, or a pod that forwards, would not.
const clampRule = `oifname "` + allLinksPat + `" tcp flags syn / syn,rst tcp option maxseg size set rt mtu`

// syncClientNFT makes the pod's egress table, whose format the caller
// checked.
func (k *kernel) syncClientNFT(ctx context.Context, want bool) error {
	if !want {
		return k.deleteNFTable(ctx)
	}
	t, err := k.nftTable()
	if err != nil {
		return err
	}
	c, err := t.Read(ctx)
	if err != nil {
		return fmt.Errorf("list nftables table %s in %s: %w", constants.EgressNFTable, k.Path, err)
	}
	if ch := c.Chains["postrouting"]; ch != nil && slices.Equal(ch.Rules, []string{clampComment}) && c.Sets[nft.FormatSet] != nil {
		return nil
	}
	// A format 1 table (the same rule, without the format set) gets the
	// set in this transaction; the rule is replaced in the same one.
	tx := t.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Add(nft.NewFormatSet(nftKind, formatversion.KernelTable))
	tx.Add(&knftables.Chain{Name: "postrouting", Type: knftables.PtrTo(knftables.FilterType),
		Hook: knftables.PtrTo(knftables.PostroutingHook), Priority: knftables.PtrTo(knftables.ManglePriority)})
	tx.Flush(&knftables.Chain{Name: "postrouting"})
	tx.Add(&knftables.Rule{Chain: "postrouting", Rule: clampRule, Comment: knftables.PtrTo(clampComment)})
	if err := t.Run(ctx, tx); err != nil {
		return fmt.Errorf("nftables table %s in %s: %w", constants.EgressNFTable, k.Path, err)
	}
	return nil
}
