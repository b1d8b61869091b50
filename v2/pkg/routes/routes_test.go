package routes_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/constants"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/linux"
	"github.com/vcoil/vcoil/v2/pkg/routes"
)

func prefixes(ss ...string) []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range ss {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}

// tableRoutes lists a table of both families as compact lines
// ("blackhole 198.19.0.0/26 proto 30"), sorted.
func tableRoutes(t *testing.T, n *netnstest.NS, table string) []string {
	t.Helper()
	var lines []string
	for _, family := range []string{"-4", "-6"} {
		out, err := n.TryExec(t.Context(), "ip", "-j", family, "route", "show", "table", table)
		if err != nil && strings.Contains(err.Error(), "FIB table does not exist") {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var rs []struct {
			Type     string `json:"type"`
			Dst      string `json:"dst"`
			Gateway  string `json:"gateway"`
			Dev      string `json:"dev"`
			Protocol string `json:"protocol"`
		}
		if err := json.Unmarshal([]byte(out), &rs); err != nil {
			t.Fatalf("ip -j route: %v: %s", err, out)
		}
		for _, r := range rs {
			s := r.Dst
			if r.Type != "" && r.Type != "unicast" {
				s = r.Type + " " + s
			}
			if r.Gateway != "" {
				s += " via " + r.Gateway
			}
			if r.Dev != "" && r.Dev != "lo" {
				s += " dev " + r.Dev
			}
			s += " proto " + r.Protocol
			lines = append(lines, s)
		}
	}
	slices.Sort(lines)
	return lines
}

func expectLines(t *testing.T, what string, want, got []string) {
	t.Helper()
	slices.Sort(want)
	if !slices.Equal(want, got) {
		t.Errorf("%s:\nwant\n\t%s\ngot\n\t%s", what, strings.Join(want, "\n\t"), strings.Join(got, "\n\t"))
	}
}

func TestExporterSyncKeepsExactlyTheNodesBlocks(t *testing.T) {
	t.Parallel()
	node := netnstest.New(t, "node")
	// Routes that are not the exporter's: another protocol in its table,
	// and its protocol in another table.
	node.IP("route", "add", "blackhole", "10.99.0.0/24", "table", "119", "proto", "bird")
	node.IP("-6", "route", "add", "blackhole", "2001:db8:99::/64", "table", "119", "proto", "static")
	node.IP("route", "add", "blackhole", "198.19.9.0/24", "table", "120", "proto", "30")
	foreign := []string{"blackhole 10.99.0.0/24 proto bird", "blackhole 2001:db8:99::/64 proto static"}

	e, err := routes.NewExporter(routes.ExporterConfig{Netns: node.Path()}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		name   string
		blocks []netip.Prefix
		want   []string
	}{
		{"adds every block", prefixes("198.19.0.0/26", "198.19.0.64/26", "2001:db8:19::/120"),
			[]string{"blackhole 198.19.0.0/26 proto 30", "blackhole 198.19.0.64/26 proto 30", "blackhole 2001:db8:19::/120 proto 30"}},
		{"changes nothing when synced again", prefixes("2001:db8:19::/120", "198.19.0.64/26", "198.19.0.0/26", "198.19.0.0/26"),
			[]string{"blackhole 198.19.0.0/26 proto 30", "blackhole 198.19.0.64/26 proto 30", "blackhole 2001:db8:19::/120 proto 30"}},
		{"removes stale blocks and adds new ones", prefixes("198.19.0.64/26", "2001:db8:19::100/120"),
			[]string{"blackhole 198.19.0.64/26 proto 30", "blackhole 2001:db8:19::100/120 proto 30"}},
		{"removes everything it added when the node has no block", nil, nil},
	} {
		if err := e.Sync(t.Context(), step.blocks); err != nil {
			t.Fatalf("%s: Sync: %v", step.name, err)
		}
		expectLines(t, step.name, append(slices.Clone(foreign), step.want...), tableRoutes(t, node, "119"))
	}
	expectLines(t, "table 120", []string{"blackhole 198.19.9.0/24 proto 30"}, tableRoutes(t, node, "120"))
}

func TestExporterSyncRepairsAndReportsConflicts(t *testing.T) {
	t.Parallel()
	node := netnstest.New(t, "node")
	e, err := routes.NewExporter(routes.ExporterConfig{Netns: node.Path(), Table: 150, Protocol: 40}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	// Its own route of the wrong type, and another protocol's route on a
	// block it is asked to export.
	node.IP("route", "add", "unreachable", "198.19.0.0/26", "table", "150", "proto", "40")
	node.IP("route", "add", "blackhole", "198.19.0.128/26", "table", "150", "proto", "bird")

	err = e.Sync(t.Context(), prefixes("198.19.0.0/26", "198.19.0.64/26", "198.19.0.128/26"))
	if err == nil || !strings.Contains(err.Error(), "add exported block route 198.19.0.128/26 to table 150: a route of another protocol holds that destination") {
		t.Fatalf("Sync = %v, want the conflict on 198.19.0.128/26 named", err)
	}
	expectLines(t, "table 150 after the conflict", []string{
		"blackhole 198.19.0.0/26 proto 40", "blackhole 198.19.0.64/26 proto 40", "blackhole 198.19.0.128/26 proto bird",
	}, tableRoutes(t, node, "150"))

	for _, bad := range []string{"198.19.0.1/26", "::ffff:198.19.0.0/122"} {
		err := e.Sync(t.Context(), prefixes(bad))
		if err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("Sync(%s) = %v, want an error naming it", bad, err)
		}
	}
	if got := tableRoutes(t, node, "150"); len(got) != 3 {
		t.Errorf("an invalid block changed the table: %v", got)
	}
}

func TestNewRejectsTablesAndProtocolsOfTheKernel(t *testing.T) {
	for _, tc := range []struct {
		name string
		new  func() error
		want string
	}{
		{"the exporter in main", func() error {
			_, err := routes.NewExporter(routes.ExporterConfig{Table: 254}, testr.New(t))
			return err
		}, "table 254"},
		{"the exporter with the kernel's protocol", func() error {
			_, err := routes.NewExporter(routes.ExporterConfig{Protocol: 2}, testr.New(t))
			return err
		}, "protocol 2"},
		{"local blocks with the pod routes' protocol", func() error {
			_, err := routes.NewLocalBlocks(routes.LocalBlocksConfig{Protocol: constants.PodRouteProtocol}, testr.New(t))
			return err
		}, "protocol 31 marks the Linux dataplane's pod routes"},
		{"direct routes after main", func() error {
			_, err := routes.NewDirectRouter(routes.DirectConfig{RulePriority: 40000}, testr.New(t))
			return err
		}, "RulePriority 40000"},
		{"a namespace that does not exist", func() error {
			_, err := routes.NewExporter(routes.ExporterConfig{Netns: "/nonexistent/netns"}, testr.New(t))
			return err
		}, "/nonexistent/netns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.new(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// node is a simulated node: a namespace with an uplink, the Linux
// dataplane initialised, and pods.
type node struct {
	t  *testing.T
	ns *netnstest.NS
	dp dataplane.Dataplane
}

func newNode(t *testing.T, label string) *node {
	t.Helper()
	n := &node{t: t, ns: netnstest.New(t, label)}
	dp, err := linux.New(linux.Config{NodeNetns: n.ns.Path()}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := dp.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	n.dp = dp
	return n
}

func (n *node) addPod(label, v4, v6 string) *netnstest.NS {
	n.t.Helper()
	podNS := netnstest.New(n.t, label)
	pod := dataplane.Pod{PodKey: dataplane.PodKey{ContainerID: "c-" + label, IfName: "eth0"}, Netns: podNS.Path()}
	if v4 != "" {
		pod.IPv4 = netip.MustParseAddr(v4)
	}
	if v6 != "" {
		pod.IPv6 = netip.MustParseAddr(v6)
	}
	if _, err := n.dp.SetupPod(n.t.Context(), pod); err != nil {
		n.t.Fatalf("SetupPod %s: %v", label, err)
	}
	return podNS
}

// dial connects from a namespace and returns the client address the
// server saw, or the dial error. The server must answer with its address.
func dialOnce(t *testing.T, from *netnstest.NS, addr string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	c, err := from.Dial(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	b, err := io.ReadAll(c)
	return string(b), err
}

// serveClientAddr answers every connection with the client's address.
func serveClientAddr(t *testing.T, n *netnstest.NS, addr string) {
	l := n.Listen("tcp", addr)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap().String()))
			_ = c.Close()
		}
	}()
}

func TestLocalBlocksRefuseUnassignedAddressesInsteadOfLooping(t *testing.T) {
	t.Parallel()
	n := newNode(t, "node")
	router := netnstest.New(t, "router")
	netnstest.Veth(t, n.ns, "uplink", router, "to-node")
	n.ns.AddAddr("uplink", "198.18.0.2/24")
	n.ns.AddAddr("uplink", "2001:db8:18::2/64")
	router.AddAddr("to-node", "198.18.0.1/24")
	router.AddAddr("to-node", "2001:db8:18::1/64")
	router.Sysctl("net.ipv4.ip_forward", "1")
	router.Sysctl("net.ipv6.conf.all.forwarding", "1")
	n.ns.IP("route", "add", "default", "via", "198.18.0.1")
	n.ns.IP("-6", "route", "add", "default", "via", "2001:db8:18::1")
	// The network routes the node's blocks to the node, as BGP would.
	router.IP("route", "add", "198.19.0.0/26", "via", "198.18.0.2")
	router.IP("-6", "route", "add", "2001:db8:19::/120", "via", "2001:db8:18::2")
	pod := n.addPod("pod", "198.19.0.5", "2001:db8:19::5")
	serveClientAddr(t, pod, ":8080")

	lb, err := routes.NewLocalBlocks(routes.LocalBlocksConfig{Netns: n.ns.Path()}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	blocks := prefixes("198.19.0.0/26", "2001:db8:19::/120")

	// Without the unreachable routes, an unassigned address goes out of the
	// default route and the router sends it back: the node forwards it to
	// the router again, until the TTL runs out.
	if out := n.ns.IP("route", "get", "198.19.0.20"); !strings.Contains(out, "via 198.18.0.1") {
		t.Fatalf("before Sync, 198.19.0.20 does not leave by the default route: %s", out)
	}

	if err := lb.Sync(t.Context(), blocks); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if err := lb.Sync(t.Context(), blocks); err != nil {
		t.Fatalf("second Sync: %v", err)
	}
	host := linux.HostIfName(dataplane.PodKey{ContainerID: "c-pod", IfName: "eth0"})
	expectLines(t, "table 116", []string{
		"198.19.0.5 dev " + host + " proto 31", "2001:db8:19::5 dev " + host + " proto 31",
		"unreachable 198.19.0.0/26 proto 30", "unreachable 2001:db8:19::/120 proto 30",
	}, tableRoutes(t, n.ns, "116"))

	for _, tc := range []struct{ name, from, addr string }{
		{"from the router to an unassigned IPv4 address", "router", "198.19.0.20:8080"},
		{"from the router to an unassigned IPv6 address", "router", "[2001:db8:19::20]:8080"},
		{"from the node itself", "node", "198.19.0.20:8080"},
	} {
		from := router
		if tc.from == "node" {
			from = n.ns
		}
		start := time.Now()
		_, err := dialOnce(t, from, tc.addr, 5*time.Second)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: dial %s took %s, want an answer at once", tc.name, tc.addr, d)
		}
		// The node refuses with ICMP host unreachable (IPv4) or no route
		// to destination (IPv6).
		if !errors.Is(err, syscall.EHOSTUNREACH) && !errors.Is(err, syscall.ENETUNREACH) {
			t.Errorf("%s: dial %s = %v, want it refused at once as unreachable", tc.name, tc.addr, err)
		}
	}
	// The pod itself stays reachable: its /32 is the longer match.
	for _, addr := range []string{"198.19.0.5:8080", "[2001:db8:19::5]:8080"} {
		poll.Eventually(t, 10*time.Second, func() error {
			_, err := dialOnce(t, router, addr, 2*time.Second)
			return err
		})
	}

	// Dropping the blocks removes only the unreachable routes.
	if err := lb.Sync(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	expectLines(t, "table 116 without blocks", []string{
		"198.19.0.5 dev " + host + " proto 31", "2001:db8:19::5 dev " + host + " proto 31",
	}, tableRoutes(t, n.ns, "116"))
}

func TestDirectRouterCarriesPodTrafficBetweenNodesOfOneL2Network(t *testing.T) {
	t.Parallel()
	a, b, podA, podB := newL2Pair(t)
	routerA, err := routes.NewDirectRouter(routes.DirectConfig{Netns: a.ns.Path()}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	routerB, err := routes.NewDirectRouter(routes.DirectConfig{Netns: b.ns.Path()}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	toB := map[netip.Prefix]netip.Addr{
		netip.MustParsePrefix("198.19.0.64/26"):     netip.MustParseAddr("198.18.0.3"),
		netip.MustParsePrefix("2001:db8:19:1::/64"): netip.MustParseAddr("2001:db8:18::3"),
	}
	toA := map[netip.Prefix]netip.Addr{
		netip.MustParsePrefix("198.19.0.0/26"):    netip.MustParseAddr("198.18.0.2"),
		netip.MustParsePrefix("2001:db8:19::/64"): netip.MustParseAddr("2001:db8:18::2"),
	}
	for range 2 {
		if err := routerA.Sync(t.Context(), toB); err != nil {
			t.Fatalf("Sync on node a: %v", err)
		}
		if err := routerB.Sync(t.Context(), toA); err != nil {
			t.Fatalf("Sync on node b: %v", err)
		}
	}
	expectLines(t, "node a table 118", []string{
		"198.19.0.64/26 via 198.18.0.3 dev uplink proto 30", "2001:db8:19:1::/64 via 2001:db8:18::3 dev uplink proto 30",
	}, tableRoutes(t, a.ns, "118"))
	for _, family := range []string{"-4", "-6"} {
		out := a.ns.IP(family, "rule", "show")
		if strings.Count(out, "2010:\tfrom all lookup 118") != 1 || !strings.Contains(out, "2000:\tfrom all lookup 116") {
			t.Errorf("ip %s rule show on node a after two Syncs, want one direct rule after the pod rule:\n%s", family, out)
		}
	}
	expectServersSee(t, []seenAs{
		{"pod a to pod b over IPv4", podA, "198.19.0.69:8080", "198.19.0.5"},
		{"pod b to pod a over IPv4", podB, "198.19.0.5:8080", "198.19.0.69"},
		{"pod a to pod b over IPv6", podA, "[2001:db8:19:1::5]:8080", "2001:db8:19::5"},
		{"node a to pod b", a.ns, "198.19.0.69:8080", "198.18.0.2"},
	})

	// A full sync: a foreign route stays, a stale block goes, a next hop
	// that is not on the L2 network is refused without holding back the
	// rest.
	a.ns.IP("route", "add", "10.99.0.0/24", "via", "198.18.0.3", "table", "118", "proto", "static")
	err = routerA.Sync(t.Context(), map[netip.Prefix]netip.Addr{
		netip.MustParsePrefix("198.19.0.128/26"): netip.MustParseAddr("198.18.0.3"),
		netip.MustParsePrefix("198.19.0.192/26"): netip.MustParseAddr("203.0.113.99"),
	})
	if err == nil || !strings.Contains(err.Error(), "198.19.0.192/26") {
		t.Errorf("Sync with an off-link next hop = %v, want an error naming its block", err)
	}
	expectLines(t, "node a table 118 after the second sync", []string{
		"10.99.0.0/24 via 198.18.0.3 dev uplink proto static", "198.19.0.128/26 via 198.18.0.3 dev uplink proto 30",
	}, tableRoutes(t, a.ns, "118"))

	if err := routerA.Sync(t.Context(), map[netip.Prefix]netip.Addr{netip.MustParsePrefix("198.19.0.128/26"): netip.MustParseAddr("2001:db8:18::3")}); err == nil {
		t.Error("Sync accepted an IPv6 next hop for an IPv4 block")
	}
	expectRemoveKeepsForeignRoutes(t, a, podA, routerA)
}

// newL2Pair makes two nodes on one L2 network (198.18.0.0/24,
// 2001:db8:18::/64), each with a pod that answers on port 8080 with the
// client's address.
func newL2Pair(t *testing.T) (a, b *node, podA, podB *netnstest.NS) {
	t.Helper()
	a, b = newNode(t, "node-a"), newNode(t, "node-b")
	netnstest.Veth(t, a.ns, "uplink", b.ns, "uplink")
	a.ns.AddAddr("uplink", "198.18.0.2/24")
	a.ns.AddAddr("uplink", "2001:db8:18::2/64")
	b.ns.AddAddr("uplink", "198.18.0.3/24")
	b.ns.AddAddr("uplink", "2001:db8:18::3/64")
	podA = a.addPod("pod-a", "198.19.0.5", "2001:db8:19::5")
	podB = b.addPod("pod-b", "198.19.0.69", "2001:db8:19:1::5")
	serveClientAddr(t, podB, ":8080")
	serveClientAddr(t, podA, ":8080")
	return a, b, podA, podB
}

// seenAs is a connection from a namespace to a server started by
// serveClientAddr, and the client address the server must see.
type seenAs struct {
	name       string
	from       *netnstest.NS
	addr, want string
}

// expectServersSee dials each connection until it succeeds and checks the
// client address the server saw.
func expectServersSee(t *testing.T, conns []seenAs) {
	t.Helper()
	for _, tc := range conns {
		var got string
		poll.Eventually(t, 10*time.Second, func() error {
			var err error
			got, err = dialOnce(t, tc.from, tc.addr, 2*time.Second)
			return err
		})
		if got != tc.want {
			t.Errorf("%s: the server saw %s, want %s", tc.name, got, tc.want)
		}
	}
}

// expectRemoveKeepsForeignRoutes removes node a's direct routes and rules,
// twice, and checks that only the foreign route stays and pod a no longer
// reaches pod b.
func expectRemoveKeepsForeignRoutes(t *testing.T, a *node, podA *netnstest.NS, routerA *routes.DirectRouter) {
	t.Helper()
	for range 2 {
		if err := routerA.Remove(t.Context()); err != nil {
			t.Fatalf("Remove: %v", err)
		}
	}
	expectLines(t, "node a table 118 after Remove", []string{"10.99.0.0/24 via 198.18.0.3 dev uplink proto static"}, tableRoutes(t, a.ns, "118"))
	for _, family := range []string{"-4", "-6"} {
		if out := a.ns.IP(family, "rule", "show"); strings.Contains(out, "lookup 118") {
			t.Errorf("ip %s rule show after Remove still has the direct rule:\n%s", family, out)
		}
	}
	if _, err := dialOnce(t, podA, "198.19.0.69:8080", 2*time.Second); err == nil {
		t.Error("pod a still reaches pod b without direct routes")
	}
}
