package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/kernelns"
	"github.com/vcoil/vcoil/v2/pkg/nft"
)

// The fixed values of the tunnels.
const (
	fouPort   = 5555
	vxlanPort = 4789
	// Overheads of the encapsulations: outer IP header, UDP, and for VXLAN
	// its header and the inner Ethernet header.
	vxlanOverhead4 = 20 + 8 + 8 + 14
	vxlanOverhead6 = 40 + 8 + 8 + 14
	fouOverhead4   = 20 + 8
	fouOverhead6   = 40 + 8
	// tunnelEncapFoU is TUNNEL_ENCAP_FOU of linux/if_tunnel.h.
	tunnelEncapFoU = 1
	// ip6TnlIgnEncapLimit is IP6_TNL_F_IGN_ENCAP_LIMIT: no encapsulation
	// limit option, whose extra header would hide the inner protocol from
	// the FoU receiver (ipproto 41).
	ip6TnlIgnEncapLimit = 0x1
)

var (
	gatewayIPv4 = netip.MustParseAddr(constants.EgressGatewayIPv4)
	gatewayIPv6 = netip.MustParseAddr(constants.EgressGatewayIPv6)
)

// kernel is an open namespace: netlink (routes, links, neighbours, rules),
// generic netlink (FoU ports) and the egress nftables table.
type kernel struct {
	*kernelns.Namespace
	genl  *netlink.Handle // nil until FoU needs it
	table nft.Table       // nil until opened (nftTable)
}

func openKernel(path string) (*kernel, error) {
	n, err := kernelns.Open(path)
	if err != nil {
		return nil, err
	}
	return &kernel{Namespace: n}, nil
}

func (k *kernel) Close() {
	if k.table != nil {
		k.table.Close()
	}
	if k.genl != nil {
		k.genl.Close()
	}
	k.Namespace.Close()
}

// genetlink returns a generic netlink handle in the namespace: FoU ports
// are per namespace, and the route handle cannot carry them.
func (k *kernel) genetlink() (*netlink.Handle, error) {
	if k.genl == nil {
		h, err := netlink.NewHandleAt(netns.NsHandle(k.NS.Fd()), unix.NETLINK_GENERIC)
		if err != nil {
			return nil, fmt.Errorf("generic netlink socket in %s: %w", k.Path, err)
		}
		k.genl = h
	}
	return k.genl, nil
}

// nftTable opens the egress table of the namespace.
func (k *kernel) nftTable() (nft.Table, error) {
	if k.table == nil {
		t, err := nft.Open(k.NS, knftables.InetFamily, constants.EgressNFTable, routerLayouts)
		if err != nil {
			return nil, fmt.Errorf("in %s: %w", k.Path, err)
		}
		k.table = t
	}
	return k.table, nil
}

func (k *kernel) do(f func() error) error {
	return k.NS.Do(func(ns.NetNS) error { return f() })
}

// nftKind names the egress table in its format set's comment ("vcoil
// egress v2", formatversion.KernelTable). Format 1 tables, written before format
// versions, have no format set: a router starts from scratch and replaces
// its table, a client adds the set to its table in place.
const nftKind = "egress"

// checkNFTFormat refuses an egress table of a newer format than this
// vcoil's (formatversion.NewerError): it is neither changed nor deleted.
func (k *kernel) checkNFTFormat(ctx context.Context) error {
	t, err := k.nftTable()
	if err != nil {
		return err
	}
	if err := t.CheckFormat(ctx, nftKind, formatversion.KernelTable); err != nil {
		return fmt.Errorf("in %s: %w", k.Path, err)
	}
	return nil
}

// deleteNFTable deletes the egress table if it exists. Its callers have
// checked its format (checkNFTFormat) before changing anything.
func (k *kernel) deleteNFTable(ctx context.Context) error {
	t, err := k.nftTable()
	if err != nil {
		return err
	}
	if err := t.Delete(ctx); err != nil {
		return fmt.Errorf("delete nftables table %s in %s: %w", constants.EgressNFTable, k.Path, err)
	}
	return nil
}

// linkOf returns the link that holds addr: the pod's interface, whose MTU
// bounds the tunnels'.
func (k *kernel) linkOf(addr netip.Addr) (netlink.Link, error) {
	family := netlink.FAMILY_V4
	if addr.Is6() {
		family = netlink.FAMILY_V6
	}
	addrs, err := k.NL.AddrList(nil, family)
	if err != nil {
		return nil, fmt.Errorf("list addresses in %s: %w", k.Path, err)
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == addr {
			l, err := k.NL.LinkByIndex(a.LinkIndex)
			if err != nil {
				return nil, fmt.Errorf("link %d of address %s in %s: %w", a.LinkIndex, addr, k.Path, err)
			}
			return l, nil
		}
	}
	return nil, fmt.Errorf("no interface in %s holds the pod address %s", k.Path, addr)
}

// ourLinks lists the links whose alias says this package made them.
func (k *kernel) ourLinks() (map[string]netlink.Link, error) {
	links, err := k.NL.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links in %s: %w", k.Path, err)
	}
	out := map[string]netlink.Link{}
	for _, l := range links {
		if isOurs(l.Attrs().Alias) {
			out[l.Attrs().Name] = l
		}
	}
	return out, nil
}

