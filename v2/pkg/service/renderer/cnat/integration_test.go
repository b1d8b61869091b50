package cnat_test

import (
	"bufio"
	"context"
	"io"

	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"go.fd.io/govpp/adapter/socketclient"
	"go.fd.io/govpp/binapi/vlib"
	"go.fd.io/govpp/core"

	"github.com/vcoil/vcoil/v2/internal/echotest"
	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
	"github.com/vcoil/vcoil/v2/pkg/service"
	"github.com/vcoil/vcoil/v2/pkg/service/renderer/cnat"
)

// The addresses of the real-VPP test: a dual-stack node whose blocks end
// with the NAT loopbacks, an uplink to the "ext" namespace (an outside
// client of both families).
var (
	itBlock     = netip.MustParsePrefix("10.100.0.0/28")
	itBlock6    = netip.MustParsePrefix("fd00:100::/124")
	itLoopback  = netip.MustParseAddr("10.100.0.15")
	itLoopback6 = netip.MustParseAddr("fd00:100::f")
	itUplink    = netip.MustParsePrefix("203.0.113.1/24")
	itUplink6   = netip.MustParsePrefix("fd00:113::1/64")
	itClient    = netip.MustParseAddr("203.0.113.10")
	itAllowed   = netip.MustParseAddr("203.0.113.11") // in the source ranges
	itLBIP      = netip.MustParseAddr("198.51.100.10")
	itClient6   = netip.MustParseAddr("fd00:113::10")
	itWeb       = netip.MustParseAddr("10.96.0.10")
	itWeb6      = netip.MustParseAddr("fd00:96::10")
	itSticky    = netip.MustParseAddr("10.96.0.11")
	itEmpty     = netip.MustParseAddr("10.96.0.12")
	itSelf      = netip.MustParseAddr("10.96.0.13")
	itSelf6     = netip.MustParseAddr("fd00:96::13")
)

const (
	itNodePort = 30080
	itHostPort = 30555
)

type itPod struct {
	name string
	ns   *netnstest.NS
	pod  dataplane.Pod
}

func (p *itPod) endpoints() []service.Endpoint {
	return []service.Endpoint{
		{Addr: p.pod.IPv4, Port: 8080, Local: true, Ready: true, Serving: true},
		{Addr: p.pod.IPv6, Port: 8080, Local: true, Ready: true, Serving: true},
	}
}

