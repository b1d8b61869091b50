package vpp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
)

// serviceNode is a node namespace whose host interconnect is a veth to a
// namespace standing in for VPP (169.254.100.1), which holds a pod address
// and an external client's address and routes the service network back to
// the node as VPP does.
type serviceNode struct {
	node, vpp *netnstest.NS
	k         *netlinkKernel
}

func newServiceNode(t *testing.T) serviceNode {
	node, vpp := netnstest.New(t, "svcnode"), netnstest.New(t, "svcvpp")
	netnstest.Veth(t, node, HostInterconnectName, vpp, HostInterconnectVPPName)
	node.AddAddr(HostInterconnectName, InterconnectHostIPv4.String())
	vpp.AddAddr(HostInterconnectVPPName, InterconnectVPPIPv4.String())
	node.Sysctl("net.ipv4.ip_forward", "1")
	// The node's own network: its default route does not go through VPP,
	// so the refusals of external clients need the sink replies' rule.
	lan := netnstest.New(t, "svclan")
	netnstest.Veth(t, node, "eth9", lan, "eth0")
	node.AddAddr("eth9", "198.18.0.2/24")
	node.IP("route", "add", "default", "via", "198.18.0.1")
	// The pods' block goes into VPP, as SyncBlockRoutes makes it.
	node.IP("route", "add", "10.100.0.0/26", "via", "169.254.100.1", "dev", HostInterconnectName)
	// In "VPP": a pod, an external client, the service CIDR, the NAT
	// loopback and the reject sink routed to the node.
	vpp.AddAddr("lo", "10.100.0.2/32")
	vpp.AddAddr("lo", "203.0.113.5/32")
	for _, dst := range []string{"10.96.0.0/12", "10.100.0.1/32", "169.254.101.1/32"} {
		vpp.IP("route", "add", dst, "via", "169.254.100.2", "dev", HostInterconnectVPPName)
	}
	return serviceNode{node: node, vpp: vpp, k: &netlinkKernel{nodeNetns: node.Path()}}
}

// dialFrom connects from src in the stand-in VPP namespace.
func dialFrom(ctx context.Context, n *netnstest.NS, network, src, dst string) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() error {
		d := net.Dialer{Timeout: 2 * time.Second}
		if network == "tcp4" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
		} else {
			d.LocalAddr = &net.UDPAddr{IP: net.ParseIP(src)}
		}
		var err error
		c, err = d.DialContext(ctx, network, dst)
		return err
	})
	return c, err
}