func (k *kernel) deleteLink(l netlink.Link) error {
	if err := ignoreGone(k.NL.LinkDel(l)); err != nil {
		return fmt.Errorf("delete link %s in %s: %w", l.Attrs().Name, k.Path, err)
	}
	return nil
}

// Reverse path filtering on tunnel devices (rp_filter; the kernel applies
// the larger of "all" and the device's). A client's tunnel to an Egress is
// loose: replies come from destinations routed through that very device.
// Devices without an IPv4 address that receive what is routed elsewhere
// (a client's FoU fallback receivers, every router device: peers' routes
// are reached by packet mark only) drop everything under loose filtering
// (a source routed through another device, and no address to fall back
// on), so they have none.
const (
	rpLoose = "2"
	rpOff   = "0"
)

// addLink creates l, labels it with alias, sets its reverse path filtering
// and sets it up.
func (k *kernel) addLink(l netlink.Link, alias, rpFilter string) (netlink.Link, error) {
	name := l.Attrs().Name
	if err := k.NL.LinkAdd(l); err != nil {
		return nil, fmt.Errorf("create %s link %s in %s: %w", l.Type(), name, k.Path, err)
	}
	got, err := k.NL.LinkByName(name)
	if err != nil {
		return nil, fmt.Errorf("look up new link %s in %s: %w", name, k.Path, err)
	}
	if err := k.NL.LinkSetAlias(got, alias); err != nil {
		_ = k.NL.LinkDel(got)
		return nil, fmt.Errorf("set alias of link %s in %s: %w", name, k.Path, err)
	}
	if err := k.tunnelSysctls(name, rpFilter); err != nil {
		_ = k.NL.LinkDel(got)
		return nil, err
	}
	if err := k.NL.LinkSetUp(got); err != nil {
		_ = k.NL.LinkDel(got)
		return nil, fmt.Errorf("set link %s up in %s: %w", name, k.Path, err)
	}
	return got, nil
}

// tunnelSysctls sets a new tunnel device's reverse path filtering and, if
// the namespace has IPv6, turns off its IPv6 link-local address: the
// tunnels need none (the gateway's neighbour is static), and without it
// the device sends no router solicitations, multicast reports or duplicate
// address probes through the tunnel.
func (k *kernel) tunnelSysctls(name, rpFilter string) error {
	return k.do(func() error {
		rp := filepath.Join("/proc/sys/net/ipv4/conf", name, "rp_filter")
		if err := os.WriteFile(rp, []byte(rpFilter), 0o644); err != nil {
			return fmt.Errorf("sysctl %s=%s in %s: %w", rp, rpFilter, k.Path, err)
		}
		gen := filepath.Join("/proc/sys/net/ipv6/conf", name, "addr_gen_mode")
		if _, err := os.Stat(gen); err != nil {
			return nil // no IPv6
		}
		if err := os.WriteFile(gen, []byte("1"), 0o644); err != nil {
			return fmt.Errorf("sysctl %s=1 in %s: %w", gen, k.Path, err)
		}
		return nil
	})
}

// tableRoutes lists the routes of table, both families.
func (k *kernel) tableRoutes(table int) ([]netlink.Route, error) {
	var out []netlink.Route
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := k.NL.RouteListFiltered(family, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("list routes of table %d in %s: %w", table, k.Path, err)
		}
		out = append(out, rs...)
	}
	return out, nil
}

// rulesAt lists the rules of both families at the given priorities.
func (k *kernel) rulesAt(priorities ...int) ([]netlink.Rule, error) {
	var out []netlink.Rule
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rs, err := k.NL.RuleList(family)
		if err != nil {
			return nil, fmt.Errorf("list rules in %s: %w", k.Path, err)
		}
		for _, r := range rs {
			if slices.Contains(priorities, r.Priority) {
				r.Family = family
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// ignoreGone turns the errors of deleting something already gone into nil.
func ignoreGone(err error) error {
	var notFound netlink.LinkNotFoundError
	if errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ESRCH) || errors.Is(err, unix.ENOENT) || errors.As(err, &notFound) {
		return nil
	}
	return err
}

func ipNet(p netip.Prefix) *net.IPNet { return kernelns.IPNet(p) }

func hostPrefix(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

func toAddr(ip net.IP) netip.Addr {
	a, _ := netip.AddrFromSlice(ip)
	return a.Unmap()
}

func toPrefix(n *net.IPNet) netip.Prefix {
	if n == nil {
		return netip.Prefix{}
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(toAddr(n.IP), ones)
}

func familyOf(a netip.Addr) int {
	if a.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

func familyName(family int) string {
	if family == netlink.FAMILY_V6 {
		return "IPv6"
	}
	return "IPv4"
}

// neighString identifies a neighbour or an FDB entry for comparison.
func neighString(n netlink.Neigh) string {
	return fmt.Sprintf("%d %s %s", n.LinkIndex, toAddr(n.IP), strings.ToLower(n.HardwareAddr.String()))
}

// netUp is net.FlagUp, the up flag of a link's attributes.
const netUp = net.FlagUp
