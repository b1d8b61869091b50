package vpp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/internal/ipnet"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/kernelns"
	"github.com/vcoil/vcoil/v2/pkg/nft"
)

// SyncServiceNetwork makes the node's side of the service network net: the
// /32 addresses of the host interconnect first (a route's source must be
// local), then the routes, the sink replies' rule and the nftables table.
// It holds no state: what it made is recognised by the route protocol, the
// /32 prefix length on the interconnect, the rule's table and the table's
// name, so that a restarted vcoild cleans up after its predecessor.
func (k *netlinkKernel) SyncServiceNetwork(ctx context.Context, net ServiceNetwork) error {
	node, host, err := k.openHost()
	if err != nil {
		return fmt.Errorf("service network: %w", err)
	}
	defer node.Close()
	var addrs []netip.Prefix
	if net.Source.IsValid() {
		addrs = append(addrs, hostPrefix(net.Source))
	}
	if net.Sinks {
		addrs = append(addrs, hostPrefix(RejectSinkIPv4))
	}
	if err := syncHostAddresses(node, host, true, addrs); err != nil {
		return err
	}
	var addrs6 []netip.Prefix
	if net.IPv6 && net.SourceIPv6.IsValid() {
		addrs6 = append(addrs6, hostPrefix(net.SourceIPv6))
	}
	if err := syncHostAddresses(node, host, false, addrs6); err != nil {
		return err
	}
	if len(addrs) > 0 {
		// VPP hands the kernel packets from the NAT loopback, which the
		// kernel holds (the node's own clients of a refused frontend), and
		// from clients whose routes do not point at the interconnect.
		if err := node.SetSysctls(
			kernelns.Sysctl{Key: "net/ipv4/conf/" + HostInterconnectName + "/accept_local", Value: "1"},
			kernelns.Sysctl{Key: "net/ipv4/conf/" + HostInterconnectName + "/rp_filter", Value: "2"},
		); err != nil {
			return err
		}
	}
	if err := syncServiceRoutes(node, host, net); err != nil {
		return err
	}
	if err := syncSinkReplies(node, host, net.Sinks); err != nil {
		return err
	}
	if err := syncServiceTable(ctx, node, net); err != nil {
		return err
	}
	return syncServiceTable6(ctx, node, net)
}

// syncHostAddresses makes the interconnect's host addresses of one family
// (IPv4 /32s, or IPv6 /128s) exactly want; its IPv4 /30 and IPv6
// link-local address stay. IPv6 ones go without duplicate address
// detection: the link is VPP's.
func syncHostAddresses(node *kernelns.Namespace, host netlink.Link, ipv4 bool, want []netip.Prefix) error {
	family, bits, flags := netlink.FAMILY_V4, 32, 0
	if !ipv4 {
		family, bits, flags = netlink.FAMILY_V6, 128, unix.IFA_F_NODAD
	}
	have, err := node.NL.AddrList(host, family)
	if err != nil {
		return fmt.Errorf("list addresses of %s in %s: %w", HostInterconnectName, node.Path, err)
	}
	var present []netip.Prefix
	for _, a := range have {
		p, ok := ipnet.Prefix(a.IPNet)
		if !ok || p.Bits() != bits || (!ipv4 && p.Addr().IsLinkLocalUnicast()) {
			continue
		}
		if slices.Contains(want, p) {
			present = append(present, p)
			continue
		}
		if err := node.NL.AddrDel(host, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("delete %s from %s in %s: %w", p, HostInterconnectName, node.Path, err)
		}
	}
	for _, p := range want {
		if slices.Contains(present, p) {
			continue
		}
		if err := node.NL.AddrAdd(host, &netlink.Addr{IPNet: kernelns.IPNet(p), Flags: flags}); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("add %s to %s in %s: %w", p, HostInterconnectName, node.Path, err)
		}
	}
	return nil
}

