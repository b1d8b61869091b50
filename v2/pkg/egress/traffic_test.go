package egress_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/linux"
	"github.com/vcoil/vcoil/v2/pkg/egress"
	"github.com/vcoil/vcoil/v2/pkg/service"
	svcnft "github.com/vcoil/vcoil/v2/pkg/service/renderer/nftables"
)

// The egress lab: a node namespace wired by vcoil's Linux dataplane, with
// a client pod, two router pods and a server pod (the "cluster address"),
// all dual-stack, of pools 10.1.0.0/24 and 2001:db8:10::/64; vcoil's
// nftables service renderer serves the routers' Service (ClusterIPs
// 10.96.0.50 and 2001:db8:96::50, UDP 4789 and 5555, ClientIP affinity).
// Two external hosts hang off the node: 203.0.113.10 and 2001:db8:113::10
// (in the Egress's destinations), 198.51.100.10 and 2001:db8:100::10
// (not). Every server answers TCP 7000 with the source address it sees and
// echoes TCP 7001. The node does not masquerade, so the external hosts see
// who really sent.
const (
	serviceIP  = "10.96.0.50"
	serviceIP6 = "2001:db8:96::50"
	idemIP     = "10.1.0.30"
	extNet     = "203.0.113.0/24"
	extNet6    = "2001:db8:113::/64"
	otherNet   = "198.51.100.0/24"
	otherNet6  = "2001:db8:100::/64"
	// Destinations that cover the cluster's pods, which the exclusions
	// must beat.
	clusterNet  = "10.0.0.0/8"
	clusterNet6 = "2001:db8:10::/48"
)

// family holds the lab's addresses of one IP family.
type family struct {
	name                         string
	client, server, ext, other   string
	routers                      []string
	extNet, otherNet, clusterNet string
}

var (
	ipv4 = family{name: "IPv4", client: "10.1.0.5", server: "10.1.0.20", ext: "203.0.113.10", other: "198.51.100.10",
		routers: []string{"10.1.0.11", "10.1.0.12"}, extNet: extNet, otherNet: otherNet, clusterNet: clusterNet}
	ipv6 = family{name: "IPv6", client: "2001:db8:10::5", server: "2001:db8:10::20", ext: "2001:db8:113::10", other: "2001:db8:100::10",
		routers: []string{"2001:db8:10::11", "2001:db8:10::12"}, extNet: extNet6, otherNet: otherNet6, clusterNet: clusterNet6}
	families = []family{ipv4, ipv6}
)

var labEgress = types.NamespacedName{Namespace: "egns", Name: "nat"}

type lab struct {
	t       testing.TB
	kind    egress.Kind
	node    *netnstest.NS
	ext     *netnstest.NS
	other   *netnstest.NS
	client  *netnstest.NS
	server  *netnstest.NS
	dp      dataplane.Dataplane
	svc     svcnft.Renderer
	routers map[int]*labRouter // by index in family.routers
}

type labRouter struct {
	ns  *netnstest.NS
	pod dataplane.Pod
	r   *egress.Router
}