// The node's side of the service network, for real: routes with the NAT
// loopback as source, the sinks' addresses and rule, the nftables table
// that refuses connections to the reject sink and to unmapped service
// ports (TCP with a reset, UDP with a port unreachable), and their removal.
func TestServiceNetworkInTheNodeKernel(t *testing.T) {
	netnstest.RequireRoot(t)
	s := newServiceNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	net1 := ServiceNetwork{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}, Source: netip.MustParseAddr("10.100.0.1"), Sinks: true,
		Refused: []Frontend{{Addr: netip.MustParseAddr("10.96.0.20"), Protocol: 6, Port: 80}, {Addr: netip.MustParseAddr("10.96.0.20"), Protocol: 17, Port: 53}}}
	for range 2 { // the second time changes nothing
		if err := s.k.SyncServiceNetwork(ctx, net1); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.TrimSpace(s.node.IP("-4", "route", "show", "proto", "33")); got != "10.96.0.0/12 via 169.254.100.1 dev vcoilhost src 10.100.0.1" {
		t.Fatalf("service routes:\n%s", got)
	}
	addrs := s.node.IP("-4", "-o", "addr", "show", "dev", HostInterconnectName)
	for _, a := range []string{"169.254.100.2/30", "10.100.0.1/32", "169.254.101.1/32"} {
		if !strings.Contains(addrs, "inet "+a+" ") {
			t.Fatalf("%s lacks %s:\n%s", HostInterconnectName, a, addrs)
		}
	}
	if got := s.node.IP("-4", "rule", "show", "table", "117"); !strings.Contains(got, "from 169.254.101.1 lookup 117") {
		t.Fatalf("rules:\n%s", got)
	}
	if got := strings.TrimSpace(s.node.IP("-4", "route", "show", "table", "117")); got != "default via 169.254.100.1 dev vcoilhost proto 33" {
		t.Fatalf("table 117:\n%s", got)
	}
	table := s.node.Exec("nft", "list", "table", "ip", ServiceTable)
	// nft lists "meta l4proto tcp reject with tcp reset" without the
	// match, which the reset implies.
	for _, r := range []string{
		"ip daddr 169.254.101.1 reject with tcp reset\n",
		"ip daddr 169.254.101.1 reject\n",
		`iifname "vcoilhost" ip daddr 10.96.0.0/12 reject with tcp reset` + "\n",
		`iifname "vcoilhost" ip daddr 10.96.0.0/12 reject` + "\n",
		"hook input priority filter",
		"hook forward priority filter",
		"hook output priority filter",
		"ip daddr . meta l4proto . th dport @refused reject with tcp reset\n",
		"ip daddr . meta l4proto . th dport @refused reject\n",
		"10.96.0.20 . tcp . 80",
		"10.96.0.20 . udp . 53",
	} {
		if !strings.Contains(table, r) {
			t.Fatalf("table ip %s lacks %q:\n%s", ServiceTable, r, table)
		}
	}

	refused := func(what, network, src, dst string) {
		t.Helper()
		c, err := dialFrom(ctx, s.vpp, network, src, dst)
		if err == nil && network == "udp4" {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err = c.Write([]byte("x")); err == nil {
				_, err = c.Read(make([]byte, 16))
			}
		} else if err == nil {
			c.Close()
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("%s: %v, want connection refused", what, err)
		}
	}
	// An external client has no route in the node: the refusal goes back
	// into VPP through table 117.
	refused("TCP from an external client to the reject sink", "tcp4", "203.0.113.5", "169.254.101.1:8080")
	refused("UDP from an external client to the reject sink", "udp4", "203.0.113.5", "169.254.101.1:53")
	refused("TCP from a pod to a cluster IP port VPP sent back", "tcp4", "10.100.0.2", "10.96.0.10:80")
	refused("UDP from a pod to a cluster IP port VPP sent back", "udp4", "10.100.0.2", "10.96.0.10:53")

	// The node's own client reaches a cluster IP through "VPP" with the
	// NAT loopback as source.
	s.vpp.IP("addr", "add", "10.96.0.10/32", "dev", "lo")
	vip := s.vpp.Listen("tcp4", "10.96.0.10:80")
	accepted := make(chan net.Addr, 1)
	go func() {
		c, err := vip.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c.RemoteAddr()
		c.Close()
	}()
	c, err := s.node.Dial(ctx, "tcp4", "10.96.0.10:80")
	if err != nil {
		t.Fatalf("the node to a cluster IP: %v", err)
	}
	c.Close()
	if a := <-accepted; a == nil || !strings.HasPrefix(a.String(), "10.100.0.1:") {
		t.Fatalf("the cluster IP saw the node as %v, want the NAT loopback 10.100.0.1", a)
	}

	// The node's own clients of a refused frontend are refused before
	// VPP, over TCP (a reset) and UDP, while another port of the same address is
	// not: "VPP" listens on both, so only the output rule can refuse.
	s.vpp.IP("addr", "add", "10.96.0.20/32", "dev", "lo")
	_ = s.vpp.Listen("tcp4", "10.96.0.20:80")
	_ = s.vpp.Listen("tcp4", "10.96.0.20:81")
	if c, err := s.node.Dial(ctx, "tcp4", "10.96.0.20:80"); !errors.Is(err, syscall.ECONNREFUSED) {
		if err == nil {
			c.Close()
		}
		t.Fatalf("the node to refused frontend 10.96.0.20:80/tcp: %v, want connection refused", err)
	}
	if c, err := s.node.Dial(ctx, "tcp4", "10.96.0.20:81"); err != nil {
		t.Fatalf("the node to 10.96.0.20:81/tcp, which is not refused: %v", err)
	} else {
		c.Close()
	}
	err = s.node.Do(func() error {
		c, err := net.Dial("udp4", "10.96.0.20:53")
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err = c.Write([]byte("x")); err == nil {
			_, err = c.Read(make([]byte, 16))
		}
		return err
	})
	// The reject drops the node's own datagram, so the send itself fails
	// at once (as with kube-proxy's nftables rules); no timeout.
	if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.EPERM) {
		t.Fatalf("the node to refused frontend 10.96.0.20:53/udp: %v, want it refused at once", err)
	}

	// The node's own client of one of its addresses and a node port is
	// sent to the port's cluster IP, through "VPP"; another port of the
	// address stays the node's.
	net1.NodePorts = []NodePort{{Protocol: 6, Port: 30080, ClusterIP: netip.MustParseAddr("10.96.0.30"), ClusterPort: 80}}
	if err := s.k.SyncServiceNetwork(ctx, net1); err != nil {
		t.Fatal(err)
	}
	if table := s.node.Exec("nft", "list", "table", "ip", ServiceTable); !strings.Contains(table, "type nat hook output priority -100") ||
		!strings.Contains(table, "tcp . 30080 : 10.96.0.30 . 80") {
		t.Fatalf("table ip %s lacks the node ports:\n%s", ServiceTable, table)
	}
	s.vpp.IP("addr", "add", "10.96.0.30/32", "dev", "lo")
	// VPP holds the node's address too and hands the kernel what comes for
	// it (the replies here).
	s.vpp.IP("route", "add", "198.18.0.2/32", "via", "169.254.100.2", "dev", HostInterconnectVPPName)
	np := s.vpp.Listen("tcp4", "10.96.0.30:80")
	go func() {
		if c, err := np.Accept(); err == nil {
			_, _ = c.Write([]byte("cluster IP"))
			c.Close()
		}
	}()
	local := s.node.Listen("tcp4", "198.18.0.2:30081")
	go func() {
		if c, err := local.Accept(); err == nil {
			_, _ = c.Write([]byte("the node"))
			c.Close()
		}
	}()
	for addr, want := range map[string]string{"198.18.0.2:30080": "cluster IP", "198.18.0.2:30081": "the node"} {
		c, err := s.node.Dial(ctx, "tcp4", addr)
		if err != nil {
			t.Fatalf("the node to %s: %v", addr, err)
		}
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		b := make([]byte, 32)
		n, _ := c.Read(b)
		c.Close()
		if string(b[:n]) != want {
			t.Fatalf("the node to %s reached %q, want %q", addr, b[:n], want)
		}
	}

	t.Log("another CIDR, no NAT loopback, no sinks")
	net2 := ServiceNetwork{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.112.0.0/16")}}
	if err := s.k.SyncServiceNetwork(ctx, net2); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(s.node.IP("-4", "route", "show", "proto", "33")); got != "10.112.0.0/16 via 169.254.100.1 dev vcoilhost" {
		t.Fatalf("service routes after the change:\n%s", got)
	}
	addrs = s.node.IP("-4", "-o", "addr", "show", "dev", HostInterconnectName)
	if strings.Contains(addrs, "/32") || !strings.Contains(addrs, "169.254.100.2/30") {
		t.Fatalf("%s's addresses after the change:\n%s", HostInterconnectName, addrs)
	}
	if got := strings.TrimSpace(s.node.IP("-4", "rule", "show", "table", "117")); got != "" {
		t.Fatalf("rules left:\n%s", got)
	}
	if got := strings.TrimSpace(s.node.IP("-4", "route", "show", "table", "117")); got != "" {
		t.Fatalf("table 117 left:\n%s", got)
	}
	if out, err := s.node.TryExec(ctx, "nft", "list", "table", "ip", ServiceTable); err == nil {
		t.Fatalf("table ip %s is left:\n%s", ServiceTable, out)
	}
}

