package nfteval

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
)

// host is a namespace linked to the node by a veth whose node end is ifname.
type host struct {
	name     string
	ns       *netnstest.NS
	ifname   string
	v4, v6   string
	gw4, gw6 string
}

func (h *host) addr(v6 bool) string {
	if v6 {
		return h.v6
	}
	return h.v4
}

// outcome is what a client sees of one connection attempt.
type outcome string

const (
	answered outcome = "answered"
	refused  outcome = "refused"
	dropped  outcome = "dropped"
)

// trafficPorts are the ports every pod serves (TCP on all, UDP on its
// addresses).
var (
	tcpPorts = []uint16{22, 80, 85, 443, 8080, 8443}
	udpPorts = []uint16{53, 80, 1500}
)

func serve(t *testing.T, h *host) {
	t.Helper()
	for _, port := range tcpPorts {
		l := h.ns.Listen("tcp", net.JoinHostPort("::", strconv.Itoa(int(port))))
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte(h.name + "\n"))
				_ = c.Close()
			}
		}()
	}
	for _, a := range []string{h.v4, h.v6} {
		for _, port := range udpPorts {
			var pc net.PacketConn
			h.ns.Run(func() error {
				var err error
				pc, err = net.ListenPacket("udp", net.JoinHostPort(a, strconv.Itoa(int(port))))
				return err
			})
			t.Cleanup(func() { _ = pc.Close() })
			go func() {
				buf := make([]byte, 64)
				for {
					_, from, err := pc.ReadFrom(buf)
					if err != nil {
						return
					}
					_, _ = pc.WriteTo([]byte(h.name+"\n"), from)
				}
			}()
		}
	}
}

// try makes one connection attempt and says what came of it.
func try(ctx context.Context, from *host, network, addr string) (outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	c, err := from.ns.Dial(ctx, network, addr)
	if err == nil {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(1500 * time.Millisecond))
		if network == "udp" {
			_, err = c.Write([]byte("?"))
		}
		if err == nil {
			buf := make([]byte, 64)
			_, err = c.Read(buf)
		}
	}
	var ne net.Error
	switch {
	case err == nil:
		return answered, nil
	case errors.Is(err, syscall.ECONNREFUSED):
		return refused, nil
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return dropped, nil
	}
	return "", err
}

