package vpp_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/acl"
	"go.fd.io/govpp/binapi/acl_types"
	"go.fd.io/govpp/binapi/vlib"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
)

// Source validation on a real VPP (VCOIL_VPP_BIN): a pod with a reflective
// input ACL, an output ACL, both NAT roles and an allowed source prefix.
// VPP runs the uRPF check before the ACL and NAT input nodes, and the
// features it prints for the pod's interface are docs/vpp.md's table; a
// forged packet from the pod's namespace (both families) is dropped, counted
// by vcoil_source_validation_drops_total, and leaves no ACL session, while
// the pod's own address and its allowed prefix pass; a unicast neighbour
// solicitation from the pod's link-local address is answered. Router
// advertisements and redirects from the pod, from its own address and
// from a link-local one, reach neither the other pod nor VPP's forwarding,
// and are counted (the pod guard, read from the stats segment). Again
// after VPP's restart.
func TestRealVPPSourceValidation(t *testing.T) {
	netnstest.RequireRoot(t)
	bin := vpptest.Binary(t)
	node := netnstest.New(t, "vppsrc")
	netnstest.Veth(t, node, "vppup", node, "vppup-peer")
	v := vpptest.Start(t, bin, node.Path(), "create host-interface name vppup")
	reg := prometheus.NewRegistry()
	d, err := vpp.New(vpp.Config{
		APISocket: v.APISocket, NodeNetns: node.Path(), PodInterface: vpp.InterfaceType(vpptest.PodInterface()), Uplink: "host-vppup",
		PingInterval: 200 * time.Millisecond, ReadyWait: 30 * time.Second, Registry: reg,
		StatsSocket: filepath.Join(v.Dir, "stats.sock"),
	}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := d.Init(ctx); err != nil {
		t.Fatalf("Init: %v", err)
	}
	<-d.Resynced()
	if err := d.Blocks().Sync(ctx, []netip.Prefix{netip.MustParsePrefix("10.100.0.0/29"), netip.MustParsePrefix("fd00:100::/125")}); err != nil {
		t.Fatal(err)
	}
	a, b := netnstest.New(t, "src-a"), netnstest.New(t, "src-b")
	podA := dataplane.Pod{PodKey: dataplane.PodKey{ContainerID: "vpp-src-a", IfName: "eth0"}, Netns: a.Path(),
		IPv4: netip.MustParseAddr("10.100.0.2"), IPv6: netip.MustParseAddr("fd00:100::2"),
		SourcePrefixes: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}}
	podB := dataplane.Pod{PodKey: dataplane.PodKey{ContainerID: "vpp-src-b", IfName: "eth0"}, Netns: b.Path(),
		IPv4: netip.MustParseAddr("10.100.0.3"), IPv6: netip.MustParseAddr("fd00:100::3")}
	ifs, err := d.SetupPod(ctx, podA)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.SetupPod(ctx, podB); err != nil {
		t.Fatal(err)
	}
	got := listenUDP(t, b, ":9999")
	icmp6 := listenICMP(t, b, true)
	icmp4 := listenICMP(t, b, false)

	for _, when := range []string{"before VPP's restart", "after VPP's restart"} {
		if when != "before VPP's restart" {
			vpptest.RestartAndAwait(ctx, t, v, d.Resynced(), vpp.Incarnation(2))
			poll.Eventually(t, time.Minute, func() error { return d.Healthy(ctx) })
			if ifs, err = d.SetupPod(ctx, podA); err != nil {
				t.Fatal(err)
			}
		}
		// Addresses pod a does not own, and one of its allowed prefix (a
		// restarted VPP made its interface again).
		a.IP("addr", "replace", "198.18.77.7/32", "dev", "eth0")
		a.IP("addr", "replace", "203.0.113.9/32", "dev", "eth0")
		a.IP("-6", "addr", "replace", "fd00:77::7/128", "dev", "eth0", "nodad")
		a.IP("-6", "addr", "replace", "fe80::a/64", "dev", "eth0", "nodad")
		ch, nodeIfs, err := d.Channel(ctx, 16)
		if err != nil {
			t.Fatal(err)
		}
		// The policy renderer's reflective ACL on the input, an output
		// ACL, and both NAT roles: every feature of docs/vpp.md's table.
		refl := addACL(ctx, t, ch, "vcoil-test-reflect", vpp.ReflectiveRules())
		permit := addACL(ctx, t, ch, "vcoil-test-permit", permitAll())
		if err := d.SetACLLists(ctx, nodeIfs.Incarnation, vpp.ACLPolicy, []vpp.ACLSetting{
			{Interface: vpp.ACLInterface{Pod: podA.IPv4}, Lists: vpp.ACLLists{Input: []uint32{refl}, Output: []uint32{permit}}},
		}); err != nil {
			t.Fatal(err)
		}
		if err := d.SetPodNATRole(ctx, podA.PodKey, vpp.NATFrontend|vpp.NATBackend); err != nil {
			t.Fatal(err)
		}
		features := cli(t, ch, "show interface features "+ifs.HostIfName)
		arcs := parseFeatures(features)
		for _, c := range []struct{ arc, first string }{{"ip4-unicast", vpp.URPFNodeIPv4}, {"ip6-unicast", vpp.URPFNodeIPv6}} {
			got := arcs[c.arc]
			i := slices.Index(got, c.first)
			if i < 0 {
				t.Fatalf("%s: %s is not on %s of %s:\n%s", when, c.first, c.arc, ifs.HostIfName, features)
			}
			for _, later := range []string{"acl-plugin-in-ip4-fa", "acl-plugin-in-ip6-fa", "nat44-ed-classify", "nat-pre-in2out", "nat-pre-out2in"} {
				if j := slices.Index(got, later); j >= 0 && j < i {
					t.Fatalf("%s: %s runs before %s on %s:\n%s", when, later, c.first, c.arc, features)
				}
			}
		}
		want := documentedFeatures(t, "always", "output ACLs", "a NAT role", "frontend and backend")
		for arc, nodes := range want {
			if !slices.Equal(arcs[arc], nodes) {
				t.Fatalf("%s: VPP runs %v on %s of %s, docs/vpp.md's table says %v:\n%s", when, arcs[arc], arc, ifs.HostIfName, nodes, features)
			}
		}

		// b listens; a sends from its address, its allowed prefix, and
		// two forged sources.
		drops := func() (v4, v6 float64) {
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			for _, mf := range mfs {
				if mf.GetName() != "vcoil_source_validation_drops_total" {
					continue
				}
				for _, m := range mf.GetMetric() {
					if m.GetLabel()[0].GetValue() == "ipv4" {
						v4 = m.GetCounter().GetValue()
					} else {
						v6 = m.GetCounter().GetValue()
					}
				}
			}
			return v4, v6
		}
		v4Before, v6Before := drops()
		for _, c := range []struct{ src, dst string }{{"10.100.0.2", "10.100.0.3"}, {"203.0.113.9", "10.100.0.3"}} {
			poll.Eventually(t, 20*time.Second, func() error {
				if err := sendUDP(a, c.src, net.JoinHostPort(c.dst, "9999"), "genuine "+c.src); err != nil {
					return err
				}
				select {
				case m := <-got:
					if m != "genuine "+c.src {
						return fmt.Errorf("b received %q", m)
					}
					return nil
				case <-time.After(time.Second):
					return fmt.Errorf("%s: b did not receive pod a's datagram from %s", when, c.src)
				}
			})
		}
		for _, c := range []struct{ src, dst string }{{"198.18.77.7", "10.100.0.3"}, {"fd00:77::7", "fd00:100::3"}} {
			for range 5 {
				if err := sendUDP(a, c.src, net.JoinHostPort(c.dst, "9999"), "forged "+c.src); err != nil {
					t.Fatal(err)
				}
			}
		}
		select {
		case m := <-got:
			t.Fatalf("%s: b received %q", when, m)
		case <-time.After(2 * time.Second):
		}
		poll.Eventually(t, 10*time.Second, func() error {
			if v4, v6 := drops(); v4 < v4Before+5 || v6 < v6Before+5 {
				return fmt.Errorf("%s: drops %v/%v, were %v/%v: the forged packets were not counted", when, v4, v6, v4Before, v6Before)
			}
			return nil
		})
		sessions := cli(t, ch, "show acl-plugin sessions verbose 1")
		if strings.Contains(sessions, "198.18.77.7") || strings.Contains(sessions, "fd00:77::7") {
			t.Fatalf("%s: the reflective ACL recorded a session for a forged packet:\n%s", when, sessions)
		}
		if !strings.Contains(sessions, "10.100.0.2") {
			t.Fatalf("%s: the reflective ACL recorded no session for pod a's genuine packet (the check of the sessions is void):\n%s", when, sessions)
		}

		// Unicast from pod a's link-local address passes the check: its
		// source table holds fe80::/10 (as two halves) through its
		// interface. Pods on VPP nodes resolve no neighbours (their link is
		// NOARP and VPP holds them as static neighbours), so what a pod
		// sends from fe80:: is MLD and its own link-local traffic. Five
		// unicast solicitations from fe80::a, then one forged datagram
		// behind them on the same path: the counter must move by exactly
		// that one.
		_, v6Before = drops()
		for range 5 {
			if err := unicastFromLinkLocal(a, "eth0", netip.MustParseAddr("fe80::a"), netip.MustParseAddr("fe80::1")); err != nil {
				t.Fatalf("%s: %v", when, err)
			}
		}
		if err := sendUDP(a, "fd00:77::7", net.JoinHostPort("fd00:100::3", "9999"), "forged barrier"); err != nil {
			t.Fatal(err)
		}
		poll.Eventually(t, 10*time.Second, func() error {
			if _, v6 := drops(); v6 != v6Before+1 {
				return fmt.Errorf("%s: IPv6 drops %v, were %v: want exactly the forged barrier counted, not the link-local solicitations", when, v6, v6Before)
			}
			return nil
		})

		// Router advertisements and redirects, from pod a's own addresses
		// and from its link-local one, to pod b: none arrives, each is
		// counted; an echo request behind them arrives (the barrier).
		v4Before, v6Before = drops()
		for _, m := range []struct {
			src, dst string
			typ      byte
		}{
			{"fd00:100::2", "fd00:100::3", 134}, {"fe80::a", "fd00:100::3", 134},
			{"fd00:100::2", "fd00:100::3", 137}, {"fe80::a", "fd00:100::3", 137},
			{"10.100.0.2", "10.100.0.3", 5},
		} {
			if err := sendICMP(a, "eth0", netip.MustParseAddr(m.src), netip.MustParseAddr(m.dst), m.typ); err != nil {
				t.Fatalf("%s: %v", when, err)
			}
		}
		for _, barrier := range []struct {
			src, dst string
			typ      byte
			got      <-chan byte
		}{{"fd00:100::2", "fd00:100::3", 128, icmp6}, {"10.100.0.2", "10.100.0.3", 8, icmp4}} {
			poll.Eventually(t, 10*time.Second, func() error {
				if err := sendICMP(a, "eth0", netip.MustParseAddr(barrier.src), netip.MustParseAddr(barrier.dst), barrier.typ); err != nil {
					return err
				}
				for {
					select {
					case typ := <-barrier.got:
						if typ == barrier.typ {
							return nil
						}
						if typ == 134 || typ == 137 || typ == 5 {
							t.Fatalf("%s: pod b received ICMP type %d from pod a", when, typ)
						}
					case <-time.After(time.Second):
						return fmt.Errorf("%s: pod b did not receive the echo request from %s", when, barrier.src)
					}
				}
			})
		}
		poll.Eventually(t, 10*time.Second, func() error {
			if v4, v6 := drops(); v4 != v4Before+1 || v6 != v6Before+4 {
				return fmt.Errorf("%s: drops %v/%v, were %v/%v: want 1 IPv4 and 4 IPv6 router messages counted", when, v4, v6, v4Before, v6Before)
			}
			return nil
		})
		ch.Close()
	}
}

