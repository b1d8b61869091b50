package router

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/vcoil/vcoil/v2/internal/ipnet"
	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
)

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

func prefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, p := range s {
		out[i] = netip.MustParsePrefix(p)
	}
	return out
}

func TestAnAddressAnnouncedByManyNodesIsRoutedAcrossAllOfThemInItsFamily(t *testing.T) {
	n1 := Peer{Netns: "n1", NextHops: addrs("198.18.0.11", "fd00:18::11")}
	n2 := Peer{Netns: "n2", NextHops: addrs("198.18.0.12")}
	n3 := Peer{Netns: "n3", NextHops: addrs("198.18.0.13", "fd00:18::13")}
	got := LBRoutes([]Announcement{
		{Peer: n3, Prefixes: prefixes("198.18.32.5/32", "fd00:32::5/128")},
		{Peer: n1, Prefixes: prefixes("198.18.32.5/32", "198.18.32.6/32", "fd00:32::5/128", "198.18.32.5/32")},
		// n2 has no IPv6 next hop: it cannot carry fd00:32::7.
		{Peer: n2, Prefixes: prefixes("198.18.32.5/32", "fd00:32::7/128")},
	})
	want := map[netip.Prefix][]netip.Addr{
		netip.MustParsePrefix("198.18.32.5/32"): addrs("198.18.0.11", "198.18.0.12", "198.18.0.13"),
		netip.MustParsePrefix("198.18.32.6/32"): addrs("198.18.0.11"),
		netip.MustParsePrefix("fd00:32::5/128"): addrs("fd00:18::11", "fd00:18::13"),
	}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Errorf("routes %v, want %v", got, want)
	}
	if got := LBRoutes(nil); len(got) != 0 {
		t.Errorf("nothing announced: routes %v", got)
	}
}

// lab is a fabric namespace with a bridge and two node namespaces on it,
// 198.18.0.11-.12 and fd00:18::11-12, with export tables, as the lab's.
// The router reads the nodes through netlink only.
type lab struct {
	fabric *netnstest.NS
	nodes  []*netnstest.NS
	router *LBRouter
}

func newLab(t *testing.T) *lab {
	netnstest.RequireRoot(t)
	l := &lab{fabric: netnstest.New(t, "fabric")}
	l.fabric.IP("link", "add", "br0", "type", "bridge")
	l.fabric.AddAddr("br0", "198.18.0.1/24")
	l.fabric.AddAddr("br0", "fd00:18::1/64")
	var peers []Peer
	for i := range 2 {
		n := netnstest.New(t, fmt.Sprintf("node%d", i+1))
		port := fmt.Sprintf("p-node%d", i+1)
		netnstest.Veth(t, l.fabric, port, n, "eth0")
		l.fabric.IP("link", "set", port, "master", "br0")
		n.AddAddr("eth0", fmt.Sprintf("198.18.0.%d/24", 11+i))
		n.AddAddr("eth0", fmt.Sprintf("fd00:18::%d/64", 11+i))
		l.nodes = append(l.nodes, n)
		peers = append(peers, Peer{Netns: n.Path(), NextHops: addrs(fmt.Sprintf("198.18.0.%d", 11+i), fmt.Sprintf("fd00:18::%d", 11+i))})
	}
	// The router gets a handle of its own: the test reads the fabric
	// through the namespace's while Run may be writing.
	ns, err := netns.GetFromPath(l.fabric.Path())
	if err != nil {
		t.Fatal(err)
	}
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	ns.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	l.router = NewLBRouter(h, peers, testr.New(t))
	t.Cleanup(l.router.Close)
	return l
}

// announce and withdraw change a node's export table as vcoild does.
func announce(n *netnstest.NS, addr string) {
	n.IP("route", "add", "blackhole", addr, "table", "119", "proto", "32")
}

func withdraw(n *netnstest.NS, addr string) {
	n.IP("route", "del", "blackhole", addr, "table", "119", "proto", "32")
}