// TestRealVPPCnatServices runs the renderer on a real VPP (VCOIL_VPP_BIN)
// behind vcoil's driver with dual-stack af_packet pods, and checks with
// real TCP and UDP: cluster IPs of both families (backends see the
// client's own address), a NodePort of both families from outside
// (eTP=Cluster: backends see the NAT loopback of the family), the node's
// own process reaching a cluster IP, loadBalancerSourceRanges, a hostPort
// (still NAT44) beside the translations, hairpin (a pod reaching itself
// through a Service sees the NAT loopback of the family), a Service
// without endpoints refused,
// ClientIP affinity, and a long-lived connection to a backend that stays
// while another backend of the Service goes (cnat releases every path's
// tracker at an update).
func TestRealVPPCnatServices(t *testing.T) {
	netnstest.RequireRoot(t)
	bin := vpptest.Binary(t)
	node, ext := netnstest.New(t, "cnatnode"), netnstest.New(t, "cnatext")
	netnstest.Veth(t, node, "vppup", ext, "eth0")
	ext.AddAddr("eth0", netip.PrefixFrom(itClient, 24).String())
	ext.AddAddr("eth0", netip.PrefixFrom(itClient6, 64).String())
	ext.AddAddr("eth0", netip.PrefixFrom(itAllowed, 24).String())
	// A node forwards (Kubernetes needs it): the kernel refuses what VPP
	// sends back for a service CIDR in its forward hook.
	node.Sysctl("net.ipv4.ip_forward", "1")
	node.Sysctl("net.ipv6.conf.all.forwarding", "1")
	v := vpptest.Start(t, bin, node.Path(), "create host-interface name vppup hw-addr 02:fe:00:00:00:01")
	d, err := vpp.New(vpp.Config{
		APISocket: v.APISocket, NodeNetns: node.Path(), PodInterface: vpp.InterfaceType(vpptest.PodInterface()),
		Uplink: "host-vppup", UplinkAddresses: []netip.Prefix{itUplink, itUplink6},
		PingInterval: 200 * time.Millisecond, RequestTimeout: 3 * time.Second, ReadyWait: 30 * time.Second,
	}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	t.Cleanup(func() {
		if t.Failed() {
			logVPPState(t, v)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := d.Init(ctx); err != nil {
		t.Fatalf("Init: %v", err)
	}
	if err := d.Blocks().Sync(ctx, []netip.Prefix{itBlock, itBlock6}); err != nil {
		t.Fatal(err)
	}
	pods := map[string]*itPod{}
	for i, name := range []string{"a", "b", "c"} {
		ns := netnstest.New(t, "cnatpod-"+name)
		p := &itPod{name: name, ns: ns, pod: dataplane.Pod{
			PodKey: dataplane.PodKey{ContainerID: "cnat-it-" + name, IfName: "eth0"}, Netns: ns.Path(),
			IPv4: netip.AddrFrom4([4]byte{10, 100, 0, byte(2 + i)}),
			IPv6: netip.AddrFrom16([16]byte{0xfd, 0, 1, 0, 15: byte(2 + i)}),
		}}
		if _, err := d.SetupPod(ctx, p.pod); err != nil {
			t.Fatalf("SetupPod %s: %v", name, err)
		}
		if name != "c" { // c is the client
			echotest.Serve(t, ns, name, netip.IPv4Unspecified())
			echotest.Serve(t, ns, name, netip.IPv6Unspecified())
		}
		pods[name] = p
	}
	a, b, c := pods["a"], pods["b"], pods["c"]
	// The outside client routes the node's services through the uplink.
	ext.IP("route", "add", "10.96.0.0/12", "via", itUplink.Addr().String())
	ext.IP("route", "add", "198.51.100.0/24", "via", itUplink.Addr().String())

	r, err := cnat.New(d, cnat.Config{ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("fd00:96::/108")}}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	both := append(a.endpoints(), b.endpoints()...)
	web := &service.Service{ID: service.ID{Namespace: "it", Name: "web"}, ClusterIPs: []netip.Addr{itWeb, itWeb6},
		Ports: []service.Port{
			{Protocol: service.TCP, Port: 80, NodePort: itNodePort, Endpoints: both, Cluster: both, HasEndpoints: true},
			{Protocol: service.UDP, Port: 53, Endpoints: both, Cluster: both, HasEndpoints: true},
		}}
	sticky := &service.Service{ID: service.ID{Namespace: "it", Name: "sticky"}, ClusterIPs: []netip.Addr{itSticky}, AffinityTimeout: time.Hour,
		Ports: []service.Port{{Protocol: service.TCP, Port: 80, Endpoints: both, Cluster: both, HasEndpoints: true}}}
	empty := &service.Service{ID: service.ID{Namespace: "it", Name: "empty"}, ClusterIPs: []netip.Addr{itEmpty},
		Ports: []service.Port{{Protocol: service.TCP, Port: 80}, {Protocol: service.UDP, Port: 53}}}
	state := &service.State{
		Node:     service.Node{Name: "node", NodePortAddresses: []netip.Addr{itUplink.Addr(), itUplink6.Addr()}, NATLoopback: []netip.Addr{itLoopback, itLoopback6}},
		Services: map[service.ID]*service.Service{web.ID: web, sticky.ID: sticky, empty.ID: empty},
	}
	start := time.Now()
	if err := r.Resync(ctx, state); err != nil {
		t.Fatalf("Resync: %v", err)
	}
	t.Logf("Resync in %s", time.Since(start))

	// reach checks that from reaches target over network until every
	// backend in want answered, each seeing the source src.
	reach := func(t *testing.T, from *netnstest.NS, network string, target netip.AddrPort, src netip.Addr, want ...string) {
		t.Helper()
		poll.Eventually(t, 20*time.Second, func() error {
			seen := map[string]bool{}
			for range 24 {
				name, saw, err := echotest.Ask(ctx, from, network, target, netip.Addr{})
				if err != nil {
					return err
				}
				if saw != src {
					return fmt.Errorf("%s %s: backend %s saw source %s, want %s", network, target, name, saw, src)
				}
				seen[name] = true
			}
			for _, w := range want {
				if !seen[w] {
					return fmt.Errorf("%s %s: 24 connections reached %v, want %v", network, target, seen, want)
				}
			}
			return nil
		})
	}
	t.Run("cluster IPs of both families", func(t *testing.T) {
		reach(t, c.ns, "tcp", netip.AddrPortFrom(itWeb, 80), c.pod.IPv4, "a", "b")
		reach(t, c.ns, "udp", netip.AddrPortFrom(itWeb, 53), c.pod.IPv4, "a", "b")
		reach(t, c.ns, "tcp", netip.AddrPortFrom(itWeb6, 80), c.pod.IPv6, "a", "b")
		reach(t, c.ns, "udp", netip.AddrPortFrom(itWeb6, 53), c.pod.IPv6, "a", "b")
	})
	t.Run("a NodePort of both families from outside is source-NATed to the NAT loopback", func(t *testing.T) {
		reach(t, ext, "tcp", netip.AddrPortFrom(itUplink.Addr(), itNodePort), itLoopback, "a", "b")
		reach(t, ext, "tcp", netip.AddrPortFrom(itUplink6.Addr(), itNodePort), itLoopback6, "a", "b")
	})
	// (Its own NodePorts need the node's kernel to hold the uplink's
	// addresses, as a lab node's does: the e2e suite checks them.)
	t.Run("the node's own process reaches a cluster IP of both families", func(t *testing.T) {
		reach(t, node, "tcp", netip.AddrPortFrom(itWeb, 80), itLoopback, "a", "b")
		reach(t, node, "tcp", netip.AddrPortFrom(itWeb6, 80), itLoopback6, "a", "b")
	})
	t.Run("hairpin: a pod reaching itself through a Service is source-NATed to the NAT loopback, both families", func(t *testing.T) {
		self := &service.Service{ID: service.ID{Namespace: "it", Name: "self"}, ClusterIPs: []netip.Addr{itSelf, itSelf6},
			Ports: []service.Port{{Protocol: service.TCP, Port: 80, Endpoints: a.endpoints(), Cluster: a.endpoints(), HasEndpoints: true}}}
		if err := r.Update(ctx, &service.Changes{Upsert: []*service.Service{self}}); err != nil {
			t.Fatal(err)
		}
		reach(t, a.ns, "tcp", netip.AddrPortFrom(itSelf, 80), itLoopback, "a")
		reach(t, a.ns, "tcp", netip.AddrPortFrom(itSelf6, 80), itLoopback6, "a")
		// Another pod is not source-NATed by the hairpin policy.
		reach(t, c.ns, "tcp", netip.AddrPortFrom(itSelf, 80), c.pod.IPv4, "a")
	})
	t.Run("loadBalancerSourceRanges admit a source in them and no other", func(t *testing.T) {
		ranged := &service.Service{ID: service.ID{Namespace: "it", Name: "ranged"}, ClusterIPs: []netip.Addr{netip.MustParseAddr("10.96.0.14")},
			LoadBalancerIPs: []netip.Addr{itLBIP}, LoadBalancerSourceRanges: []netip.Prefix{netip.PrefixFrom(itAllowed, 32)},
			Ports: []service.Port{{Protocol: service.TCP, Port: 80, Endpoints: both, Cluster: both, HasEndpoints: true}}}
		if err := r.Update(ctx, &service.Changes{Upsert: []*service.Service{ranged}}); err != nil {
			t.Fatal(err)
		}
		lb := netip.AddrPortFrom(itLBIP, 80)
		poll.Eventually(t, 20*time.Second, func() error {
			_, _, err := echotest.Ask(ctx, ext, "tcp", lb, itAllowed)
			return err
		})
		if _, _, err := echotest.Ask(ctx, ext, "tcp", lb, itClient); err == nil {
			t.Errorf("%s reached %s outside its source ranges", itClient, lb)
		}
		if err := r.Update(ctx, &service.Changes{Delete: []service.ID{ranged.ID}}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a Service without endpoints refuses", func(t *testing.T) {
		poll.Eventually(t, 10*time.Second, func() error {
			_, _, err := echotest.Ask(ctx, c.ns, "tcp", netip.AddrPortFrom(itEmpty, 80), netip.Addr{})
			if !errors.Is(err, syscall.ECONNREFUSED) {
				return fmt.Errorf("TCP to a Service without endpoints: %v, want connection refused", err)
			}
			return nil
		})
	})
	t.Run("ClientIP affinity keeps a client on one backend", func(t *testing.T) {
		first := ""
		for i := range 20 {
			name, _, err := echotest.Ask(ctx, c.ns, "tcp", netip.AddrPortFrom(itSticky, 80), netip.Addr{})
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				first = name
			} else if name != first {
				t.Fatalf("connection %d went to %s, the first to %s", i, name, first)
			}
		}
	})
	t.Run("a connection to a backend that stays survives the removal of another", func(t *testing.T) {
		conn, name := dialUntil(ctx, t, c.ns, netip.AddrPortFrom(itWeb, 80), "a")
		defer conn.Close()
		echoOnce(t, conn, "before")
		onlyA := a.endpoints()
		web2 := *web
		web2.Ports = []service.Port{
			{Protocol: service.TCP, Port: 80, NodePort: itNodePort, Endpoints: onlyA, Cluster: onlyA, HasEndpoints: true},
			{Protocol: service.UDP, Port: 53, Endpoints: onlyA, Cluster: onlyA, HasEndpoints: true},
		}
		if err := r.Update(ctx, &service.Changes{Upsert: []*service.Service{&web2}}); err != nil {
			t.Fatal(err)
		}
		echoOnce(t, conn, "after backend b went")
		reach(t, c.ns, "tcp", netip.AddrPortFrom(itWeb, 80), c.pod.IPv4, name)
		for range 10 {
			if got, _, err := echotest.Ask(ctx, c.ns, "tcp", netip.AddrPortFrom(itWeb, 80), netip.Addr{}); err != nil || got != "a" {
				t.Fatalf("after b went a connection reached %q (%v), want a", got, err)
			}
		}
	})
	t.Run("a UDP client that keeps sending reaches the endpoints a Service without them gets", func(t *testing.T) {
		// One socket, one 5-tuple: a cnat session made for its first
		// datagram (to the reject sink) would live while the client
		// sends. A Service of UDP ports only: a cluster IP with a
		// translation for some port owns its address in VPP, which
		// drops the others.
		quietIP := netip.MustParseAddr("10.96.0.16")
		const quietNodePort = 30053
		quiet := &service.Service{ID: service.ID{Namespace: "it", Name: "quiet"}, ClusterIPs: []netip.Addr{quietIP},
			Ports: []service.Port{{Protocol: service.UDP, Port: 53, NodePort: quietNodePort}}}
		if err := r.Update(ctx, &service.Changes{Upsert: []*service.Service{quiet}}); err != nil {
			t.Fatal(err)
		}
		dial := func(ns *netnstest.NS, target netip.AddrPort) *net.UDPConn {
			var conn *net.UDPConn
			if err := ns.Do(func() error {
				var err error
				conn, err = net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(target))
				return err
			}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			return conn
		}
		ask := func(conn *net.UDPConn) (string, error) {
			if _, err := conn.Write([]byte("hello")); err != nil {
				return "", err
			}
			_ = conn.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			buf := make([]byte, 200)
			n, err := conn.Read(buf)
			return string(buf[:n]), err
		}
		clusterIP := dial(c.ns, netip.AddrPortFrom(quietIP, 53))
		nodePort := dial(ext, netip.AddrPortFrom(itUplink.Addr(), quietNodePort))
		refused := 0
		for range 5 {
			for _, conn := range []*net.UDPConn{clusterIP, nodePort} {
				reply, err := ask(conn)
				if err == nil {
					t.Fatalf("a Service without endpoints answered %q", reply)
				}
				if conn == clusterIP && errors.Is(err, syscall.ECONNREFUSED) {
					refused++
				}
			}
		}
		if refused == 0 {
			t.Error("UDP to a cluster IP without endpoints was never refused (ICMP port unreachable)")
		}
		ready := &service.Service{ID: quiet.ID, ClusterIPs: quiet.ClusterIPs,
			Ports: []service.Port{{Protocol: service.UDP, Port: 53, NodePort: quietNodePort, Endpoints: a.endpoints(), Cluster: a.endpoints(), HasEndpoints: true}}}
		if err := r.Update(ctx, &service.Changes{Upsert: []*service.Service{ready}}); err != nil {
			t.Fatal(err)
		}
		for name, conn := range map[string]*net.UDPConn{"cluster IP": clusterIP, "NodePort": nodePort} {
			poll.Eventually(t, 5*time.Second, func() error {
				reply, err := ask(conn)
				if err != nil {
					return fmt.Errorf("the client's socket to the %s after its Service got an endpoint: %w", name, err)
				}
				if !strings.HasPrefix(reply, "a ") {
					return fmt.Errorf("%s answered %q, want backend a", name, reply)
				}
				return nil
			})
		}
	})
	t.Run("a host-network endpoint of the node from the node itself, a pod and outside, both families", func(t *testing.T) {
		// As on a lab node: the node's kernel holds the uplink's
		// addresses too (on lo), and VPP hands it what comes for them
		// and is not VPP's own (TCP, and UDP to ports VPP does not
		// serve), where the node's host-network server listens.
		node.IP("addr", "add", netip.PrefixFrom(itUplink.Addr(), 32).String(), "dev", "lo")
		node.IP("addr", "add", netip.PrefixFrom(itUplink6.Addr(), 128).String(), "dev", "lo", "nodad")
		vppCLI(t, v, "ip punt redirect add rx all via 169.254.100.2 host-"+vpp.HostInterconnectVPPName,
			"ip6 punt redirect add rx all via fe80::2 host-"+vpp.HostInterconnectVPPName,
			"set punt udp all", "set punt ipv6 udp all")
		echotest.Serve(t, node, "host", netip.IPv4Unspecified())
		echotest.Serve(t, node, "host", netip.IPv6Unspecified())
		hostIP, hostIP6 := netip.MustParseAddr("10.96.0.17"), netip.MustParseAddr("fd00:96::17")
		const hostNodePort = 30081
		eps := []service.Endpoint{
			{Addr: itUplink.Addr(), Port: 8080, Local: true, Ready: true, Serving: true},
			{Addr: itUplink6.Addr(), Port: 8080, Local: true, Ready: true, Serving: true},
		}
		host := &service.Service{ID: service.ID{Namespace: "it", Name: "host"}, ClusterIPs: []netip.Addr{hostIP, hostIP6},
			Ports: []service.Port{{Protocol: service.TCP, Port: 80, NodePort: hostNodePort, Endpoints: eps, Cluster: eps, HasEndpoints: true}}}
		n := state.Node
		n.HostAddresses = []netip.Addr{itUplink.Addr(), itUplink6.Addr()}
		if err := r.Update(ctx, &service.Changes{Node: &n, Upsert: []*service.Service{host}}); err != nil {
			t.Fatal(err)
		}
		// The node's own connection comes from the NAT loopback, which
		// the kernel holds: the server sees the cluster IP instead, and
		// answers through VPP.
		reach(t, node, "tcp", netip.AddrPortFrom(hostIP, 80), hostIP, "host")
		reach(t, node, "tcp", netip.AddrPortFrom(hostIP6, 80), hostIP6, "host")
		// A pod keeps its address (cnat translates it on its interface).
		reach(t, c.ns, "tcp", netip.AddrPortFrom(hostIP, 80), c.pod.IPv4, "host")
		reach(t, c.ns, "tcp", netip.AddrPortFrom(hostIP6, 80), c.pod.IPv6, "host")
		// From outside, eTP=Cluster: the cluster IP, not the NAT loopback.
		reach(t, ext, "tcp", netip.AddrPortFrom(itUplink.Addr(), hostNodePort), hostIP, "host")
		reach(t, ext, "tcp", netip.AddrPortFrom(itUplink6.Addr(), hostNodePort), hostIP6, "host")
	})
	t.Run("a hostPort (NAT44, beside cnat) from another pod, its own and from outside", func(t *testing.T) {
		// Last: a hostPort makes every pod a NAT44 frontend (NAT44-ED
		// enters the pods' path), which the checks above run without.
		ns := netnstest.New(t, "cnatpod-h")
		h := &itPod{name: "h", ns: ns, pod: dataplane.Pod{
			PodKey: dataplane.PodKey{ContainerID: "cnat-it-h", IfName: "eth0"}, Netns: ns.Path(),
			IPv4: netip.AddrFrom4([4]byte{10, 100, 0, 5}), IPv6: netip.AddrFrom16([16]byte{0xfd, 0, 1, 0, 15: 5}),
			PortMappings: []dataplane.PortMapping{{HostPort: itHostPort, ContainerPort: 8080, Protocol: dataplane.ProtocolTCP}},
		}}
		if _, err := d.SetupPod(ctx, h.pod); err != nil {
			t.Fatalf("SetupPod h: %v", err)
		}
		echotest.Serve(t, ns, "h", netip.IPv4Unspecified())
		reach(t, c.ns, "tcp", netip.AddrPortFrom(itUplink.Addr(), itHostPort), c.pod.IPv4, "h")
		// Its own pod, through NAT44's self-twice-NAT to the NAT loopback.
		reach(t, h.ns, "tcp", netip.AddrPortFrom(itUplink.Addr(), itHostPort), itLoopback, "h")
		name, _, err := echotest.Ask(ctx, ext, "tcp", netip.AddrPortFrom(itUplink.Addr(), itHostPort), netip.Addr{})
		if err != nil || name != h.name {
			t.Fatalf("outside -> hostPort: %q, %v", name, err)
		}
	})
}

// dialUntil connects from ns to target until backend want answers, and
// returns that connection (its greeting read).
func dialUntil(ctx context.Context, t *testing.T, ns *netnstest.NS, target netip.AddrPort, want string) (net.Conn, string) {
	t.Helper()
	for range 50 {
		var conn net.Conn
		err := ns.Do(func() error {
			var err error
			conn, err = (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp4", target.String())
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err == nil && len(line) > len(want) && line[:len(want)+1] == want+" " {
			return conn, want
		}
		conn.Close()
	}
	t.Fatalf("50 connections to %s never reached %s", target, want)
	return nil, ""
}

func echoOnce(t *testing.T, conn net.Conn, when string) {
	t.Helper()
	_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
	msg := "ping " + when + "\n"
	if _, err := conn.Write([]byte(msg)); err != nil {
		t.Fatalf("%s: write: %v", when, err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != msg {
		t.Fatalf("%s: the long-lived connection echoed %q (%v), want %q", when, buf, err, msg)
	}
}

// vppCLI runs VPP CLI commands, each of which must succeed.
func vppCLI(t *testing.T, v *vpptest.VPP, cmds ...string) {
	t.Helper()
	ch, done := v.Connect(t)
	defer done()
	for _, cmd := range cmds {
		reply := &vlib.CliInbandReply{}
		if err := ch.SendRequest(&vlib.CliInband{Cmd: cmd}).ReceiveReply(reply); err != nil {
			t.Fatalf("vpp# %s: %v", cmd, err)
		}
		if strings.TrimSpace(reply.Reply) != "" {
			t.Fatalf("vpp# %s: %s", cmd, reply.Reply)
		}
	}
}

// logVPPState logs what VPP holds for cnat and routes, for a failed test.
func logVPPState(t *testing.T, v *vpptest.VPP) {
	conn, err := core.Connect(socketclient.NewVppClient(v.APISocket))
	if err != nil {
		t.Logf("VPP state: connect: %v", err)
		return
	}
	defer conn.Disconnect()
	ch, err := conn.NewAPIChannel()
	if err != nil {
		return
	}
	defer ch.Close()
	for _, cmd := range []string{"show errors", "show nat44 sessions", "show interface addr", "show cnat translation", "show cnat session verbose", "show cnat client", "show ip fib", "show ip6 fib"} {
		reply := &vlib.CliInbandReply{}
		if err := ch.SendRequest(&vlib.CliInband{Cmd: cmd}).ReceiveReply(reply); err != nil {
			t.Logf("VPP state: %s: %v", cmd, err)
			continue
		}
		t.Logf("vpp# %s\n%s", cmd, reply.Reply)
	}
}
