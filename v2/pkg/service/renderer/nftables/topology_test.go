package nftables

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// podPrefix is the pod interface prefix of the test node.
const podPrefix = "vcoil"

// fam holds a topology's addresses of one IP family.
type fam struct {
	name                   string
	podA, podB, remote     string // backends: two pods of the node, one behind the remote node
	clientA, clientB       string // external hosts; only A is in the LoadBalancer's source ranges
	allowed                string // the source range holding clientA
	node                   string // the node's address, where node ports are served
	loopback               string // the node's NAT loopback
	clusterIP, extIP, lbIP string // frontends (the cluster IP's last number is chosen per service)
}

var (
	v4 = fam{
		name: "IPv4", podA: "10.1.0.5", podB: "10.1.0.6", remote: "10.2.0.5",
		clientA: "203.0.113.10", clientB: "198.51.100.10", allowed: "203.0.113.0/24",
		node: "198.18.0.1", loopback: "10.255.255.1",
		clusterIP: "10.96.0.", extIP: "10.97.0.1", lbIP: "10.98.0.1",
	}
	v6 = fam{
		name: "IPv6", podA: "fd00:1::5", podB: "fd00:1::6", remote: "fd00:2::5",
		clientA: "2001:db8:203::10", clientB: "2001:db8:198::10", allowed: "2001:db8:203::/64",
		node: "2001:db8:18::1", loopback: "fd00:255::1",
		clusterIP: "fd00:96::", extIP: "fd00:97::1", lbIP: "fd00:98::1",
	}
)

func (f fam) cluster(n int) string { return fmt.Sprintf("%s%d", f.clusterIP, n) }

// hostPort joins an address and a port.
func hostPort(addr string, port uint16) string {
	return net.JoinHostPort(addr, fmt.Sprint(port))
}

// lab is a node namespace holding the renderer's table, two pods of the
// node (host-side interfaces named with the pod prefix), a remote node
// with one backend behind it, and two external clients, each on its own
// link to the node. Nothing links to the test's own namespace.
type lab struct {
	t                                    *testing.T
	node, podA, podB, remote, cliA, cliB *netnstest.NS
}

func newLab(t *testing.T) *lab {
	t.Helper()
	netnstest.RequireRoot(t)
	l := &lab{t: t,
		node: netnstest.New(t, "node"), podA: netnstest.New(t, "pod-a"), podB: netnstest.New(t, "pod-b"),
		remote: netnstest.New(t, "remote"), cliA: netnstest.New(t, "client-a"), cliB: netnstest.New(t, "client-b"),
	}
	n := l.node
	n.Sysctl("net.ipv4.ip_forward", "1")
	n.Sysctl("net.ipv6.conf.all.forwarding", "1")

	for _, p := range []struct {
		ns       *netnstest.NS
		hostIf   string
		v4a, v6a string
	}{{l.podA, podPrefix + "a", v4.podA, v6.podA}, {l.podB, podPrefix + "b", v4.podB, v6.podB}} {
		netnstest.Veth(t, n, p.hostIf, p.ns, "eth0")
		n.AddAddr(p.hostIf, "169.254.1.1/32")
		n.AddAddr(p.hostIf, "fe80::1/64")
		p.ns.AddAddr("eth0", p.v4a+"/32")
		p.ns.AddAddr("eth0", p.v6a+"/128")
		p.ns.IP("route", "add", "169.254.1.1", "dev", "eth0", "scope", "link")
		p.ns.IP("route", "add", "default", "via", "169.254.1.1", "dev", "eth0")
		p.ns.IP("-6", "route", "add", "default", "via", "fe80::1", "dev", "eth0")
		n.IP("route", "add", p.v4a, "dev", p.hostIf)
		n.IP("-6", "route", "add", p.v6a, "dev", p.hostIf)
	}

	netnstest.Veth(t, n, "peer0", l.remote, "eth0")
	n.AddAddr("peer0", "198.18.0.1/24")
	n.AddAddr("peer0", "2001:db8:18::1/64")
	l.remote.AddAddr("eth0", "198.18.0.2/24")
	l.remote.AddAddr("eth0", "2001:db8:18::2/64")
	l.remote.AddAddr("lo", v4.remote+"/32")
	l.remote.AddAddr("lo", v6.remote+"/128")
	l.remote.IP("route", "add", "default", "via", "198.18.0.1")
	l.remote.IP("-6", "route", "add", "default", "via", "2001:db8:18::1")
	// The node's default route leads to the remote node, as a real node's
	// leads somewhere: a cluster IP without endpoints is then forwarded,
	// and rejected in filter-forward, instead of unroutable.
	n.IP("route", "add", "default", "via", "198.18.0.2")
	n.IP("-6", "route", "add", "default", "via", "2001:db8:18::2")
	n.IP("route", "add", "10.2.0.0/24", "via", "198.18.0.2")
	n.IP("-6", "route", "add", "fd00:2::/64", "via", "2001:db8:18::2")

	for i, c := range []struct {
		ns       *netnstest.NS
		v4c, v6c string
	}{{l.cliA, v4.clientA, v6.clientA}, {l.cliB, v4.clientB, v6.clientB}} {
		link := fmt.Sprintf("ext%d", i)
		netnstest.Veth(t, n, link, c.ns, "eth0")
		v4gw := strings.TrimSuffix(c.v4c, "10") + "1"
		v6gw := strings.TrimSuffix(c.v6c, "10") + "1"
		n.AddAddr(link, v4gw+"/24")
		n.AddAddr(link, v6gw+"/64")
		c.ns.AddAddr("eth0", c.v4c+"/24")
		c.ns.AddAddr("eth0", c.v6c+"/64")
		c.ns.IP("route", "add", "default", "via", v4gw)
		c.ns.IP("-6", "route", "add", "default", "via", v6gw)
	}
	return l
}