// listenICMP returns the types of the ICMP (v6: ICMPv6) messages ns
// receives, whatever their destination port or hop limit.
func listenICMP(t *testing.T, ns *netnstest.NS, v6 bool) <-chan byte {
	t.Helper()
	network, address := "ip4:icmp", "0.0.0.0"
	if v6 {
		network, address = "ip6:ipv6-icmp", "::"
	}
	types := make(chan byte, 64)
	msgs := listenPackets(t, ns, network, address, 1500)
	go func() {
		for m := range msgs {
			if len(m) > 0 {
				types <- m[0]
			}
		}
	}()
	return types
}

// sendICMP sends, from src on ifname in ns, one ICMP (ICMPv6 when dst is
// IPv6) message of type typ, code 0, to dst, with the hop limit a router
// gives its own messages (255); the body is zeros, enough for a router
// advertisement's or a redirect's fixed part.
func sendICMP(ns *netnstest.NS, ifname string, src, dst netip.Addr, typ byte) error {
	msg := make([]byte, 40)
	msg[0] = typ
	return sendICMPMessage(ns, ifname, src, dst, msg)
}

// sendICMPMessage sends msg (an ICMP or ICMPv6 message whose checksum the
// sender fills) from src on ifname in ns to dst, with hop limit 255 for
// IPv6; link-local addresses are scoped to ifname.
func sendICMPMessage(ns *netnstest.NS, ifname string, src, dst netip.Addr, msg []byte) error {
	return ns.Do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		if dst.Is4() {
			fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_ICMP)
			if err != nil {
				return err
			}
			defer syscall.Close(fd)
			if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: src.As4()}); err != nil {
				return fmt.Errorf("bind to %s: %w", src, err)
			}
			msg[2], msg[3] = 0, 0
			sum := icmpChecksum(msg)
			msg[2], msg[3] = byte(sum>>8), byte(sum)
			return syscall.Sendto(fd, msg, 0, &syscall.SockaddrInet4{Addr: dst.As4()})
		}
		fd, err := syscall.Socket(syscall.AF_INET6, syscall.SOCK_RAW, syscall.IPPROTO_ICMPV6)
		if err != nil {
			return err
		}
		defer syscall.Close(fd)
		if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_IPV6, syscall.IPV6_UNICAST_HOPS, 255); err != nil {
			return err
		}
		zone := func(a netip.Addr) uint32 {
			if a.IsLinkLocalUnicast() {
				return uint32(ifi.Index)
			}
			return 0
		}
		if err := syscall.Bind(fd, &syscall.SockaddrInet6{Addr: src.As16(), ZoneId: zone(src)}); err != nil {
			return fmt.Errorf("bind to %s%%%s: %w", src, ifname, err)
		}
		// The kernel fills the ICMPv6 checksum.
		if err := syscall.Sendto(fd, msg, 0, &syscall.SockaddrInet6{Addr: dst.As16(), ZoneId: zone(dst)}); err != nil {
			return fmt.Errorf("send ICMPv6 type %d from %s to %s: %w", msg[0], src, dst, err)
		}
		return nil
	})
}

func icmpChecksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

func addACL(ctx context.Context, t *testing.T, ch api.Channel, tag string, rules []acl_types.ACLRule) uint32 {
	t.Helper()
	reply := &acl.ACLAddReplaceReply{}
	if err := vppapi.Call(ch, &acl.ACLAddReplace{ACLIndex: ^uint32(0), Tag: tag, Count: uint32(len(rules)), R: rules}, reply); err != nil {
		t.Fatal(err)
	}
	return reply.ACLIndex
}

func permitAll() []acl_types.ACLRule {
	var out []acl_types.ACLRule
	for _, p := range []string{"0.0.0.0/0", "::/0"} {
		out = append(out, acl_types.ACLRule{IsPermit: acl_types.ACL_ACTION_API_PERMIT, SrcPrefix: prefix(p), DstPrefix: prefix(p),
			SrcportOrIcmptypeLast: 65535, DstportOrIcmpcodeLast: 65535})
	}
	return out
}

func cli(t *testing.T, ch api.Channel, cmd string) string {
	t.Helper()
	reply := &vlib.CliInbandReply{}
	if err := vppapi.Call(ch, &vlib.CliInband{Cmd: cmd}, reply); err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	return reply.Reply
}

// parseFeatures reads "show interface features": an arc's name on a line
// of its own ending in ':', then its nodes indented ("none configured"
// when it has none).
func parseFeatures(out string) map[string][]string {
	arcs := map[string][]string{}
	arc := ""
	s := bufio.NewScanner(strings.NewReader(out))
	for s.Scan() {
		line := s.Text()
		switch {
		case strings.TrimSpace(line) == "":
		case !strings.HasPrefix(line, " ") && strings.HasSuffix(line, ":"):
			arc = strings.TrimSuffix(line, ":")
		case arc != "" && strings.HasPrefix(line, "  ") && strings.TrimSpace(line) != "none configured":
			arcs[arc] = append(arcs[arc], strings.TrimSpace(line))
		}
	}
	return arcs
}