func newLab(t testing.TB, kind egress.Kind) *lab {
	t.Helper()
	netnstest.RequireRoot(t)
	l := &lab{t: t, kind: kind, node: netnstest.New(t, "egnode"), ext: netnstest.New(t, "egext"), other: netnstest.New(t, "egother"),
		routers: map[int]*labRouter{}}
	// Hosts answer at once, not after duplicate address detection of their
	// link-local addresses: a first IPv6 connection would otherwise wait
	// for a retransmission.
	for _, ns := range []*netnstest.NS{l.node, l.ext, l.other} {
		ns.Sysctl("net.ipv6.conf.default.accept_dad", "0")
		ns.Sysctl("net.ipv6.conf.all.accept_dad", "0")
	}
	for i, h := range []struct {
		ns   *netnstest.NS
		link string
		addr func(family) string
		net  func(family) string
	}{
		{l.ext, "ext0", func(f family) string { return f.ext }, func(f family) string { return f.extNet }},
		{l.other, "other0", func(f family) string { return f.other }, func(f family) string { return f.otherNet }},
	} {
		netnstest.Veth(t, l.node, h.link, h.ns, "up0")
		nodeIP, hostIP := fmt.Sprintf("198.18.%d.1", i+1), fmt.Sprintf("198.18.%d.2", i+1)
		nodeIP6, hostIP6 := fmt.Sprintf("2001:db8:18:%d::1", i+1), fmt.Sprintf("2001:db8:18:%d::2", i+1)
		l.node.AddAddr(h.link, nodeIP+"/24")
		l.node.AddAddr(h.link, nodeIP6+"/64")
		h.ns.AddAddr("up0", hostIP+"/24")
		h.ns.AddAddr("up0", hostIP6+"/64")
		h.ns.IP("addr", "add", h.addr(ipv4)+"/32", "dev", "lo")
		h.ns.IP("addr", "add", h.addr(ipv6)+"/128", "dev", "lo")
		h.ns.IP("route", "add", "default", "via", nodeIP)
		h.ns.IP("-6", "route", "add", "default", "via", nodeIP6)
		l.node.IP("route", "add", h.net(ipv4), "via", hostIP)
		l.node.IP("-6", "route", "add", h.net(ipv6), "via", hostIP6)
	}
	var err error
	l.dp, err = linux.New(linux.Config{NodeNetns: l.node.Path(), MTU: 1500}, testr.NewWithInterface(t, testr.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.dp.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	l.client, _ = l.addPod("egclient", ipv4.client, ipv6.client)
	l.server, _ = l.addPod("egserver", ipv4.server, ipv6.server)
	for _, f := range families {
		serve(t, l.ext, f.ext)
		serve(t, l.other, f.other)
		serve(t, l.server, f.server)
	}

	l.svc, err = svcnft.New(svcnft.Config{Netns: l.node.Path(), PodIfPrefix: linux.HostIfPrefix}, testr.NewWithInterface(t, testr.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.svc.Close)
	for i := range ipv4.routers {
		ns, pod := l.addPod("egrouter", ipv4.routers[i], ipv6.routers[i])
		r := egress.NewRouter(egress.RouterConfig{
			Egress: labEgress, PodIPs: addrs(ipv4.routers[i], ipv6.routers[i]), NetnsPath: ns.Path(), FoU: kind == egress.KindFoU,
			Destinations: prefixes(extNet, clusterNet, extNet6, clusterNet6),
		}, testr.NewWithInterface(t, testr.Options{}))
		t.Cleanup(r.Close)
		if err := r.Setup(t.Context()); err != nil {
			t.Fatalf("Setup of router %s: %v", ipv4.routers[i], err)
		}
		if err := r.AddPeer(t.Context(), "uid-client", addrs(ipv4.client, ipv6.client)); err != nil {
			t.Fatal(err)
		}
		l.routers[i] = &labRouter{ns: ns, pod: pod, r: r}
	}
	l.renderService()
	l.applyClient(extNet, clusterNet, extNet6, clusterNet6)
	return l
}

// addPod wires a pod; v6 may be empty.
func (l *lab) addPod(label, v4, v6 string) (*netnstest.NS, dataplane.Pod) {
	l.t.Helper()
	ns := netnstest.New(l.t, label)
	pod := dataplane.Pod{PodKey: dataplane.PodKey{ContainerID: "c-" + label + v4, IfName: "eth0"}, Netns: ns.Path(), IPv4: netip.MustParseAddr(v4)}
	if v6 != "" {
		pod.IPv6 = netip.MustParseAddr(v6)
	}
	if _, err := l.dp.SetupPod(l.t.Context(), pod); err != nil {
		l.t.Fatalf("SetupPod %s: %v", label, err)
	}
	return ns, pod
}

// renderService gives the routers' Service the routers that are alive as
// endpoints, as vcoild would from the EndpointSlices.
func (l *lab) renderService() {
	l.t.Helper()
	var eps []service.Endpoint
	for i := range l.routers {
		for _, f := range families {
			eps = append(eps, service.Endpoint{Addr: netip.MustParseAddr(f.routers[i]), NodeName: "node1", Local: true, Ready: true, Serving: true})
		}
	}
	slices.SortFunc(eps, func(a, b service.Endpoint) int { return a.Addr.Compare(b.Addr) })
	port := func(name string, p uint16) service.Port {
		e := slices.Clone(eps)
		for i := range e {
			e[i].Port = p
		}
		return service.Port{Name: name, Protocol: service.UDP, Port: p, Endpoints: e, Cluster: e, HasEndpoints: len(e) > 0}
	}
	id := service.ID{Namespace: labEgress.Namespace, Name: labEgress.Name}
	st := &service.State{
		Node: service.Node{Name: "node1"},
		Services: map[service.ID]*service.Service{id: {
			ID: id, ClusterIPs: addrs(serviceIP, serviceIP6), AffinityTimeout: 3 * time.Hour,
			Ports: []service.Port{port("vxlan", 4789), port("fou", 5555)},
		}},
	}
	if err := l.svc.Resync(l.t.Context(), st); err != nil {
		l.t.Fatal(err)
	}
}

func (l *lab) clientConfig(dests ...string) egress.ClientConfig {
	return egress.ClientConfig{
		PodIPs: addrs(ipv4.client, ipv6.client),
		Egresses: []egress.ClientEgress{{
			Egress: labEgress, Kind: l.kind, ServiceIPs: addrs(serviceIP, serviceIP6), Destinations: prefixes(dests...),
		}},
		Excluded: prefixes("10.1.0.0/16", "10.96.0.0/12", "198.18.0.0/15", "2001:db8:10::/64", "2001:db8:96::/112", "2001:db8:18::/48"),
	}
}

func (l *lab) applyClient(dests ...string) {
	l.t.Helper()
	if err := egress.ApplyClient(l.t.Context(), l.client.Path(), l.clientConfig(dests...)); err != nil {
		l.t.Fatal(err)
	}
}

func (l *lab) setDestinations(dests ...string) {
	l.t.Helper()
	for i, r := range l.routers {
		if err := r.r.SetDestinations(l.t.Context(), prefixes(dests...)); err != nil {
			l.t.Fatalf("router %s: %v", ipv4.routers[i], err)
		}
	}
	l.applyClient(dests...)
}

// whoami connects from ns to addr:7000 and returns the source address the
// server saw.
func whoami(ctx context.Context, ns *netnstest.NS, addr string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := ns.Dial(ctx, "tcp", net.JoinHostPort(addr, "7000"))
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	b, err := io.ReadAll(c)
	return string(b), err
}

// expectSource waits until a new connection from the client to addr is
// seen from one of want, and returns it.
func (l *lab) expectSource(t *testing.T, timeout time.Duration, addr string, want ...string) string {
	t.Helper()
	var got string
	err := poll.Until(context.Background(), timeout, 50*time.Millisecond, func(ctx context.Context) error {
		var err error
		got, err = whoami(ctx, l.client, addr)
		if err != nil {
			return err
		}
		if !slices.Contains(want, got) {
			return fmt.Errorf("%s saw the client as %s, want one of %v", addr, got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// serve answers TCP 7000 with the peer's address and echoes TCP 7001 at
// addr in ns.
func serve(t testing.TB, ns *netnstest.NS, addr string) {
	who := ns.Listen("tcp", net.JoinHostPort(addr, "7000"))
	go func() {
		for {
			c, err := who.Accept()
			if err != nil {
				return
			}
			host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			_, _ = c.Write([]byte(host))
			_ = c.Close()
		}
	}()
	echo := ns.Listen("tcp", net.JoinHostPort(addr, "7001"))
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(20 * time.Second))
				_, _ = io.Copy(c, c)
			}()
		}
	}()
}

// echoMiB sends 1 MiB of random bytes to addr:7001 and checks that the
// same bytes come back.
func echoMiB(t *testing.T, ns *netnstest.NS, addr string) {
	t.Helper()
	payload := make([]byte, 1<<20)
	_, _ = rand.Read(payload)
	c, err := ns.Dial(t.Context(), "tcp", net.JoinHostPort(addr, "7001"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(payload)
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		werr <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("read the echo of 1 MiB from %s: %v (%d bytes)", addr, err, len(got))
	}
	if err := <-werr; err != nil {
		t.Fatalf("send 1 MiB to %s: %v", addr, err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("echo of 1 MiB from %s: %d bytes, not the ones sent", addr, len(got))
	}
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// routerTunnelTxBytes sums what the routers' tunnel devices have sent.
func (l *lab) routerTunnelTxBytes(t *testing.T) uint64 {
	t.Helper()
	var n uint64
	for i, r := range l.routers {
		links, err := r.ns.Netlink().LinkList()
		if err != nil {
			t.Fatalf("router %s: %v", ipv4.routers[i], err)
		}
		for _, link := range links {
			if strings.HasPrefix(link.Attrs().Name, "egr") && link.Attrs().Statistics != nil {
				n += link.Attrs().Statistics.TxBytes
			}
		}
	}
	return n
}

func TestVXLANEgress(t *testing.T) {
	testEgress(t, egress.KindVXLAN)
}

func TestFoUEgress(t *testing.T) {
	netnstest.RequireRoot(t)
	if err := egress.FoUAvailable(); err != nil {
		t.Skipf("skipped: this kernel cannot make FoU tunnels: %v", err)
	}
	testEgress(t, egress.KindFoU)
}

// testEgress runs the traffic checks in order on one lab; each step leaves
// the lab as the next expects.
func testEgress(t *testing.T, kind egress.Kind) {
	start := time.Now()
	l := newLab(t, kind)
	t.Logf("lab built in %v", time.Since(start).Round(time.Millisecond))

	t.Run("traffic to a destination leaves through a router, and 1 MiB goes through intact", func(t *testing.T) {
		for _, f := range families {
			begin := time.Now()
			got := l.expectSource(t, 10*time.Second, f.ext, f.routers...)
			t.Logf("%s: first connection through router %s after %v", f.name, got, time.Since(begin).Round(time.Millisecond))
			sent := l.routerTunnelTxBytes(t)
			echoMiB(t, l.client, f.ext)
			// The echo came back through the routers' tunnels, not
			// straight from the destination.
			if n := l.routerTunnelTxBytes(t) - sent; n < 1<<20 {
				t.Errorf("%s: the routers' tunnels sent %d bytes during the echo of 1 MiB, want at least 1 MiB", f.name, n)
			}
		}
		// The MTU of the tunnel leaves room for the encapsulation.
		want := map[egress.Kind]string{egress.KindVXLAN: "mtu 1450", egress.KindFoU: "mtu 1472"}[kind]
		if out := l.client.IP("-o", "link", "show", "type", map[egress.Kind]string{egress.KindVXLAN: "vxlan", egress.KindFoU: "ipip"}[kind]); !strings.Contains(out, want) {
			t.Errorf("client tunnel: %s, want %s", out, want)
		}
	})

	t.Run("traffic to other hosts and to cluster addresses keeps the client's address", func(t *testing.T) {
		for _, f := range families {
			l.expectSource(t, 5*time.Second, f.other, f.client)
			l.expectSource(t, 5*time.Second, f.server, f.client)
		}
	})

	t.Run("destinations change live", func(t *testing.T) {
		l.setDestinations(extNet, otherNet, clusterNet, extNet6, otherNet6, clusterNet6)
		for _, f := range families {
			l.expectSource(t, 5*time.Second, f.other, f.routers...)
			l.expectSource(t, 5*time.Second, f.ext, f.routers...)
		}
		l.setDestinations(extNet, clusterNet, extNet6, clusterNet6)
		for _, f := range families {
			l.expectSource(t, 5*time.Second, f.other, f.client)
			l.expectSource(t, 5*time.Second, f.ext, f.routers...)
		}
	})

	t.Run("a reused pod address keeps its peer entries until its last holder goes", func(t *testing.T) {
		client := addrs(ipv4.client, ipv6.client)
		for i, r := range l.routers {
			if err := r.r.AddPeer(t.Context(), "uid-b", client); err != nil {
				t.Fatal(err)
			}
			if got := r.r.Peers()[client[0]]; got != 2 {
				t.Fatalf("router %s: %s held by %d pods, want 2", ipv4.routers[i], client[0], got)
			}
			if err := r.r.RemovePeer(t.Context(), "uid-client"); err != nil {
				t.Fatal(err)
			}
			if got := r.r.Peers(); got[client[0]] != 1 || got[client[1]] != 1 {
				t.Fatalf("router %s: peers %v after the first holder left, want each address held once", ipv4.routers[i], got)
			}
			expectPeerEntries(t, kind, r.ns, true)
		}
		for _, f := range families {
			l.expectSource(t, 5*time.Second, f.ext, f.routers...)
			echoMiB(t, l.client, f.ext)
		}
		for i, r := range l.routers {
			if err := r.r.RemovePeer(t.Context(), "uid-b"); err != nil {
				t.Fatal(err)
			}
			if got := r.r.Peers(); len(got) != 0 {
				t.Fatalf("router %s: peers %v after both holders left, want none", ipv4.routers[i], got)
			}
			expectPeerEntries(t, kind, r.ns, false)
			if err := r.r.AddPeer(t.Context(), "uid-client", client); err != nil {
				t.Fatal(err)
			}
			expectPeerEntries(t, kind, r.ns, true)
		}
		l.expectSource(t, 5*time.Second, ipv4.ext, ipv4.routers...)
	})

	t.Run("a pod that is no client gets nothing through the routers' tunnels until it becomes one", func(t *testing.T) {
		l.intruderIsRefused(t)
	})

	t.Run("when a router dies new connections go through the other", func(t *testing.T) {
		dead := slices.Index(ipv4.routers, l.expectSource(t, 5*time.Second, ipv4.ext, ipv4.routers...))
		alive := 1 - dead
		r := l.routers[dead]
		r.ns.Remove()
		if err := l.dp.TeardownPod(t.Context(), r.pod); err != nil {
			t.Fatal(err)
		}
		delete(l.routers, dead)
		begin := time.Now()
		l.renderService()
		for _, f := range families {
			l.expectSource(t, 15*time.Second, f.ext, f.routers[alive])
			t.Logf("%s: router %s gone, new connections through %s after %v", f.name, f.routers[dead], f.routers[alive], time.Since(begin).Round(time.Millisecond))
			echoMiB(t, l.client, f.ext)
		}
	})
}

// expectPeerEntries checks a router's return path to the lab's client:
// for VXLAN the routes in table 118, the neighbours and the FDB entry; for
// FoU the routes in table 119 through the peer's own tunnels.
func expectPeerEntries(t *testing.T, kind egress.Kind, router *netnstest.NS, present bool) {
	t.Helper()
	mac := strings.ToLower(egress.ClientMAC(addrs(ipv4.client, ipv6.client)).String())
	type check struct{ what, out, want string }
	var checks []check
	switch kind {
	case egress.KindVXLAN:
		checks = []check{
			{"route", router.IP("-4", "route", "show", "table", "118"), ipv4.client + " dev egrx4 scope link"},
			{"route", router.IP("-6", "route", "show", "table", "118"), ipv6.client + " dev egrx4 metric 1024"},
			{"neighbour", router.IP("neigh", "show", "dev", "egrx4"), ipv4.client + " lladdr " + mac + " PERMANENT"},
			{"neighbour", router.IP("neigh", "show", "dev", "egrx4"), ipv6.client + " lladdr " + mac + " PERMANENT"},
			{"FDB entry", router.Exec("bridge", "fdb", "show", "dev", "egrx4"), mac + " dst " + ipv4.client + " self permanent"},
		}
	case egress.KindFoU:
		checks = []check{
			{"route", router.IP("-4", "route", "show", "table", "119"), ipv4.client + " dev egrf4"},
			{"route", router.IP("-6", "route", "show", "table", "119"), ipv6.client + " dev egrf6"},
		}
	}
	for _, c := range checks {
		if strings.Contains(c.out, c.want) != present {
			t.Errorf("router %s: %s %q present=%t, want %t; have:\n%s", router, c.what, c.want, !present, present, c.out)
		}
	}
}

// snapshot is what the idempotence test compares: links, rules, routes of
// every table, neighbours and nftables.
func snapshot(t *testing.T, ns *netnstest.NS) string {
	t.Helper()
	// IPv6 duplicate address detection ends on its own time and then adds
	// the address's local route: wait for it, so that two snapshots differ
	// only by what the code under test did.
	poll.Eventually(t, 10*time.Second, func() error {
		if out := strings.TrimSpace(ns.IP("-6", "addr", "show", "tentative")); out != "" {
			return fmt.Errorf("addresses still tentative in %s:\n%s", ns, out)
		}
		return nil
	})
	var b strings.Builder
	// Sections are sorted.
	section := func(title, out string) {
		lines := strings.Split(out, "\n")
		slices.Sort(lines)
		fmt.Fprintf(&b, "# %s\n%s\n", title, strings.Join(lines, "\n"))
	}
	for _, args := range [][]string{
		{"-d", "-o", "link", "show"},
		{"-4", "rule", "show"}, {"-6", "rule", "show"},
		{"-4", "route", "show", "table", "all"}, {"-6", "route", "show", "table", "all"},
		{"neigh", "show", "nud", "permanent"},
	} {
		section("ip "+strings.Join(args, " "), ns.IP(args...))
	}
	section("ip -o addr show", ns.IP("-o", "addr", "show"))
	section("bridge fdb show", ns.Exec("bridge", "fdb", "show"))
	fmt.Fprintf(&b, "# nft list ruleset\n%s", ns.Exec("nft", "list", "ruleset"))
	return b.String()
}

func TestApplyClientIsIdempotentAndUndoesItself(t *testing.T) {
	netnstest.RequireRoot(t)
	l := &lab{t: t, node: netnstest.New(t, "egnode")}
	var err error
	l.dp, err = linux.New(linux.Config{NodeNetns: l.node.Path(), MTU: 1500}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.dp.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	pod, _ := l.addPod("egidem", idemIP, "2001:db8:10::30")
	cfg := egress.ClientConfig{
		PodIPs: addrs(idemIP, "2001:db8:10::30"),
		Egresses: []egress.ClientEgress{
			{Egress: labEgress, Kind: egress.KindVXLAN, ServiceIPs: addrs(serviceIP, serviceIP6), Destinations: prefixes(extNet, extNet6)},
			{Egress: types.NamespacedName{Namespace: "egns", Name: "second"}, Kind: egress.KindVXLAN, ServiceIPs: addrs("10.96.0.51"), Destinations: prefixes(otherNet, otherNet6)},
		},
		Excluded: prefixes("10.1.0.0/16", "10.96.0.0/12", "2001:db8:10::/64", "2001:db8:96::/112"),
	}
	before := snapshot(t, pod)
	begin := time.Now()
	if err := egress.ApplyClient(t.Context(), pod.Path(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Logf("ApplyClient of two Egresses took %v", time.Since(begin).Round(time.Microsecond))
	first := snapshot(t, pod)
	for _, want := range []string{
		"egr", "vxlan id", "1990:\tfrom all to 10.1.0.0/16 lookup main", "1990:\tfrom all to 10.96.0.50 lookup main",
		"2000:\tfrom all lookup 118", extNet + " via 169.254.77.1 dev egr", "src " + idemIP,
		"169.254.77.1 dev egr", "tcp option maxseg size set rt mtu",
		"1990:\tfrom all to 2001:db8:10::/64 lookup main", "1990:\tfrom all to 2001:db8:96::50 lookup main",
		extNet6 + " via fe80::77:1 dev egr", "src 2001:db8:10::30", "fe80::77:1 dev egr",
		"dst 10.96.0.50 self permanent",
	} {
		if !strings.Contains(first, want) {
			t.Errorf("after ApplyClient the pod has no %q:\n%s", want, first)
		}
	}
	begin = time.Now()
	if err := egress.ApplyClient(t.Context(), pod.Path(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Logf("ApplyClient again, changing nothing, took %v", time.Since(begin).Round(time.Microsecond))
	if second := snapshot(t, pod); second != first {
		t.Errorf("a second ApplyClient changed the pod:\n--- first\n%s\n--- second\n%s", first, second)
	}
	// One Egress less: its device, routes and Service rule go.
	cfg.Egresses = cfg.Egresses[:1]
	if err := egress.ApplyClient(t.Context(), pod.Path(), cfg); err != nil {
		t.Fatal(err)
	}
	if one := snapshot(t, pod); strings.Contains(one, otherNet) || strings.Contains(one, otherNet6) || strings.Contains(one, "10.96.0.51") || strings.Count(one, "vxlan id") != 1 {
		t.Errorf("after removing an Egress the pod still has its objects:\n%s", one)
	}
	if err := egress.ApplyClient(t.Context(), pod.Path(), egress.ClientConfig{PodIPs: addrs(idemIP)}); err != nil {
		t.Fatal(err)
	}
	if after := snapshot(t, pod); after != before {
		t.Errorf("ApplyClient without Egresses did not restore the pod:\n--- before\n%s\n--- after\n%s", before, after)
	}
	// A pod gone has nothing left to remove; it cannot be set up.
	pod.Remove()
	if err := egress.ApplyClient(t.Context(), pod.Path(), egress.ClientConfig{}); err != nil {
		t.Errorf("removing the egress of a deleted namespace: %v", err)
	}
	if err := egress.ApplyClient(t.Context(), pod.Path(), cfg); err == nil || !strings.Contains(err.Error(), pod.Path()) {
		t.Errorf("setting up the egress of a deleted namespace: %v, want an error naming it", err)
	}
}

func TestARestartedRouterStartsFromScratchAndSetupCanBeRepeated(t *testing.T) {
	netnstest.RequireRoot(t)
	ns := netnstest.New(t, "egrouter")
	netnstest.Veth(t, ns, "eth0", netnstest.New(t, "egpeer"), "eth0")
	ns.AddAddr("eth0", "10.1.0.11/24")
	ns.AddAddr("eth0", "2001:db8:10::11/64")
	cfg := egress.RouterConfig{Egress: labEgress, PodIPs: addrs("10.1.0.11", "2001:db8:10::11"), NetnsPath: ns.Path(), Destinations: prefixes(extNet)}
	// Link indexes change when links are recreated; nothing else may.
	index := regexp.MustCompile(`(?m)^(\s*)\d+: `)
	state := func() string { return index.ReplaceAllString(snapshot(t, ns), "$1") }
	client := addrs("10.1.0.5", "2001:db8:10::5")

	first := egress.NewRouter(cfg, testr.New(t))
	// A peer added before Setup is installed by it.
	if err := first.AddPeer(t.Context(), "uid-a", client); err != nil {
		t.Fatal(err)
	}
	if err := first.Setup(t.Context()); err != nil {
		t.Fatal(err)
	}
	withPeer := state()
	for _, want := range []string{
		"10.1.0.5 dev egrx4 table 118 scope link", "2001:db8:10::5 dev egrx4 table 118",
		"1990:\tfrom all iif lo lookup main", "2000:\tfrom all fwmark 0x1000/0x3000 lookup 118",
		"ip daddr @dests4 masquerade", "elements = { 203.0.113.0/24 }", "vxlan id",
		// Tunnel packets only from the peers.
		"elements = { 10.1.0.5 }", "elements = { 2001:db8:10::5 }",
		`udp dport { 4789, 5555 } ip saddr != @clients4 counter name "unknown-clients" drop`,
		`udp dport { 4789, 5555 } ip6 saddr != @clients6 counter name "unknown-clients" drop`,
	} {
		if !strings.Contains(withPeer, want) {
			t.Errorf("the router's namespace has no %q:\n%s", want, withPeer)
		}
	}
	if err := first.SetDestinations(t.Context(), prefixes(extNet, otherNet)); err != nil {
		t.Fatal(err)
	}
	if got := state(); !strings.Contains(got, "elements = { 198.51.100.0/24, 203.0.113.0/24 }") {
		t.Errorf("SetDestinations did not reach the set:\n%s", got)
	}
	first.Close()

	// The next container of the pod finds the kernel state of the first:
	// it starts from scratch, without the peers it has not been told of.
	second := egress.NewRouter(cfg, testr.New(t))
	t.Cleanup(second.Close)
	if err := second.Setup(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := state(); strings.Contains(got, "10.1.0.5") || strings.Contains(got, "198.51.100.0/24") {
		t.Errorf("a new router kept the old one's peers or destinations:\n%s", got)
	}
	if err := second.AddPeer(t.Context(), "uid-a", client); err != nil {
		t.Fatal(err)
	}
	if got := state(); got != withPeer {
		t.Errorf("a new router with the same peer differs from the first:\n--- first\n%s\n--- second\n%s", withPeer, got)
	}
	// Setup again rebuilds the same state, peers included.
	if err := second.Setup(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := state(); got != withPeer {
		t.Errorf("a second Setup changed the router:\n--- before\n%s\n--- after\n%s", withPeer, got)
	}
	// An admission removed behind the router's back does not keep it
	// from removing the peer's others.
	ns.Exec("nft", "delete", "element", "inet", "vcoil-egress", "clients4", "{ 10.1.0.5 }")
	if err := second.RemovePeer(t.Context(), "uid-a"); err != nil {
		t.Fatalf("RemovePeer after its IPv4 admission was deleted by hand: %v", err)
	}
	if got := state(); strings.Contains(got, "10.1.0.5") || strings.Contains(got, "2001:db8:10::5") {
		t.Errorf("the removed peer left entries:\n%s", got)
	}
}

// The intruder: a pod of the lab's network that no router knows as a
// peer, with a tunnel of the client's kind to the routers' Service, the
// right VNI and all, as a compromised pod would make. probePort is where
// it sends; only it does, and the external hosts count what arrives there.
const (
	intruderIP  = "10.1.0.40"
	intruderIP6 = "2001:db8:10::40"
	probePort   = "7002"
)

// intruderIsRefused checks that the routers drop, and count, the tunnel
// packets of a pod that is no peer, that the lab's client keeps working
// meanwhile, that the pod's traffic goes through once it is a peer (the
// state of a client pod the routers learn of after its first packets), and
// that it is refused again once it is no longer one.
func (l *lab) intruderIsRefused(t *testing.T) {
	intruder, pod := l.addPod("egintruder", intruderIP, intruderIP6)
	t.Cleanup(func() { _ = l.dp.TeardownPod(context.Background(), pod) })
	cfg := l.clientConfig(extNet, clusterNet, extNet6, clusterNet6)
	cfg.PodIPs = addrs(intruderIP, intruderIP6)
	if err := egress.ApplyClient(t.Context(), intruder.Path(), cfg); err != nil {
		t.Fatal(err)
	}
	arrived := countArrivals(t, l.ext)

	// Two datagrams and a TCP connection per family; the routers must
	// count each outer packet, none may reach the external host.
	probe := func() int {
		before := l.unknownClientDrops(t)
		for _, f := range families {
			for range 2 {
				sendUDP(t, intruder, f.ext)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			if c, err := intruder.Dial(ctx, "tcp", net.JoinHostPort(f.ext, probePort)); err == nil {
				_ = c.Close()
				t.Errorf("%s: the intruder connected to %s through the routers", f.name, f.ext)
			}
			cancel()
		}
		want := uint64(3 * len(families))
		poll.Eventually(t, 5*time.Second, func() error {
			if n := l.unknownClientDrops(t) - before; n < want {
				return fmt.Errorf("the routers counted %d of the intruder's %d or more tunnel packets as unknown", n, want)
			}
			return nil
		})
		return int(want)
	}
	probe()
	// The client still goes through, and nothing of the intruder's came
	// out before it.
	for _, f := range families {
		l.expectSource(t, 5*time.Second, f.ext, f.routers...)
	}
	if n := arrived(); n != 0 {
		t.Fatalf("%d of the intruder's packets reached the external host through the routers", n)
	}

	// Once a peer, its traffic goes through: a client pod's first packets
	// before the routers learn of it are dropped, the next ones pass.
	for _, r := range l.routers {
		if err := r.r.AddPeer(t.Context(), "uid-intruder", addrs(intruderIP, intruderIP6)); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range families {
		err := poll.Until(t.Context(), 5*time.Second, 50*time.Millisecond, func(ctx context.Context) error {
			got, err := whoami(ctx, intruder, f.ext)
			if err != nil {
				return err
			}
			if !slices.Contains(f.routers, got) {
				return fmt.Errorf("%s saw the new peer as %s, want a router", f.ext, got)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: a pod that became a peer: %v", f.name, err)
		}
	}

	// No longer a peer: refused again, at once.
	for _, r := range l.routers {
		if err := r.r.RemovePeer(t.Context(), "uid-intruder"); err != nil {
			t.Fatal(err)
		}
	}
	before := arrived()
	probe()
	for _, f := range families {
		l.expectSource(t, 5*time.Second, f.ext, f.routers...)
	}
	if n := arrived() - before; n != 0 {
		t.Fatalf("%d of a former peer's packets reached the external host through the routers", n)
	}
	if err := egress.ApplyClient(t.Context(), intruder.Path(), egress.ClientConfig{PodIPs: cfg.PodIPs}); err != nil {
		t.Fatal(err)
	}
}

// unknownClientDrops sums the routers' counters of refused tunnel packets.
func (l *lab) unknownClientDrops(t *testing.T) uint64 {
	t.Helper()
	var n uint64
	for i, r := range l.routers {
		d, err := r.r.UnknownClientDrops(t.Context())
		if err != nil {
			t.Fatalf("router %s: %v", ipv4.routers[i], err)
		}
		n += d
	}
	return n
}

// sendUDP sends one datagram from ns to addr's probePort.
func sendUDP(t *testing.T, ns *netnstest.NS, addr string) {
	t.Helper()
	c, err := ns.Dial(t.Context(), "udp", net.JoinHostPort(addr, probePort))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("intruder")); err != nil {
		t.Fatal(err)
	}
}

// countArrivals counts, with an nftables counter in ns (an external host),
// the packets of either family and protocol that arrive for probePort, and
// returns a function reading it.
func countArrivals(t *testing.T, ns *netnstest.NS) func() int {
	t.Helper()
	ns.Exec("nft", "add table inet probe")
	ns.Exec("nft", "add counter inet probe arrived")
	ns.Exec("nft", "add chain inet probe in { type filter hook prerouting priority -300 ; }")
	ns.Exec("nft", "add rule inet probe in meta l4proto { tcp, udp } th dport "+probePort+" counter name arrived")
	packets := regexp.MustCompile(`packets ([0-9]+)`)
	return func() int {
		t.Helper()
		out := ns.Exec("nft", "list", "counter", "inet", "probe", "arrived")
		m := packets.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("counter of arrivals in %s: %q", ns, out)
		}
		n, err := strconv.Atoi(m[1])
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}
