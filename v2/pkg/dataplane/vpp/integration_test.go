package vpp_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
)

// The driver against a real VPP (VCOIL_VPP_BIN) in a node namespace, with
// two pods of the type VCOIL_VPP_POD_IF: they talk through VPP, the node
// reaches them through the host interconnect, and after VPP is killed and
// started again they do so again with the same addresses.
func TestRealVPPWiresPodsThatTalkAndSurviveARestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	node, v, d := startRealVPP(ctx, t, "vppnode", nil)
	if err := d.Blocks().Sync(ctx, []netip.Prefix{netip.MustParsePrefix("10.100.0.0/29"), netip.MustParsePrefix("fd00:100::/125")}); err != nil {
		t.Fatal(err)
	}

	a, b := netnstest.New(t, "pod-a"), netnstest.New(t, "pod-b")
	pods := []dataplane.Pod{
		{PodKey: dataplane.PodKey{ContainerID: "vpp-it-a", IfName: "eth0"}, Netns: a.Path(),
			IPv4: netip.MustParseAddr("10.100.0.2"), IPv6: netip.MustParseAddr("fd00:100::2")},
		{PodKey: dataplane.PodKey{ContainerID: "vpp-it-b", IfName: "eth0"}, Netns: b.Path(),
			IPv4: netip.MustParseAddr("10.100.0.3"), IPv6: netip.MustParseAddr("fd00:100::3")},
	}
	for _, p := range pods {
		start := time.Now()
		ifs, err := d.SetupPod(ctx, p)
		if err != nil {
			t.Fatalf("SetupPod %s: %v", p.ContainerID, err)
		}
		t.Logf("wired %s as %+v in %s", p.ContainerID, ifs, time.Since(start))
	}
	routes := a.IP("route", "show")
	if !strings.Contains(routes, "default dev eth0") {
		t.Fatalf("pod a's routes lack default dev eth0:\n%s", routes)
	}

	b.ServeTCPEcho(":8080")
	a.ServeTCPEcho(":8080")
	talk := func(when string) {
		t.Helper()
		poll.Eventually(t, 20*time.Second, func() error {
			for _, c := range []struct {
				from *netnstest.NS
				to   string
			}{
				{a, "10.100.0.3"}, {b, "10.100.0.2"}, {a, "fd00:100::3"}, {node, "10.100.0.2"},
			} {
				if err := c.from.Ping(ctx, c.to); err != nil {
					return fmt.Errorf("%s: ping %s: %w", when, c.to, err)
				}
				if err := echo(ctx, c.from, net.JoinHostPort(c.to, "8080")); err != nil {
					return fmt.Errorf("%s: %w", when, err)
				}
			}
			return nil
		})
	}
	talk("before the restart")
	for _, p := range pods {
		if err := d.CheckPod(ctx, p); err != nil {
			t.Fatalf("CheckPod: %v", err)
		}
	}

	restart := time.Now()
	v.Restart()
	poll.Eventually(t, time.Minute, func() error { return d.Healthy(ctx) })
	t.Logf("VPP restarted and the state replayed in %s", time.Since(restart))
	talk("after the restart")
	for _, p := range pods {
		if err := d.CheckPod(ctx, p); err != nil {
			t.Fatalf("CheckPod after the restart: %v", err)
		}
	}

	for _, p := range pods {
		if err := d.TeardownPod(ctx, dataplane.Pod{PodKey: p.PodKey}); err != nil {
			t.Fatal(err)
		}
		if err := d.TeardownPod(ctx, dataplane.Pod{PodKey: p.PodKey}); err != nil {
			t.Fatalf("second teardown: %v", err)
		}
	}
	for _, ns := range []*netnstest.NS{a, b} {
		if out := ns.IP("link", "show"); strings.Contains(out, "eth0") {
			t.Fatalf("eth0 is left in %s:\n%s", ns, out)
		}
	}
	if left, _ := d.ListPods(ctx); len(left) != 0 {
		t.Fatalf("ListPods after teardown: %v", left)
	}
}

func echo(ctx context.Context, ns *netnstest.NS, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := ns.Dial(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("connect to %s from %s: %w", addr, ns, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	msg := strings.Repeat("vcoil", 400) // more than one small segment
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		return fmt.Errorf("read the echo of %s from %s: %w", addr, ns, err)
	}
	if string(buf) != msg {
		return fmt.Errorf("%s echoed something else", addr)
	}
	return nil
}