// syncServiceRoutes makes the routes of protocol ServiceRouteProtocol in
// the main table exactly net's CIDRs via VPP's end of the interconnect,
// with net.Source (IPv4) or net.SourceIPv6 (IPv6) as their source.
func syncServiceRoutes(node *kernelns.Namespace, host netlink.Link, net ServiceNetwork) error {
	for _, fam := range []struct {
		family   int
		v4       bool
		src, via netip.Addr
	}{
		{netlink.FAMILY_V4, true, net.Source, InterconnectVPPIPv4.Addr()},
		{netlink.FAMILY_V6, false, net.SourceIPv6, InterconnectVPPIPv6},
	} {
		var cidrs []netip.Prefix
		for _, p := range net.CIDRs {
			if p.Addr().Is4() == fam.v4 {
				cidrs = append(cidrs, p)
			}
		}
		existing, err := node.NL.RouteListFiltered(fam.family,
			&netlink.Route{Table: unix.RT_TABLE_MAIN, Protocol: ServiceRouteProtocol}, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			return fmt.Errorf("list service routes in %s: %w", node.Path, err)
		}
		var src []byte
		if fam.src.IsValid() {
			src = fam.src.AsSlice()
		}
		for _, r := range existing {
			p, ok := ipnet.Prefix(r.Dst)
			if ok && slices.Contains(cidrs, p) && r.LinkIndex == host.Attrs().Index && r.Src.Equal(src) {
				continue
			}
			if err := node.NL.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("delete service route %v in %s: %w", r.Dst, node.Path, err)
			}
		}
		for _, p := range cidrs {
			r := netlink.Route{
				LinkIndex: host.Attrs().Index, Dst: kernelns.IPNet(p), Gw: fam.via.AsSlice(),
				Src: src, Table: unix.RT_TABLE_MAIN, Protocol: ServiceRouteProtocol,
			}
			if err := node.NL.RouteReplace(&r); err != nil {
				return fmt.Errorf("add route %s via %s dev %s src %s in %s: %w", p, fam.via, HostInterconnectName, fam.src, node.Path, err)
			}
		}
	}
	return nil
}

// syncSinkReplies routes what the kernel sends from the reject sink back
// into VPP (rule "from RejectSinkIPv4 lookup SinkReplyTable", whose
// default route goes through the interconnect), or removes both.
func syncSinkReplies(node *kernelns.Namespace, host netlink.Link, on bool) error {
	rules, err := node.NL.RuleListFiltered(netlink.FAMILY_V4, &netlink.Rule{Table: SinkReplyTable}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("list routing rules in %s: %w", node.Path, err)
	}
	sink := hostPrefix(RejectSinkIPv4)
	found := false
	for _, r := range rules {
		if p, ok := ipnet.Prefix(r.Src); on && ok && p == sink && r.Dst == nil && !found {
			found = true
			continue
		}
		if err := node.NL.RuleDel(&r); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("delete routing rule to table %d in %s: %w", SinkReplyTable, node.Path, err)
		}
	}
	route := netlink.Route{
		LinkIndex: host.Attrs().Index, Dst: kernelns.IPNet(netip.MustParsePrefix("0.0.0.0/0")),
		Gw: InterconnectVPPIPv4.Addr().AsSlice(), Table: SinkReplyTable, Protocol: ServiceRouteProtocol,
	}
	if !on {
		if err := node.NL.RouteDel(&route); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("delete the default route of table %d in %s: %w", SinkReplyTable, node.Path, err)
		}
		return nil
	}
	if err := node.NL.RouteReplace(&route); err != nil {
		return fmt.Errorf("add default via %s dev %s table %d in %s: %w", InterconnectVPPIPv4.Addr(), HostInterconnectName, SinkReplyTable, node.Path, err)
	}
	if !found {
		r := netlink.NewRule()
		r.Family = netlink.FAMILY_V4
		r.Src = kernelns.IPNet(sink)
		r.Table = SinkReplyTable
		if err := node.NL.RuleAdd(r); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("add rule from %s lookup %d in %s: %w", RejectSinkIPv4, SinkReplyTable, node.Path, err)
		}
	}
	return nil
}

// refusedSet holds net.Refused as "address . protocol . port".
const refusedSet = "refused"