// documentedFeatures reads docs/vpp.md's table of a pod interface's
// features and returns, by arc in the table's order, the nodes of the
// rows whose "when" is one of whens.
func documentedFeatures(t *testing.T, whens ...string) map[string][]string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	doc, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "docs", "vpp.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "### Features of a pod interface")
	if !ok {
		t.Fatal("docs/vpp.md has no section \"Features of a pod interface\"")
	}
	out := map[string][]string{}
	inTable := false
	for _, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 4 {
			t.Fatalf("docs/vpp.md's features table: a row of %d cells: %s", len(cells), line)
		}
		arc, node, when := strings.TrimSpace(cells[0]), strings.Trim(strings.TrimSpace(cells[1]), "`"), strings.TrimSpace(cells[3])
		if arc == "arc" || strings.HasPrefix(arc, "---") || arc == "—" || !slices.Contains(whens, when) {
			continue
		}
		out[arc] = append(out[arc], node)
	}
	if len(out) == 0 {
		t.Fatal("docs/vpp.md's features table has no rows")
	}
	return out
}

// listenUDP returns the datagrams ns receives at address.
func listenUDP(t *testing.T, ns *netnstest.NS, address string) <-chan string {
	t.Helper()
	got := make(chan string, 64)
	msgs := listenPackets(t, ns, "udp", address, 256)
	go func() {
		for m := range msgs {
			got <- string(m)
		}
	}()
	return got
}

