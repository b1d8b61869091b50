package nat44_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"go.fd.io/govpp/adapter/socketclient"
	"go.fd.io/govpp/binapi/nat44_ed"
	"go.fd.io/govpp/binapi/vlib"
	"go.fd.io/govpp/core"

	"github.com/vcoil/vcoil/v2/internal/echotest"
	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
	"github.com/vcoil/vcoil/v2/pkg/service"
	"github.com/vcoil/vcoil/v2/pkg/service/renderer/nat44"
)

// The addresses of the real-VPP test. The node's block is 10.100.0.0/28,
// whose last address is the NAT loopback; the uplink is 203.0.113.0/24,
// where the "ext" namespace plays two outside clients.
var (
	itBlock    = netip.MustParsePrefix("10.100.0.0/28")
	itLoopback = netip.MustParseAddr("10.100.0.15")
	itUplink   = netip.MustParsePrefix("203.0.113.1/24")
	itClient   = netip.MustParseAddr("203.0.113.10") // outside the source ranges
	itAllowed  = netip.MustParseAddr("203.0.113.11") // inside them
	itWeb      = netip.MustParseAddr("10.96.0.10")
	itSticky   = netip.MustParseAddr("10.96.0.11")
	itEmpty    = netip.MustParseAddr("10.96.0.12")
	itLocal    = netip.MustParseAddr("10.96.0.13")
	itLate     = netip.MustParseAddr("10.96.0.14")
	itBig      = netip.MustParseAddr("10.96.0.15")
	itLBIP     = netip.MustParseAddr("198.51.100.10")
)

const (
	itNodePort      = 30080
	itLocalNodePort = 30081
	itEmptyNodePort = 30099
)

// itPod is a pod of the test: a namespace wired by the driver, serving
// TCP and UDP on 8080 with its name.
type itPod struct {
	name string
	ns   *netnstest.NS
	pod  dataplane.Pod
}

func (p *itPod) endpoint() service.Endpoint {
	return service.Endpoint{Addr: p.pod.IPv4, Port: 8080, NodeName: "node", Local: true, Ready: true, Serving: true}
}