// fabricRoutes reads the fabric's LoadBalancer routes as `ip route` shows
// them: "198.18.32.5/32 via 198.18.0.11 198.18.0.12".
func (l *lab) fabricRoutes(t *testing.T) map[string]string {
	t.Helper()
	rs, err := l.fabric.Netlink().RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: LBProtocol}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, r := range rs {
		dst, _ := ipnet.Prefix(r.Dst)
		var hops []string
		for _, h := range nextHopsOf(r) {
			hops = append(hops, h.String())
		}
		out[dst.String()] = strings.Join(hops, " ")
	}
	return out
}

func (l *lab) sync(t *testing.T) {
	t.Helper()
	if err := l.router.Sync(); err != nil {
		t.Fatal(err)
	}
}

func want(t *testing.T, got, want map[string]string) {
	t.Helper()
	if !maps.Equal(got, want) {
		t.Errorf("fabric routes %v, want %v", got, want)
	}
}

func TestTheFabricRoutesWhatTheNodesExportAndFollowsTheirChanges(t *testing.T) {
	l := newLab(t)
	n1, n2 := l.nodes[0], l.nodes[1]
	announce(n1, "198.18.32.5/32")
	announce(n1, "198.18.32.6/32")
	announce(n2, "198.18.32.5/32")
	announce(n1, "fd00:32::5/128")
	announce(n2, "fd00:32::5/128")
	// Not LoadBalancer addresses: a block (proto 30) in the export table,
	// and proto 32 in another table.
	n1.IP("route", "add", "blackhole", "198.19.0.0/27", "table", "119", "proto", "30")
	n2.IP("route", "add", "blackhole", "198.18.32.9/32", "table", "120", "proto", "32")
	// What the router left in the fabric before (a withdrawn address), and
	// a route that is not the router's.
	l.fabric.IP("route", "add", "198.18.32.7/32", "via", "198.18.0.12", "proto", fmt.Sprint(LBProtocol))
	l.fabric.IP("route", "add", "198.18.32.8/32", "via", "198.18.0.12", "proto", "static")

	l.sync(t)
	want(t, l.fabricRoutes(t), map[string]string{
		"198.18.32.5/32": "198.18.0.11 198.18.0.12",
		"198.18.32.6/32": "198.18.0.11",
		"fd00:32::5/128": "fd00:18::11 fd00:18::12",
	})
	if out := l.fabric.IP("route", "show", "198.18.32.8/32"); !strings.Contains(out, "via 198.18.0.12") {
		t.Errorf("the router removed a route that is not its own: %q", out)
	}
	// The kernel holds what it was asked: both next hops of one route.
	if out := l.fabric.IP("route", "show", "198.18.32.5/32"); !strings.Contains(out, "nexthop via 198.18.0.11") || !strings.Contains(out, "nexthop via 198.18.0.12") {
		t.Errorf("198.18.32.5 is not multipath in the fabric: %q", out)
	}

	// A sync that finds nothing changed changes nothing.
	l.sync(t)

	// Node 1 stops announcing .5 (its last local endpoint went), node 2
	// starts announcing .6, node 2 withdraws the IPv6 address.
	withdraw(n1, "198.18.32.5/32")
	announce(n2, "198.18.32.6/32")
	withdraw(n2, "fd00:32::5/128")
	l.sync(t)
	want(t, l.fabricRoutes(t), map[string]string{
		"198.18.32.5/32": "198.18.0.12",
		"198.18.32.6/32": "198.18.0.11 198.18.0.12",
		"fd00:32::5/128": "fd00:18::11",
	})

	// Nobody announces .5 and the IPv6 address any more.
	withdraw(n2, "198.18.32.5/32")
	withdraw(n1, "fd00:32::5/128")
	l.sync(t)
	want(t, l.fabricRoutes(t), map[string]string{"198.18.32.6/32": "198.18.0.11 198.18.0.12"})
}

