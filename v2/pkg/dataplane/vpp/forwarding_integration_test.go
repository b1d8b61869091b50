package vpp_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
)

// Pods that tunnel and forward, as an Egress's clients and routers do, on
// a real VPP: a client sends TCP to a host behind a router pod through a
// VXLAN tunnel between the two pods (through VPP), and the router
// forwards it. With NoChecksumOffload on client and router, 4 MiB echo
// intact both ways, before and after a VPP restart. A second client wired
// with offload shows what the choice is for: its kernel leaves the inner
// TCP checksum to offload, VPP completes the outer one only, and the host
// behind the router drops every segment.
func TestRealVPPTunnellingPodsSendCompleteChecksums(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, v, d := startRealVPP(ctx, t, "vppfwd", nil)
	if err := d.Blocks().Sync(ctx, []netip.Prefix{netip.MustParsePrefix("10.100.0.0/29")}); err != nil {
		t.Fatal(err)
	}

	client, router, plain := netnstest.New(t, "pod-client"), netnstest.New(t, "pod-router"), netnstest.New(t, "pod-plain")
	behind := netnstest.New(t, "ext")
	pods := []dataplane.Pod{
		{PodKey: dataplane.PodKey{ContainerID: "vpp-fw-client", IfName: "eth0"}, Netns: client.Path(), IPv4: netip.MustParseAddr("10.100.0.2"), NoChecksumOffload: true},
		{PodKey: dataplane.PodKey{ContainerID: "vpp-fw-router", IfName: "eth0"}, Netns: router.Path(), IPv4: netip.MustParseAddr("10.100.0.3"), NoChecksumOffload: true},
		{PodKey: dataplane.PodKey{ContainerID: "vpp-fw-plain", IfName: "eth0"}, Netns: plain.Path(), IPv4: netip.MustParseAddr("10.100.0.4")},
	}
	for _, p := range pods {
		if _, err := d.SetupPod(ctx, p); err != nil {
			t.Fatalf("SetupPod %s: %v", p.ContainerID, err)
		}
	}

	// The host behind the router, on a veth of the router's own.
	netnstest.Veth(t, router, "ext0", behind, "eth0")
	router.AddAddr("ext0", "198.51.100.1/24")
	behind.AddAddr("eth0", "198.51.100.2/24")
	behind.IP("route", "add", "default", "via", "198.51.100.1")
	router.Sysctl("net.ipv4.ip_forward", "1")
	behind.ServeTCPEcho(":8080")
	// A VXLAN tunnel from each client to the router, over the pods'
	// addresses; the tunnels' inner addresses are 203.0.113.0/30 and
	// 203.0.113.4/30.
	for _, c := range []struct {
		pod          *netnstest.NS
		vni          string
		podIP, inner string
		routerInner  string
	}{{client, "42", "10.100.0.2", "203.0.113.1/30", "203.0.113.2"}, {plain, "43", "10.100.0.4", "203.0.113.5/30", "203.0.113.6"}} {
		c.pod.IP("link", "add", "vx0", "type", "vxlan", "id", c.vni, "remote", "10.100.0.3", "local", c.podIP, "dstport", "4789", "dev", "eth0")
		c.pod.AddAddr("vx0", c.inner)
		c.pod.IP("link", "set", "vx0", "up")
		c.pod.IP("route", "add", "198.51.100.0/24", "via", c.routerInner, "dev", "vx0")
		name := "vx" + c.vni
		router.IP("link", "add", name, "type", "vxlan", "id", c.vni, "remote", c.podIP, "local", "10.100.0.3", "dstport", "4789", "dev", "eth0")
		router.AddAddr(name, c.routerInner+"/30")
		router.IP("link", "set", name, "up")
	}

	payload := make([]byte, 4<<20)
	if _, err := rand.Read(payload); err != nil {
		t.Fatal(err)
	}
	through := func(when string) {
		t.Helper()
		poll.Eventually(t, 30*time.Second, func() error {
			return bulkEcho(ctx, client, "198.51.100.2:8080", payload, 10*time.Second)
		})
		t.Logf("%s: 4 MiB echoed intact through the tunnel and the router", when)
	}
	through("before VPP's restart")
	// CheckPod reads the pods' interfaces for their transmit checksum
	// offload.
	for _, p := range pods[:2] {
		if err := d.CheckPod(ctx, p); err != nil {
			t.Fatalf("CheckPod of %s: %v", p.ContainerID, err)
		}
	}

	// Through the client wired with offload nothing gets through: VPP
	// 25.10 completes the outer checksum of what a pod tunnels, not the
	// inner one. If this ever passes, VPP completes the inner checksum and
	// the choice is no longer needed for tunnels.
	// Its tunnel works (ICMP's checksums are never left to offload)...
	poll.Eventually(t, 10*time.Second, func() error { return plain.Ping(ctx, "198.51.100.2") })
	// ...and its TCP does not.
	if err := bulkEcho(ctx, plain, "198.51.100.2:8080", payload, 5*time.Second); err == nil {
		t.Fatal("4 MiB echoed intact from a tunnelling pod whose interface offloads checksums: VPP now completes inner checksums (revisit NoChecksumOffload)")
	} else {
		t.Logf("from the tunnelling pod with offload, as expected of VPP 25.10: %v", err)
	}

	v.Restart()
	poll.Eventually(t, time.Minute, func() error { return d.Healthy(ctx) })
	through("after VPP's restart")
}

// bulkEcho sends payload to an echo server at addr from ns and reads it
// back whole, within timeout.
func bulkEcho(ctx context.Context, ns *netnstest.NS, addr string, payload []byte, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := ns.Dial(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("connect to %s from %s: %w", addr, ns, err)
	}
	defer c.Close()
	deadline, _ := ctx.Deadline()
	_ = c.SetDeadline(deadline)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(payload)
		errc <- err
	}()
	got := make([]byte, len(payload))
	n, err := io.ReadFull(c, got)
	if err != nil {
		return fmt.Errorf("read the echo from %s: %d of %d bytes: %w", addr, n, len(payload), err)
	}
	if err := <-errc; err != nil {
		return fmt.Errorf("write to %s: %w", addr, err)
	}
	if !bytes.Equal(got, payload) {
		return fmt.Errorf("%s echoed other bytes", addr)
	}
	return nil
}