// node is the model's node of the lab.
func (l *lab) nodeModel() service.Node {
	return service.Node{
		Name:              "node",
		NodePortAddresses: []netip.Addr{netip.MustParseAddr(v4.node), netip.MustParseAddr(v6.node)},
		NATLoopback:       []netip.Addr{netip.MustParseAddr(v4.loopback), netip.MustParseAddr(v6.loopback)},
	}
}

func (l *lab) renderer() Renderer {
	l.t.Helper()
	r, err := New(Config{Netns: l.node.Path(), PodIfPrefix: podPrefix}, testr.New(l.t))
	if err != nil {
		l.t.Fatalf("New: %v", err)
	}
	l.t.Cleanup(r.Close)
	return r
}

func (l *lab) resync(r Renderer, services ...*service.Service) {
	l.t.Helper()
	st := &service.State{Node: l.nodeModel(), Services: map[service.ID]*service.Service{}}
	for _, s := range services {
		st.Services[s.ID] = s
	}
	if err := r.Resync(l.t.Context(), st); err != nil {
		l.t.Fatalf("Resync: %v", err)
	}
}

// ruleset is the node's table as nft lists it, with handles.
func (l *lab) ruleset() string {
	l.t.Helper()
	return l.node.Exec("nft", "-a", "list", "table", "inet", "vcoil-services")
}

// Backends: every one answers TCP and UDP with its name and the client
// address it sees.
const (
	tcpPort uint16 = 8080
	udpPort uint16 = 8053
)

func (l *lab) serve(b backend, n *netnstest.NS) {
	name, addrs := b.name, []string{b.v4, b.v6}
	l.t.Helper()
	tl := n.Listen("tcp", hostPort("::", tcpPort))
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				from := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
				_, _ = fmt.Fprintf(c, "%s %s\n", name, from)
				// Then echo, for connections that must survive a change.
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	// UDP answers from the address asked (a wildcard socket would
	// answer from the address routing picks, which conntrack would not
	// match with the DNATed request).
	for _, a := range addrs {
		var pc net.PacketConn
		n.Run(func() error {
			var err error
			pc, err = net.ListenPacket("udp", hostPort(a, udpPort))
			return err
		})
		l.t.Cleanup(func() { _ = pc.Close() })
		go func() {
			buf := make([]byte, 1500)
			for {
				_, from, err := pc.ReadFrom(buf)
				if err != nil {
					return
				}
				src := from.(*net.UDPAddr).AddrPort().Addr().Unmap()
				_, _ = pc.WriteTo([]byte(fmt.Sprintf("%s %s\n", name, src)), from)
			}
		}()
	}
}

// answer is what a backend said: its name and the client address it saw.
type answer struct{ backend, client string }

func (a answer) String() string { return a.backend + " saw " + a.client }

func askTCP(ctx context.Context, from *netnstest.NS, addr string) (answer, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := from.Dial(ctx, "tcp", addr)
	if err != nil {
		return answer{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	return readAnswer(c)
}

func askUDP(ctx context.Context, from *netnstest.NS, addr string) (answer, error) {
	c, err := from.Dial(ctx, "udp", addr)
	if err != nil {
		return answer{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(1 * time.Second))
	if _, err := c.Write([]byte("?")); err != nil {
		return answer{}, err
	}
	return readAnswer(c)
}

func readAnswer(c net.Conn) (answer, error) {
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return answer{}, err
	}
	f := strings.Fields(line)
	if len(f) != 2 {
		return answer{}, fmt.Errorf("answer %q", line)
	}
	return answer{f[0], f[1]}, nil
}

func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