func TestAPeerThatCannotBeReadKeepsWhatItAnnouncedLast(t *testing.T) {
	l := newLab(t)
	n1, n2 := l.nodes[0], l.nodes[1]
	announce(n1, "198.18.32.5/32")
	announce(n2, "198.18.32.5/32")
	l.sync(t)
	l.router.peers[1].Netns = "/nonexistent/netns"
	l.router.Close()
	announce(n1, "198.18.32.6/32")
	if err := l.router.Sync(); err == nil || !strings.Contains(err.Error(), "/nonexistent/netns") {
		t.Errorf("sync with an unreadable peer: error %v, want one naming it", err)
	}
	want(t, l.fabricRoutes(t), map[string]string{
		"198.18.32.5/32": "198.18.0.11 198.18.0.12",
		"198.18.32.6/32": "198.18.0.11",
	})
}

func TestRunLearnsAnAnnouncementWithinAFewPeriods(t *testing.T) {
	l := newLab(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.router.Run(ctx, 100*time.Millisecond)
	}()
	t.Cleanup(func() { cancel(); <-done })
	announce(l.nodes[1], "198.18.32.5/32")
	poll.Eventually(t, 5*time.Second, func() error {
		if got := l.fabricRoutes(t)["198.18.32.5/32"]; got != "198.18.0.12" {
			return fmt.Errorf("198.18.32.5/32 via %q", got)
		}
		return nil
	})
	withdraw(l.nodes[1], "198.18.32.5/32")
	poll.Eventually(t, 5*time.Second, func() error {
		if got := l.fabricRoutes(t); len(got) != 0 {
			return fmt.Errorf("routes left: %v", got)
		}
		return nil
	})
}

// The route the router writes carries traffic: with the lab's L4 multipath
// hash in the fabric, the connections of one external client to an address
// both nodes announce reach both nodes.
func TestConnectionsFromOneClientSpreadOverTheAnnouncingNodes(t *testing.T) {
	l := newLab(t)
	l.fabric.Sysctl("net.ipv4.ip_forward", "1")
	l.fabric.Sysctl("net.ipv4.fib_multipath_hash_policy", "1")
	ext := netnstest.New(t, "ext")
	netnstest.Veth(t, l.fabric, "ext0", ext, "eth0")
	l.fabric.AddAddr("ext0", "203.0.113.1/24")
	ext.AddAddr("eth0", "203.0.113.10/24")
	ext.IP("route", "add", "default", "via", "203.0.113.1")
	accepted := make([]chan struct{}, len(l.nodes))
	for i, n := range l.nodes {
		// The node serves the address itself, as vcoild's DNAT would.
		n.IP("addr", "add", "198.18.32.5/32", "dev", "lo")
		n.IP("route", "add", "default", "via", "198.18.0.1")
		announce(n, "198.18.32.5/32")
		ln := n.Listen("tcp4", "198.18.32.5:8080")
		accepted[i] = make(chan struct{}, 64)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted[i] <- struct{}{}
				c.Close()
			}
		}()
	}
	l.sync(t)
	const conns = 32
	for range conns {
		c, err := ext.Dial(t.Context(), "tcp4", "198.18.32.5:8080")
		if err != nil {
			t.Fatalf("external client to 198.18.32.5:8080: %v", err)
		}
		c.Close()
	}
	// Every connection was accepted by one node or the other.
	counts := make([]int, len(l.nodes))
	poll.Eventually(t, 5*time.Second, func() error {
		for i := range accepted {
			for len(accepted[i]) > 0 {
				<-accepted[i]
				counts[i]++
			}
		}
		if counts[0]+counts[1] != conns {
			return fmt.Errorf("accepted %v of %d connections", counts, conns)
		}
		return nil
	})
	// With the ports hashed, all 32 on one node has odds of 2^-31.
	if counts[0] == 0 || counts[1] == 0 {
		t.Errorf("connections per node %v: the multipath route did not spread them", counts)
	}
}