// serviceRules are the nftables table's chains, sets and rules: the input
// hook refuses every connection to the reject sink (a TCP reset, an ICMP
// port unreachable otherwise), the forward hook refuses what arrives from
// VPP for a service CIDR (a cluster IP port no mapping translates, which
// VPP routes back to the kernel: without the rule it would loop), and the
// output hook refuses the node's own connections to net.Refused; a NAT
// chain on the output hook sends the node's own connections to its node
// ports to their cluster IPs (net.NodePorts).
func serviceRules(net ServiceNetwork) (chains []*knftables.Chain, sets []*knftables.Set, maps []*knftables.Map, elements []*knftables.Element, rules []*knftables.Rule) {
	chain := func(name string, hook knftables.BaseChainHook) *knftables.Chain {
		return &knftables.Chain{Name: name, Type: knftables.PtrTo(knftables.FilterType), Hook: knftables.PtrTo(hook),
			Priority: knftables.PtrTo(knftables.FilterPriority)}
	}
	refuse := func(chainName, match string) {
		rules = append(rules,
			&knftables.Rule{Chain: chainName, Rule: match + " meta l4proto tcp reject with tcp reset"},
			&knftables.Rule{Chain: chainName, Rule: match + " reject with icmp type port-unreachable"})
	}
	chains = append(chains, chain("input", knftables.InputHook))
	refuse("input", "ip daddr "+RejectSinkIPv4.String())
	var cidrs []string
	for _, p := range net.CIDRs {
		if p.Addr().Is4() { // the IPv6 ones are serviceRules6's
			cidrs = append(cidrs, p.String())
		}
	}
	if len(cidrs) > 0 {
		chains = append(chains, chain("forward", knftables.ForwardHook))
		refuse("forward", fmt.Sprintf("iifname %q ip daddr { %s }", HostInterconnectName, strings.Join(cidrs, ", ")))
	}
	if len(net.Refused) > 0 {
		chains = append(chains, chain("output", knftables.OutputHook))
		sets = append(sets, &knftables.Set{Name: refusedSet, Type: "ipv4_addr . inet_proto . inet_service"})
		for _, f := range net.Refused {
			elements = append(elements, &knftables.Element{Set: refusedSet,
				Key: []string{f.Addr.String(), strconv.Itoa(int(f.Protocol)), strconv.Itoa(int(f.Port))}})
		}
		refuse("output", "ip daddr . meta l4proto . th dport @"+refusedSet)
	}
	// The node's own addresses only: not loopback (kube-proxy's nftables
	// mode has no localhost node ports either), not the link-local ones of
	// the interconnect and the sinks.
	nodePortRules(net.NodePorts, true, "ip daddr != { 127.0.0.0/8, 169.254.0.0/16 }", &chains, &maps, &elements, &rules)
	return chains, sets, maps, elements, rules
}

// The output chain and map that send the node's own connections to its
// node ports to their cluster IPs (ServiceNetwork.NodePorts).
const (
	nodePortChain = "nodeports"
	nodePortMap   = "nodeports"
)

// serviceTableKind names ServiceTable in its format set's comment ("vcoil
// vpp-services v2", formatversion.KernelTable; format 1 had no format set).
const serviceTableKind = "vpp-services"

// syncServiceTable replaces the table ip ServiceTable in one transaction
// (deleted and made again), or deletes it without sinks; a table of a
// newer format is refused (formatversion.NewerError) and left unchanged. The
// table holds nothing but what is rendered from the ServiceNetwork, so a
// format 1 table is replaced like any other. knftables runs
// nft, which starts in the namespace of the thread that forks it: package
// nft runs it on a thread inside the node's namespace.
func syncServiceTable(ctx context.Context, node *kernelns.Namespace, net ServiceNetwork) error {
	if _, err := exec.LookPath("nft"); err != nil {
		if !net.Sinks {
			return nil // without nft, no table was made either
		}
		return fmt.Errorf("the service network's sinks need nft: %w", err)
	}
	var fill func(*knftables.Transaction)
	if net.Sinks {
		fill = func(tx *knftables.Transaction) {
			chains, sets, maps, elements, rules := serviceRules(net)
			for _, c := range chains {
				tx.Add(c)
			}
			for _, st := range sets {
				tx.Add(st)
			}
			for _, m := range maps {
				tx.Add(m)
			}
			for _, e := range elements {
				tx.Add(e)
			}
			for _, r := range rules {
				tx.Add(r)
			}
		}
	}
	return replaceNodeTable(ctx, node, ServiceTable, serviceTableKind,
		"vcoil: refusals of service frontends that VPP sends to the node", fill)
}

// serviceRules6 are the IPv6 table's chains, maps and rules, with IPv6
// Services: the forward hook refuses what VPP sends back for an IPv6
// service CIDR (a port no translation serves: without it, it would loop),
// and a NAT chain on the output hook sends the node's own connections to
// its IPv6 node ports to their IPv6 cluster IPs. Nil without IPv6.
func serviceRules6(net ServiceNetwork) (chains []*knftables.Chain, maps []*knftables.Map, elements []*knftables.Element, rules []*knftables.Rule) {
	if !net.IPv6 {
		return nil, nil, nil, nil
	}
	var cidrs []string
	for _, p := range net.CIDRs {
		if p.Addr().Is6() {
			cidrs = append(cidrs, p.String())
		}
	}
	if len(cidrs) > 0 {
		chains = append(chains, &knftables.Chain{Name: "forward", Type: knftables.PtrTo(knftables.FilterType), Hook: knftables.PtrTo(knftables.ForwardHook),
			Priority: knftables.PtrTo(knftables.FilterPriority)})
		match := fmt.Sprintf("iifname %q ip6 daddr { %s }", HostInterconnectName, strings.Join(cidrs, ", "))
		rules = append(rules,
			&knftables.Rule{Chain: "forward", Rule: match + " meta l4proto tcp reject with tcp reset"},
			&knftables.Rule{Chain: "forward", Rule: match + " reject with icmpv6 type port-unreachable"})
	}
	nodePortRules(net.NodePorts, false, "ip6 daddr != { ::1, fe80::/10 }", &chains, &maps, &elements, &rules)
	return chains, maps, elements, rules
}