// TestRealVPPServices runs the NAT44 renderer on vcoil's VPP driver against
// a real VPP (VCOIL_VPP_BIN) in a node namespace, with pods of the type
// VCOIL_VPP_POD_IF (af_packet where the kernel lacks vhost-net), and
// checks real traffic: cluster IPs over TCP and UDP, hairpin, the node's
// own processes, a NodePort and a LoadBalancer IP from outside with
// source ranges, refused frontends without endpoints, ClientIP affinity,
// a backend change while a connection stays up, and a VPP restart.
func TestRealVPPServices(t *testing.T) {
	netnstest.RequireRoot(t)
	bin := vpptest.Binary(t)
	node := netnstest.New(t, "svcnode")
	ext := netnstest.New(t, "svcext")
	netnstest.Veth(t, node, "vppup", ext, "eth0")
	ext.AddAddr("eth0", itClient.String()+"/24")
	ext.AddAddr("eth0", itAllowed.String()+"/24")
	for _, dst := range []string{"10.96.0.0/12", "198.51.100.0/24"} {
		ext.IP("route", "add", dst, "via", itUplink.Addr().String())
	}
	// A fixed MAC, as a NIC has: with VPP's random one the outside
	// namespace would keep the old one in its ARP cache after VPP's
	// restart.
	v := vpptest.Start(t, bin, node.Path(), "create host-interface name vppup hw-addr 02:fe:00:00:00:01")

	d, err := vpp.New(vpp.Config{
		APISocket: v.APISocket, NodeNetns: node.Path(), PodInterface: vpp.InterfaceType(vpptest.PodInterface()),
		Uplink: "host-vppup", UplinkAddresses: []netip.Prefix{itUplink},
		// A killed VPP is noticed when a ping times out.
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
	if err := d.Blocks().Sync(ctx, []netip.Prefix{itBlock}); err != nil {
		t.Fatal(err)
	}
	pods := map[string]*itPod{}
	for i, name := range []string{"a", "b", "c", "d"} {
		ns := netnstest.New(t, "svcpod-"+name)
		p := &itPod{name: name, ns: ns, pod: dataplane.Pod{
			PodKey: dataplane.PodKey{ContainerID: "svc-it-" + name, IfName: "eth0"}, Netns: ns.Path(),
			IPv4: netip.AddrFrom4([4]byte{10, 100, 0, byte(2 + i)}),
		}}
		if _, err := d.SetupPod(ctx, p.pod); err != nil {
			t.Fatalf("SetupPod %s: %v", name, err)
		}
		if name != "c" { // c is the client
			serveNamed(t, ns, name)
		}
		pods[name] = p
	}
	a, b, c, dd := pods["a"], pods["b"], pods["c"], pods["d"]

	r, err := nat44.New(d, nat44.Config{ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	web := &service.Service{
		ID: service.ID{Namespace: "it", Name: "web"}, ClusterIPs: []netip.Addr{itWeb},
		LoadBalancerIPs:          []netip.Addr{itLBIP},
		LoadBalancerSourceRanges: []netip.Prefix{netip.PrefixFrom(itAllowed, 32)},
	}
	setEndpoints := func(s *service.Service, nodePort uint16, eps ...service.Endpoint) {
		s.Ports = []service.Port{
			{Name: "http", Protocol: service.TCP, Port: 80, NodePort: nodePort, Endpoints: eps, Cluster: eps, HasEndpoints: len(eps) > 0},
			{Name: "dns", Protocol: service.UDP, Port: 53, Endpoints: eps, Cluster: eps, HasEndpoints: len(eps) > 0},
		}
	}
	setEndpoints(web, itNodePort, a.endpoint(), b.endpoint())
	sticky := &service.Service{ID: service.ID{Namespace: "it", Name: "sticky"}, ClusterIPs: []netip.Addr{itSticky}, AffinityTimeout: 3 * time.Hour}
	setEndpoints(sticky, 0, a.endpoint(), b.endpoint())
	empty := &service.Service{ID: service.ID{Namespace: "it", Name: "empty"}, ClusterIPs: []netip.Addr{itEmpty}}
	setEndpoints(empty, itEmptyNodePort)
	// externalTrafficPolicy=Local: its NodePort goes to the local
	// endpoint without source NAT.
	local := &service.Service{ID: service.ID{Namespace: "it", Name: "local"}, ClusterIPs: []netip.Addr{itLocal}, ExternalLocal: true}
	setEndpoints(local, itLocalNodePort, b.endpoint())
	for i := range local.Ports {
		local.Ports[i].Local = local.Ports[i].Endpoints
	}
	// late gets its first endpoint during the test.
	late := &service.Service{ID: service.ID{Namespace: "it", Name: "late"}, ClusterIPs: []netip.Addr{itLate}}
	setEndpoints(late, 0)
	state := &service.State{
		Node: service.Node{Name: "node", NodePortAddresses: []netip.Addr{itUplink.Addr()}, NATLoopback: []netip.Addr{itLoopback}},
		Services: map[service.ID]*service.Service{
			web.ID: web, sticky.ID: sticky, empty.ID: empty, local.ID: local, late.ID: late,
		},
	}
	start := time.Now()
	if err := r.Resync(ctx, state); err != nil {
		t.Fatalf("Resync: %v", err)
	}
	t.Logf("Resync in %s", time.Since(start))
	update := func(t *testing.T, s *service.Service) {
		t.Helper()
		state.Services[s.ID] = s
		if err := r.Update(ctx, &service.Changes{Upsert: []*service.Service{s}}); err != nil {
			t.Fatalf("Update %s: %v", s.ID, err)
		}
	}

	webTCP := netip.AddrPortFrom(itWeb, 80)
	// clusterIP checks the cluster IP from a pod, over TCP (until both
	// backends answered) and UDP: backends see the pod's own address.
	clusterIP := func(t *testing.T, when string) {
		t.Helper()
		poll.Eventually(t, 30*time.Second, func() error {
			seen := map[string]bool{}
			for range 20 {
				name, from, err := ask(ctx, c.ns, "tcp", webTCP, netip.Addr{})
				if err != nil {
					return fmt.Errorf("%s: pod c -> %s: %w", when, webTCP, err)
				}
				if from != c.pod.IPv4 {
					return fmt.Errorf("%s: pod c -> %s: backend %s saw source %s, want the pod's %s", when, webTCP, name, from, c.pod.IPv4)
				}
				seen[name] = true
			}
			if !seen["a"] || !seen["b"] {
				return fmt.Errorf("%s: 20 connections to %s reached %v, want both a and b", when, webTCP, seen)
			}
			name, from, err := ask(ctx, c.ns, "udp", netip.AddrPortFrom(itWeb, 53), netip.Addr{})
			if err != nil || from != c.pod.IPv4 || (name != "a" && name != "b") {
				return fmt.Errorf("%s: pod c -> %s:53/udp: %s from %s, %v", when, itWeb, name, from, err)
			}
			return nil
		})
	}
	// nodePort checks the NodePorts from outside: under eTP=Cluster the
	// backend sees the NAT loopback (its reply must come back through this
	// node), under eTP=Local the client.
	nodePort := func(t *testing.T, when string) {
		t.Helper()
		np := netip.AddrPortFrom(itUplink.Addr(), itNodePort)
		poll.Eventually(t, 30*time.Second, func() error {
			// Twice-NAT draws VPP's random numbers twice per connection,
			// which skews the choice of backend unless the
			// probabilities are right: both must be reached.
			seen := map[string]bool{}
			for range 20 {
				name, from, err := ask(ctx, ext, "tcp", np, itClient)
				if err != nil {
					return fmt.Errorf("%s: outside client -> NodePort %s: %w", when, np, err)
				}
				if from != itLoopback {
					return fmt.Errorf("%s: NodePort %s: backend %s saw %s, want the NAT loopback %s", when, np, name, from, itLoopback)
				}
				seen[name] = true
			}
			if !seen["a"] || !seen["b"] {
				return fmt.Errorf("%s: 20 connections to NodePort %s reached %v, want both a and b", when, np, seen)
			}
			lp := netip.AddrPortFrom(itUplink.Addr(), itLocalNodePort)
			name, from, err := ask(ctx, ext, "tcp", lp, itClient)
			if err != nil {
				return fmt.Errorf("%s: outside client -> eTP=Local NodePort %s: %w", when, lp, err)
			}
			if name != "b" || from != itClient {
				return fmt.Errorf("%s: eTP=Local NodePort %s: backend %s saw %s, want b seeing the client %s", when, lp, name, from, itClient)
			}
			return nil
		})
	}
	// refused checks that frontends without endpoints refuse, as
	// kube-proxy's do, rather than time out, and so does a cluster IP on a
	// port its service does not have.
	refused := func(t *testing.T, when string) {
		t.Helper()
		poll.Eventually(t, 30*time.Second, func() error {
			for _, x := range []struct {
				from   *netnstest.NS
				src    netip.Addr
				net    string
				target netip.AddrPort
			}{
				{c.ns, netip.Addr{}, "tcp", netip.AddrPortFrom(itEmpty, 80)},
				{c.ns, netip.Addr{}, "udp", netip.AddrPortFrom(itEmpty, 53)},
				{ext, itClient, "tcp", netip.AddrPortFrom(itUplink.Addr(), itEmptyNodePort)},
				// The node's own client: its kernel refuses it before
				// VPP (the sink's answer would come back from the
				// node's own NAT loopback).
				{node, netip.Addr{}, "tcp", netip.AddrPortFrom(itEmpty, 80)},
				// A port the service lacks: VPP routes it to the
				// node's kernel, which refuses it.
				{c.ns, netip.Addr{}, "tcp", netip.AddrPortFrom(itWeb, 81)},
			} {
				name, _, err := ask(ctx, x.from, x.net, x.target, x.src)
				if !errors.Is(err, syscall.ECONNREFUSED) {
					return fmt.Errorf("%s: %s -> %s/%s: got %q, %v; want connection refused", when, x.from, x.target, x.net, name, err)
				}
			}
			return nil
		})
	}

	t.Run("cluster IP from a pod over TCP and UDP", func(t *testing.T) { clusterIP(t, "first sync") })

	t.Run("hairpin: a backend reaching its own service sees the NAT loopback", func(t *testing.T) {
		poll.Eventually(t, 30*time.Second, func() error {
			for range 20 {
				name, from, err := ask(ctx, a.ns, "tcp", webTCP, netip.Addr{})
				if err != nil {
					return err
				}
				if name == "a" {
					if from != itLoopback {
						return fmt.Errorf("pod a reached itself through %s with source %s, want the NAT loopback %s", webTCP, from, itLoopback)
					}
					return nil
				}
			}
			return fmt.Errorf("20 connections of pod a to %s never reached a", webTCP)
		})
	})

	t.Run("the node's own processes reach a cluster IP", func(t *testing.T) {
		poll.Eventually(t, 30*time.Second, func() error {
			name, from, err := ask(ctx, node, "tcp", webTCP, netip.Addr{})
			if err != nil {
				return fmt.Errorf("node -> %s: %w", webTCP, err)
			}
			if from != itLoopback {
				return fmt.Errorf("node -> %s: backend %s saw %s, want the NAT loopback %s", webTCP, name, from, itLoopback)
			}
			return nil
		})
	})

	t.Run("NodePort from outside through the uplink", func(t *testing.T) { nodePort(t, "first sync") })

	t.Run("loadBalancerSourceRanges", func(t *testing.T) {
		lb := netip.AddrPortFrom(itLBIP, 80)
		poll.Eventually(t, 30*time.Second, func() error {
			if _, _, err := ask(ctx, ext, "tcp", lb, itAllowed); err != nil {
				return fmt.Errorf("allowed source %s -> %s: %w", itAllowed, lb, err)
			}
			return nil
		})
		name, _, err := ask(ctx, ext, "tcp", lb, itClient)
		if !isTimeout(err) {
			t.Fatalf("source %s outside the ranges -> %s: got %q, %v; want no answer", itClient, lb, name, err)
		}
	})

	t.Run("frontends without endpoints refuse", func(t *testing.T) { refused(t, "first sync") })

	t.Run("a UDP client refused while there is no endpoint is answered once there is one", func(t *testing.T) {
		// The same socket (the same 5-tuple) before and after: the
		// session to the reject sink must not outlive its mapping.
		target := netip.AddrPortFrom(itLate, 53)
		var conn *net.UDPConn
		c.ns.Run(func() error {
			var err error
			conn, err = net.DialUDP("udp4", &net.UDPAddr{IP: c.pod.IPv4.AsSlice(), Port: 40053}, net.UDPAddrFromAddrPort(target))
			return err
		})
		defer conn.Close()
		roundTrip := func() (string, error) {
			_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := conn.Write([]byte("hello")); err != nil {
				return "", err
			}
			buf := make([]byte, 200)
			n, err := conn.Read(buf)
			return string(buf[:n]), err
		}
		poll.Eventually(t, 30*time.Second, func() error {
			if answer, err := roundTrip(); !errors.Is(err, syscall.ECONNREFUSED) {
				return fmt.Errorf("%s/udp without endpoints: %q, %v; want connection refused", target, answer, err)
			}
			return nil
		})
		s := *late
		setEndpoints(&s, 0, a.endpoint())
		update(t, &s)
		poll.Eventually(t, 10*time.Second, func() error {
			answer, err := roundTrip()
			if err != nil || !strings.HasPrefix(answer, "a ") {
				return fmt.Errorf("%s/udp from the same socket after a got there: %q, %v", target, answer, err)
			}
			return nil
		})
	})

	t.Run("a Service of 300 endpoints gets a mapping VPP can choose from", func(t *testing.T) {
		// VPP keeps the running sum of a mapping's probabilities in a
		// byte: a sum of 256 kills VPP at the first connection, a larger
		// one wraps.
		var eps []service.Endpoint
		for i := range 300 {
			eps = append(eps, service.Endpoint{Addr: netip.AddrFrom4([4]byte{10, 101, byte(i / 256), byte(i % 256)}), Port: 8080,
				NodeName: "other", Ready: true, Serving: true})
		}
		big := &service.Service{ID: service.ID{Namespace: "it", Name: "big"}, ClusterIPs: []netip.Addr{itBig}}
		big.Ports = []service.Port{{Name: "http", Protocol: service.TCP, Port: 80, Endpoints: eps, Cluster: eps, HasEndpoints: true}}
		pid := v.PID()
		update(t, big)
		locals := lbLocals(t, v, netip.AddrPortFrom(itBig, 80))
		sum := 0
		for _, l := range locals {
			sum += int(l.Probability)
		}
		if len(locals) < 2 || sum < 2 || sum > 255 {
			t.Fatalf("VPP holds %d locals for %s:80 whose probabilities sum to %d; want 2..255", len(locals), itBig, sum)
		}
		// The endpoints lead nowhere: what matters is that VPP chose one
		// and lives on.
		for range 5 {
			_, _, err := ask(ctx, c.ns, "tcp", netip.AddrPortFrom(itBig, 80), netip.Addr{})
			t.Logf("pod c -> %s:80 (backends nowhere): %v", itBig, err)
		}
		// A VPP that died would answer no dump (vpptest does not start
		// it again).
		if err := syscall.Kill(pid, 0); err != nil {
			t.Fatalf("VPP (pid %d) is gone after connections to %s:80: %v", pid, itBig, err)
		}
		if again := lbLocals(t, v, netip.AddrPortFrom(itBig, 80)); len(again) != len(locals) {
			t.Fatalf("after connections to %s:80 VPP holds %d locals, before %d", itBig, len(again), len(locals))
		}
		t.Logf("%d locals of 300 endpoints, probabilities summing to %d", len(locals), sum)
	})

	t.Run("ClientIP affinity, and another backend once the chosen one is gone", func(t *testing.T) {
		target := netip.AddrPortFrom(itSticky, 80)
		var first string
		for i := range 6 {
			var name string
			poll.Eventually(t, 30*time.Second, func() error {
				var err error
				name, _, err = ask(ctx, c.ns, "tcp", target, netip.Addr{})
				return err
			})
			if i == 0 {
				first = name
			} else if name != first {
				t.Fatalf("connection %d to %s reached %s, the first reached %s: no affinity", i+1, target, name, first)
			}
		}
		other := a
		if first == "a" {
			other = b
		}
		s := *sticky
		setEndpoints(&s, 0, other.endpoint())
		update(t, &s)
		for range 3 {
			poll.Eventually(t, 30*time.Second, func() error {
				name, _, err := ask(ctx, c.ns, "tcp", target, netip.Addr{})
				if err != nil {
					return err
				}
				if name != other.name {
					return fmt.Errorf("after %s left %s, a connection reached %s", first, target, name)
				}
				return nil
			})
		}
	})

	t.Run("a backend change keeps another client's connection", func(t *testing.T) {
		conn, err := c.ns.Dial(ctx, "tcp", webTCP.String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		rd := bufio.NewReader(conn)
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		greeting, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("greeting of %s: %v", webTCP, err)
		}
		kept := strings.Fields(greeting)[0]
		gone := a
		if kept == "a" {
			gone = b
		}
		s := *web
		setEndpoints(&s, itNodePort, pods[kept].endpoint(), dd.endpoint())
		update(t, &s)
		for i := range 3 {
			msg := fmt.Sprintf("still there %d\n", i)
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(conn, msg); err != nil {
				t.Fatalf("write on the connection to %s after the change: %v", kept, err)
			}
			got, err := rd.ReadString('\n')
			if err != nil || got != msg {
				t.Fatalf("echo on the connection to %s after the change: %q, %v", kept, got, err)
			}
		}
		poll.Eventually(t, 30*time.Second, func() error {
			seen := map[string]bool{}
			for range 20 {
				name, _, err := ask(ctx, c.ns, "tcp", webTCP, netip.Addr{})
				if err != nil {
					return err
				}
				seen[name] = true
			}
			if seen[gone.name] || !seen["d"] || !seen[kept] {
				return fmt.Errorf("after the change, 20 connections to %s reached %v; want %s and d, not %s", webTCP, seen, kept, gone.name)
			}
			return nil
		})
		// Back to a and b for what follows, in a new Service: the
		// renderer may keep those it was given.
		back := *web
		setEndpoints(&back, itNodePort, a.endpoint(), b.endpoint())
		update(t, &back)
	})

	t.Run("after a VPP restart the services work again", func(t *testing.T) {
		// Drain a notification of the first sync, if any.
		select {
		case <-d.Resynced():
		default:
		}
		v.Restart()
		poll.Eventually(t, time.Minute, func() error { return d.Healthy(ctx) })
		select {
		case <-d.Resynced():
		case <-time.After(time.Minute):
			t.Fatal("the driver announced no resync after VPP's restart")
		}
		start := time.Now()
		if err := r.Resync(ctx, state); err != nil {
			t.Fatalf("Resync after the restart: %v", err)
		}
		t.Logf("Resync after the restart in %s", time.Since(start))
		for _, p := range []*itPod{a, b, c, dd} {
			if err := d.CheckPod(ctx, p.pod); err != nil {
				t.Fatalf("pod %s after the restart: %v", p.name, err)
			}
		}
		clusterIP(t, "after the restart")
		nodePort(t, "after the restart")
		refused(t, "after the restart")
	})
}

// serveNamed serves TCP and UDP on 8080 in ns: a TCP client first gets
// "<name> <its address>\n", then its bytes echoed; a UDP datagram gets
// "<name> <its address>".
func serveNamed(t *testing.T, ns *netnstest.NS, name string) {
	serveNamedOn(t, ns, name, netip.IPv4Unspecified())
}

// serveNamedOn is serveNamed on addr:8080 only (echotest.Serve).
func serveNamedOn(t *testing.T, ns *netnstest.NS, name string, addr netip.Addr) {
	echotest.Serve(t, ns, name, addr)
}

// ask is echotest.Ask.
func ask(ctx context.Context, ns *netnstest.NS, network string, target netip.AddrPort, src netip.Addr) (string, netip.Addr, error) {
	return echotest.Ask(ctx, ns, network, target, src)
}

// logVPPState logs what VPP holds for NAT, ACLs and routes, for a failed
// test.
func logVPPState(t *testing.T, v *vpptest.VPP) {
	conn, err := core.Connect(socketclient.NewVppClient(v.APISocket))
	if err != nil {
		t.Logf("VPP state: connect: %v", err)
		return
	}
	defer conn.Disconnect()
	ch, err := conn.NewAPIChannel()
	if err != nil {
		t.Logf("VPP state: channel: %v", err)
		return
	}
	defer ch.Close()
	for _, cmd := range []string{"show interface addr", "show nat44 interfaces", "show nat44 addresses", "show nat44 static mappings",
		"show nat44 sessions", "show acl-plugin acl", "show acl-plugin interface", "show ip fib"} {
		reply := &vlib.CliInbandReply{}
		if err := ch.SendRequest(&vlib.CliInband{Cmd: cmd}).ReceiveReply(reply); err != nil {
			t.Logf("VPP state: %s: %v", cmd, err)
			continue
		}
		t.Logf("vpp# %s\n%s", cmd, reply.Reply)
	}
}

// lbLocals dumps the locals of the load-balancing mapping of frontend.
func lbLocals(t *testing.T, v *vpptest.VPP, frontend netip.AddrPort) []nat44_ed.Nat44LbAddrPort {
	t.Helper()
	ch, done := v.Connect(t)
	defer done()
	var locals []nat44_ed.Nat44LbAddrPort
	err := vppapi.Dump(ch, &nat44_ed.Nat44LbStaticMappingDump{},
		func() *nat44_ed.Nat44LbStaticMappingDetails { return &nat44_ed.Nat44LbStaticMappingDetails{} },
		func(d *nat44_ed.Nat44LbStaticMappingDetails) {
			if netip.AddrFrom4(d.ExternalAddr) == frontend.Addr() && d.ExternalPort == frontend.Port() {
				locals = d.Locals
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	return locals
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}