// TestTheKernelAgreesWithTheEvaluatorOnRealPackets sends real TCP and UDP
// connections through the policy-like table between pods and external
// clients of a node, and compares what the clients see with what the
// evaluator says of the request (new, forward and postrouting) and of the
// reply (established, back).
func TestTheKernelAgreesWithTheEvaluatorOnRealPackets(t *testing.T) {
	requireNft(t)
	node := netnstest.New(t, "node")
	node.Sysctl("net.ipv4.ip_forward", "1")
	node.Sysctl("net.ipv6.conf.all.forwarding", "1")
	a := &host{name: "pod-a", ifname: "vcoila", v4: "10.1.0.5", v6: "fd00:1::5", gw4: "169.254.1.1", gw6: "fe80::1"}
	b := &host{name: "pod-b", ifname: "vcoilb", v4: "10.1.0.6", v6: "fd00:1::6", gw4: "169.254.1.1", gw6: "fe80::1"}
	c0 := &host{name: "client-0", ifname: "ext0", v4: "203.0.113.10", v6: "2001:db8:203::10", gw4: "203.0.113.1", gw6: "2001:db8:203::1"}
	c1 := &host{name: "client-1", ifname: "ext1", v4: "198.51.100.10", v6: "2001:db8:198::10", gw4: "198.51.100.1", gw6: "2001:db8:198::1"}
	for _, h := range []*host{a, b} {
		h.ns = netnstest.New(t, h.name)
		netnstest.Veth(t, node, h.ifname, h.ns, "eth0")
		node.AddAddr(h.ifname, h.gw4+"/32")
		node.AddAddr(h.ifname, h.gw6+"/64")
		h.ns.AddAddr("eth0", h.v4+"/32")
		h.ns.AddAddr("eth0", h.v6+"/128")
		h.ns.IP("route", "add", h.gw4, "dev", "eth0", "scope", "link")
		h.ns.IP("route", "add", "default", "via", h.gw4, "dev", "eth0")
		h.ns.IP("-6", "route", "add", "default", "via", h.gw6, "dev", "eth0")
		node.IP("route", "add", h.v4, "dev", h.ifname)
		node.IP("-6", "route", "add", h.v6, "dev", h.ifname)
		serve(t, h)
	}
	for _, h := range []*host{c0, c1} {
		h.ns = netnstest.New(t, h.name)
		netnstest.Veth(t, node, h.ifname, h.ns, "eth0")
		node.AddAddr(h.ifname, h.gw4+"/24")
		node.AddAddr(h.ifname, h.gw6+"/64")
		h.ns.AddAddr("eth0", h.v4+"/24")
		h.ns.AddAddr("eth0", h.v6+"/64")
		h.ns.IP("route", "add", "default", "via", h.gw4)
		h.ns.IP("-6", "route", "add", "default", "via", h.gw6)
	}
	tbl, err := Parse(load(t, node, policyLike))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}

	// expect is the evaluator's reading: the request must pass forward
	// and postrouting as a new connection, its reply both hooks back as
	// an established one.
	expect := func(from, to *host, v6 bool, proto uint8, port uint16) (outcome, string) {
		p := Packet{Src: netip.MustParseAddr(from.addr(v6)), Dst: netip.MustParseAddr(to.addr(v6)), Proto: proto,
			SrcPort: 40000, DstPort: port, IIF: from.ifname, OIF: to.ifname}
		reply := Packet{Src: p.Dst, Dst: p.Src, Proto: proto, SrcPort: port, DstPort: 40000,
			IIF: to.ifname, OIF: from.ifname, Ct: CtEstablished}
		var why string
		for _, step := range []struct {
			p    Packet
			hook Hook
		}{{p, Forward}, {p, Postrouting}, {reply, Forward}, {reply, Postrouting}} {
			r, err := tbl.Evaluate(step.hook, step.p)
			if err != nil {
				t.Fatalf("Evaluate: %v", err)
			}
			why += fmt.Sprintf("%s at %s: %s; ", step.p, step.hook, r)
			switch r.Verdict {
			case Reject:
				return refused, why
			case Drop:
				return dropped, why
			}
		}
		return answered, why
	}

	cases := []struct {
		from, to *host
		v6       bool
		proto    uint8
		port     uint16
	}{
		{b, a, false, TCP, 443},   // web from pods
		{b, a, false, TCP, 85},    // a peer by the concatenation
		{a, b, false, TCP, 80},    // the goto'd chain's verdict map
		{a, b, false, TCP, 8443},  // the end of a goto'd chain: the base policy
		{a, b, true, TCP, 8443},   // ip saddr != @set does not apply to IPv6
		{b, a, true, UDP, 1500},   // an IPv6 interval set and a port range
		{a, b, false, TCP, 443},   // reject
		{c1, a, false, TCP, 80},   // jump to tail from the input interface: reject
		{b, a, false, TCP, 8080},  // past the ports: the rule after the map
		{b, a, false, UDP, 80},    // the concatenation's protocol
		{a, b, false, TCP, 22},    // the verdict map's drop
		{a, b, false, UDP, 53},    // not TCP or SCTP
		{c0, b, false, TCP, 8443}, // outside the interval set
		{c0, a, false, UDP, 53},   // not a peer
		{c0, a, true, UDP, 1500},  // outside the IPv6 interval set
		{b, a, true, TCP, 443},    // IPv4 sets do not match IPv6
		{c1, a, false, TCP, 8080}, // the jump returns, then the map
	}
	seen := map[outcome]int{}
	for _, c := range cases {
		network := map[uint8]string{TCP: "tcp", UDP: "udp"}[c.proto]
		addr := net.JoinHostPort(c.to.addr(c.v6), strconv.Itoa(int(c.port)))
		name := fmt.Sprintf("%s from %s to %s %s", network, c.from.name, c.to.name, addr)
		t.Run(name, func(t *testing.T) {
			want, why := expect(c.from, c.to, c.v6, c.proto, c.port)
			seen[want]++
			if want != answered {
				got, err := try(t.Context(), c.from, network, addr)
				if err != nil || got != want {
					t.Errorf("the kernel: %s %v, the evaluator: %s (%s)", got, err, want, why)
				}
				return
			}
			// A fresh link may need a moment for neighbour discovery.
			poll.Eventually(t, 10*time.Second, func() error {
				got, err := try(t.Context(), c.from, network, addr)
				if err != nil || got == refused {
					return poll.Stop(fmt.Errorf("the kernel: %s %v, the evaluator: %s (%s)", got, err, want, why))
				}
				if got != want {
					return fmt.Errorf("the kernel: %s, the evaluator: %s (%s)", got, want, why)
				}
				return nil
			})
		})
	}
	// The cases must exercise every outcome, or the comparison proves
	// less than it seems.
	if seen[answered] < 4 || seen[refused] < 2 || seen[dropped] < 6 {
		t.Errorf("the evaluator's outcomes %v: the cases no longer cover answered, refused and dropped connections", seen)
	}
}