// nodePortRules adds the output NAT chain and map that send the node's own
// connections to its node ports of one family to their cluster IPs, for
// destinations that match notLocal.
func nodePortRules(all []NodePort, ipv4 bool, notLocal string, chains *[]*knftables.Chain, maps *[]*knftables.Map, elements *[]*knftables.Element, rules *[]*knftables.Rule) {
	family, addrType := "ip", "ipv4_addr"
	if !ipv4 {
		family, addrType = "ip6", "ipv6_addr"
	}
	var nodePorts []NodePort
	for _, np := range all {
		if np.ClusterIP.Is4() == ipv4 {
			nodePorts = append(nodePorts, np)
		}
	}
	if len(nodePorts) == 0 {
		return
	}
	*chains = append(*chains, &knftables.Chain{Name: nodePortChain, Type: knftables.PtrTo(knftables.NATType),
		Hook: knftables.PtrTo(knftables.OutputHook), Priority: knftables.PtrTo(knftables.DNATPriority)})
	*maps = append(*maps, &knftables.Map{Name: nodePortMap, Type: "inet_proto . inet_service : " + addrType + " . inet_service"})
	for _, np := range nodePorts {
		*elements = append(*elements, &knftables.Element{Map: nodePortMap,
			Key:   []string{strconv.Itoa(int(np.Protocol)), strconv.Itoa(int(np.Port))},
			Value: []string{np.ClusterIP.String(), strconv.Itoa(int(np.ClusterPort))}})
	}
	*rules = append(*rules, &knftables.Rule{Chain: nodePortChain,
		Rule: notLocal + " fib daddr type local dnat " + family + " to meta l4proto . th dport map @" + nodePortMap})
}

// syncServiceTable6 replaces the table ip6 ServiceTable (serviceRules6),
// or deletes it without IPv6 Services.
func syncServiceTable6(ctx context.Context, node *kernelns.Namespace, net ServiceNetwork) error {
	chains, maps, elements, rules := serviceRules6(net)
	if _, err := exec.LookPath("nft"); err != nil {
		if len(chains) == 0 {
			return nil
		}
		return fmt.Errorf("IPv6 Services of the node itself need nft: %w", err)
	}
	var fill func(*knftables.Transaction)
	if len(chains) > 0 {
		fill = func(tx *knftables.Transaction) {
			for _, c := range chains {
				tx.Add(c)
			}
			for _, m := range maps {
				tx.Add(m)
			}
			for _, e := range elements {
				tx.Add(e)
			}
			for _, r := range rules {
				tx.Add(r)
			}
		}
	}
	return replaceNodeTableOf(ctx, node, knftables.IPv6Family, ServiceTable, serviceTableKind,
		"vcoil: the node's own IPv6 clients of Services, into VPP", fill)
}

// replaceNodeTable replaces the node's table ip name in one transaction
// with a table of kind (formatversion.KernelTable) holding what fill adds,
// or deletes it when fill is nil (nft.Replace). A newer vcoild's table is
// refused and left as it is.
func replaceNodeTable(ctx context.Context, node *kernelns.Namespace, name, kind, comment string, fill func(*knftables.Transaction)) error {
	return replaceNodeTableOf(ctx, node, knftables.IPv4Family, name, kind, comment, fill)
}

// replaceNodeTableOf is replaceNodeTable for a table of family.
func replaceNodeTableOf(ctx context.Context, node *kernelns.Namespace, family knftables.Family, name, kind, comment string, fill func(*knftables.Transaction)) error {
	t, err := nft.Open(node.NS, family, name, nil)
	if err != nil {
		return fmt.Errorf("in %s: %w", node.Path, err)
	}
	defer t.Close()
	if err := nft.Replace(ctx, t, kind, formatversion.KernelTable, comment, fill); err != nil {
		return fmt.Errorf("write nftables table %s %s in %s: %w", family, name, node.Path, err)
	}
	return nil
}