// listenPackets returns what a packet socket of network at address in ns
// receives (up to size bytes of each), until the test ends.
func listenPackets(t *testing.T, ns *netnstest.NS, network, address string, size int) <-chan []byte {
	t.Helper()
	var c net.PacketConn
	if err := ns.Do(func() (err error) { c, err = net.ListenPacket(network, address); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	got := make(chan []byte, 64)
	go func() {
		defer close(got)
		b := make([]byte, size)
		for {
			n, _, err := c.ReadFrom(b)
			if err != nil {
				return
			}
			got <- slices.Clone(b[:n])
		}
	}()
	return got
}

func sendUDP(ns *netnstest.NS, src, dst, msg string) error {
	return ns.Do(func() error {
		c, err := (&net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP(src)}}).Dial("udp", dst)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte(msg))
		return err
	})
}

// unicastFromLinkLocal sends, from src on ifname in ns, one unicast
// neighbour solicitation for dst to dst.
func unicastFromLinkLocal(ns *netnstest.NS, ifname string, src, dst netip.Addr) error {
	// type 135, code 0, checksum (the kernel's), reserved, target.
	ns6 := make([]byte, 24)
	ns6[0] = 135
	target := dst.As16()
	copy(ns6[8:], target[:])
	if err := sendICMPMessage(ns, ifname, src, dst, ns6); err != nil {
		return fmt.Errorf("a neighbour solicitation from %s to %s: %w", src, dst, err)
	}
	return nil
}

