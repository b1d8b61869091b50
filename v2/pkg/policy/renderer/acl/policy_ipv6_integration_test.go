package acl

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// itBlock6 is the node's IPv6 block in the dual-stack real-VPP test; pods
// get fd00:100::2 and up beside their IPv4 addresses.
var itBlock6 = netip.MustParsePrefix("fd00:100::/124")

// dualPod is a dual-stack pod of a real-VPP test: its itPod (IPv4, served
// by itPod.serve) plus its IPv6 address, on which it serves TCP 8080 with
// the same greeting.
type dualPod struct {
	*itPod
	ip6 netip.Addr
}

// TestRealVPPPolicyOverIPv6 runs the renderer against a real VPP
// (VCOIL_VPP_BIN) with dual-stack pods and checks real IPv6 traffic: pod s
// admits one IPv6 peer and refuses another, admits an IPv6 ipBlock and
// refuses the pod outside it, an IPv6 peer admits no IPv4 from the same
// pod, and the reflective ACL lets s's own IPv6 connections through.
func TestRealVPPPolicyOverIPv6(t *testing.T) {
	e := newITEnv(t)
	if err := e.d.Blocks().Sync(e.ctx, []netip.Prefix{itBlock, itBlock6}); err != nil {
		t.Fatal(err)
	}
	pods := map[string]*dualPod{}
	for i, name := range []string{"a", "b", "c", "s"} {
		ns := netnstest.New(t, "acl6pod-"+name)
		p := &dualPod{
			itPod: &itPod{name: name, id: renderer.PodID{Namespace: "it", Name: name}, ns: ns,
				ip: netip.AddrFrom4([4]byte{10, 100, 0, byte(2 + i)}), push: make(chan struct{}, 4)},
			ip6: itBlock6.Addr().Next().Next(),
		}
		for range i {
			p.ip6 = p.ip6.Next()
		}
		if _, err := e.d.SetupPod(e.ctx, dataplane.Pod{
			PodKey: dataplane.PodKey{ContainerID: "acl6-it-" + name, IfName: "eth0"}, Netns: ns.Path(),
			Namespace: "it", Name: name, IPv4: p.ip, IPv6: p.ip6,
		}); err != nil {
			t.Fatalf("SetupPod %s: %v", name, err)
		}
		p.serve(t)
		p.serve6(t)
		e.pods[name] = p.itPod
		pods[name] = p
	}
	a, b, c, s := pods["a"], pods["b"], pods["c"], pods["s"]
	for _, p := range []*dualPod{a, b, c} {
		e.reaches6(p, s)
		e.reaches6(s, p)
	}
	// rules are s's: isolated for ingress, admitting TCP 8080 from the
	// networks given.
	rules := func(from ...netip.Prefix) renderer.PodRules {
		pr := renderer.PodRules{Pod: s.id, IPs: []netip.Addr{s.ip, s.ip6}}
		for _, n := range from {
			pr.Ingress = append(pr.Ingress, renderer.Rule{Action: renderer.ActionPermit, Protocol: renderer.ProtocolTCP,
				SrcNetwork: n, SrcPort: renderer.AnyPort, DstPort: renderer.SinglePort(8080)})
		}
		renderer.SortRules(pr.Ingress)
		pr.Ingress = append(pr.Ingress, renderer.DenyAll)
		return pr
	}
	open := func(p *dualPod) renderer.PodRules {
		return renderer.PodRules{Pod: p.id, IPs: []netip.Addr{p.ip, p.ip6}}
	}
	if err := e.r.Render(e.ctx, renderer.Txn{Resync: true, Pods: []renderer.PodRules{open(a), open(b), open(c), rules(renderer.HostNetwork(a.ip6))}}); err != nil {
		t.Fatal(err)
	}
	t.Run("s admits a's IPv6 address and refuses b's", func(t *testing.T) {
		e.reaches6(a, s)
		e.refused6(b, s)
		e.refused6(c, s)
		// The peer is a's IPv6 address: a's IPv4 is refused.
		e.refused(a.itPod, s.itPod)
		// s's own connections over IPv6: their replies pass through the
		// reflective ACL's IPv6 sessions.
		e.reaches6(s, a)
		e.reaches6(s, b)
		table := e.r.pods[s.id].table
		if n := e.matched(string(table)); n < 9 {
			t.Fatalf("the hit counter of s's table %s is %v, want at least the 9 refused connections", table, n)
		}
	})
	t.Run("s admits the IPv6 ipBlock of a and b and refuses c outside it", func(t *testing.T) {
		block := netip.PrefixFrom(a.ip6, 127)
		if !block.Contains(b.ip6) || block.Contains(c.ip6) {
			t.Fatalf("ipBlock %s: want a's %s and b's %s in it and c's %s out", block, a.ip6, b.ip6, c.ip6)
		}
		e.render(rules(block))
		e.reaches6(a, s)
		e.reaches6(b, s)
		e.refused6(c, s)
		e.refused(b.itPod, s.itPod)
		e.reaches6(s, c)
	})
	t.Run("s admits both of a's addresses", func(t *testing.T) {
		e.render(rules(renderer.HostNetwork(a.ip), renderer.HostNetwork(a.ip6)))
		e.reaches(a.itPod, s.itPod)
		e.reaches6(a, s)
		e.refused6(b, s)
		e.refused(b.itPod, s.itPod)
	})
}

// serve6 serves TCP 8080 on p's IPv6 address: a greeting with its name and
// the client's address, then an echo of each line, as itPod.serve.
func (p *dualPod) serve6(t *testing.T) {
	p.greet(p.ns.Listen("tcp6", netip.AddrPortFrom(p.ip6, 8080).String()))
}

// reaches6 waits until from reaches to's IPv6 echo port, then checks the
// echo.
func (e *itEnv) reaches6(from, to *dualPod) {
	e.t.Helper()
	poll.Eventually(e.t, 10*time.Second, func() error {
		c, err := e.connect6(from, to)
		if err != nil {
			return err
		}
		defer c.c.Close()
		return c.echo()
	})
}

// refused6 checks, three times, that from cannot open a connection to to's
// IPv6 address.
func (e *itEnv) refused6(from, to *dualPod) {
	e.t.Helper()
	for range 3 {
		if c, err := e.connect6(from, to); err == nil {
			c.c.Close()
			e.t.Fatalf("pod %s reached pod %s over IPv6, which its policy denies", from.name, to.name)
		}
	}
}

// connect6 is connect over IPv6: from's connection to to's IPv6 address,
// whose greeting must name to and from's IPv6 address.
func (e *itEnv) connect6(from, to *dualPod) (*itConn, error) {
	ctx, cancel := context.WithTimeout(e.ctx, 1500*time.Millisecond)
	defer cancel()
	target := netip.AddrPortFrom(to.ip6, 8080).String()
	c, err := from.ns.Dial(ctx, "tcp6", target)
	if err != nil {
		return nil, fmt.Errorf("pod %s -> %s (pod %s): %w", from.name, target, to.name, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(1500 * time.Millisecond))
	ic := &itConn{c: c, rd: bufio.NewReader(c)}
	line, err := ic.rd.ReadString('\n')
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("pod %s -> %s (pod %s): greeting: %w", from.name, target, to.name, err)
	}
	if want := fmt.Sprintf("%s [%s]:", to.name, from.ip6); !strings.HasPrefix(line, want) {
		c.Close()
		return nil, fmt.Errorf("pod %s -> %s: greeting %q, want %q...", from.name, target, line, want)
	}
	e.t.Cleanup(func() { c.Close() })
	return ic, nil
}