// The node's end of the host interconnect, for real: its addresses, and
// the sysctls that keep the node's ARP requests to VPP from the node's
// own address (which VPP may hold too) and router advertisements away.
func TestSetUpHostInTheNodeKernel(t *testing.T) {
	netnstest.RequireRoot(t)
	node := netnstest.New(t, "hostnode")
	node.IP("link", "add", HostInterconnectName, "type", "veth", "peer", "name", HostInterconnectVPPName)
	// Each setting starts at the other value, so that only SetUpHost can
	// have made what is read below.
	wrong := map[string]string{
		"net.ipv4.conf." + HostInterconnectName + ".arp_announce": "0",
		"net.ipv6.conf." + HostInterconnectName + ".accept_ra":    "1",
		"net.ipv4.ip_forward": "0",
	}
	for key, value := range wrong {
		node.Sysctl(key, value)
	}
	k := &netlinkKernel{nodeNetns: node.Path()}
	for range 2 { // the second time changes nothing
		if err := k.SetUpHost(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	addrs := node.IP("-o", "addr", "show", "dev", HostInterconnectName)
	for _, a := range []string{"inet 169.254.100.2/30 ", "inet6 fe80::2/64 "} {
		if !strings.Contains(addrs, a) {
			t.Errorf("%s lacks %q:\n%s", HostInterconnectName, a, addrs)
		}
	}
	for key, want := range map[string]string{
		"net.ipv4.conf." + HostInterconnectName + ".arp_announce": "2",
		"net.ipv6.conf." + HostInterconnectName + ".accept_ra":    "0",
		"net.ipv4.ip_forward": "1",
	} {
		if got := node.ReadSysctl(key); got != want {
			t.Errorf("%s = %s, want %s", key, got, want)
		}
	}
}

// The node's own connections to its hostPorts, for real: to one of the
// node's addresses and to 127.0.0.1 (from a loopback source too), DNATed
// to a pod behind a stand-in VPP; the table goes with the last hostPort.
func TestHostPortsOfTheNodesOwnConnections(t *testing.T) {
	netnstest.RequireRoot(t)
	s := newServiceNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// VPP holds the node's address too and hands the kernel what comes
	// for it; it routes the interconnect's /30 back as a connected route.
	s.vpp.IP("route", "add", "198.18.0.2/32", "via", "169.254.100.2", "dev", HostInterconnectVPPName)
	pod := s.vpp.Listen("tcp4", "10.100.0.2:80")
	seen := make(chan string, 8)
	go func() {
		for {
			c, err := pod.Accept()
			if err != nil {
				return
			}
			seen <- c.RemoteAddr().(*net.TCPAddr).IP.String()
			_, _ = c.Write([]byte("pod"))
			c.Close()
		}
	}()
	dnats := []HostPortDNAT{
		{Addr: netip.MustParseAddr("127.0.0.1"), Protocol: 6, Port: 9443, PodAddr: netip.MustParseAddr("10.100.0.2"), PodPort: 80},
		{Addr: netip.MustParseAddr("198.18.0.2"), Protocol: 6, Port: 8080, PodAddr: netip.MustParseAddr("10.100.0.2"), PodPort: 80},
	}
	for range 2 { // the second time changes nothing
		if err := s.k.SyncHostPorts(ctx, dnats); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct{ src, dst, wantSeen string }{
		{"", "198.18.0.2:8080", "198.18.0.2"},
		{"198.18.0.2", "127.0.0.1:9443", "198.18.0.2"},
		// A loopback source leaves masqueraded to the interconnect's address.
		{"127.0.0.1", "127.0.0.1:9443", "169.254.100.2"},
	} {
		err := s.node.Do(func() error {
			d := net.Dialer{Timeout: 2 * time.Second}
			if tc.src != "" {
				d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(tc.src)}
			}
			c, err := d.DialContext(ctx, "tcp4", tc.dst)
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			b := make([]byte, 8)
			n, _ := c.Read(b)
			if string(b[:n]) != "pod" {
				return fmt.Errorf("read %q, want the pod's answer", b[:n])
			}
			return nil
		})
		if err != nil {
			t.Fatalf("the node (from %q) to %s: %v", tc.src, tc.dst, err)
		}
		if got := <-seen; got != tc.wantSeen {
			t.Errorf("the node (from %q) to %s: the pod saw %s, want %s", tc.src, tc.dst, got, tc.wantSeen)
		}
	}
	if err := s.k.SyncHostPorts(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if out, err := s.node.TryExec(ctx, "nft", "list", "table", "ip", HostPortTable); err == nil {
		t.Fatalf("table ip %s is still there:\n%s", HostPortTable, out)
	}
}