// A pod on a VPP node sends to 127.0.0.1 through VPP (its own kernel told
// to route 127.0.0.1 out of eth0, as a pod with NET_RAW can do with forged
// frames): neither a UDP service nor a TCP listener on the node's
// 127.0.0.1 is reached, while a hostPort on 127.0.0.1 keeps route_localnet
// on the host interconnect, and the node's own connection to that hostPort
// works.
func TestRealVPPPodCannotReachTheNodesLoopback(t *testing.T) {
	netnstest.RequireRoot(t)
	bin := vpptest.Binary(t)
	node := netnstest.New(t, "vpplo")
	netnstest.Veth(t, node, "vppup", node, "vppup-peer")
	v := vpptest.Start(t, bin, node.Path(), "create host-interface name vppup")
	d, err := vpp.New(vpp.Config{
		APISocket: v.APISocket, NodeNetns: node.Path(), PodInterface: vpp.InterfaceType(vpptest.PodInterface()), Uplink: "host-vppup",
		PingInterval: 200 * time.Millisecond, ReadyWait: 30 * time.Second,
	}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := d.Init(ctx); err != nil {
		t.Fatalf("Init: %v", err)
	}
	if err := d.Blocks().Sync(ctx, []netip.Prefix{netip.MustParsePrefix("10.100.0.0/29")}); err != nil {
		t.Fatal(err)
	}
	a := netnstest.New(t, "lo-a")
	pod := dataplane.Pod{PodKey: dataplane.PodKey{ContainerID: "vpp-lo-a", IfName: "eth0"}, Netns: a.Path(), IPv4: netip.MustParseAddr("10.100.0.2"),
		PortMappings: []dataplane.PortMapping{{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: 9443, ContainerPort: 8080, Protocol: dataplane.ProtocolTCP}}}
	if _, err := d.SetupPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	a.ServeTCPEcho(":8080")
	if got := node.ReadSysctl("net.ipv4.conf." + vpp.HostInterconnectName + ".route_localnet"); got != "1" {
		t.Fatalf("route_localnet = %s on the interconnect with a hostPort on 127.0.0.1, want 1", got)
	}
	// The node's own connection to the hostPort on 127.0.0.1 works.
	poll.Eventually(t, 20*time.Second, func() error { return echo(ctx, node, "127.0.0.1:9443") })

	private := listenUDP(t, node, "127.0.0.1:7071")
	tcp := node.Listen("tcp4", "127.0.0.1:7070")
	accepted := make(chan struct{}, 4)
	go func() {
		for {
			c, err := tcp.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			c.Close()
		}
	}()
	a.IP("route", "del", "local", "127.0.0.0/8", "dev", "lo", "table", "local")
	a.IP("route", "del", "local", "127.0.0.1", "dev", "lo", "table", "local")
	a.IP("route", "add", "127.0.0.1/32", "dev", "eth0")
	a.Sysctl("net.ipv4.conf.eth0.route_localnet", "1")
	for range 10 {
		if err := sendUDP(a, "10.100.0.2", "127.0.0.1:7071", "forged"); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		c, err := dialTCP(ctx, a, "127.0.0.1:7070")
		if err == nil {
			c.Close()
		}
	}()
	select {
	case m := <-private:
		t.Fatalf("the node's UDP service on 127.0.0.1 received %q from a pod", m)
	case <-accepted:
		t.Fatal("the node's TCP listener on 127.0.0.1 accepted a pod's connection")
	case <-time.After(5 * time.Second):
	}
}

func dialTCP(ctx context.Context, ns *netnstest.NS, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return ns.Dial(ctx, "tcp4", addr)
}
