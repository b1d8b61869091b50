package cnat_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"go.fd.io/govpp/binapi/nat44_ed"

	"github.com/vcoil/vcoil/v2/internal/echotest"
	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
	"github.com/vcoil/vcoil/v2/pkg/service"
	"github.com/vcoil/vcoil/v2/pkg/service/renderer/cnat"
	"github.com/vcoil/vcoil/v2/pkg/service/renderer/nat44"
)

type checkpoint []dataplane.Pod

func (c checkpoint) Pods() ([]dataplane.Pod, error) { return c, nil }

// The upgrade of a node from the NAT44 renderer to cnat, on a real VPP
// (VCOIL_VPP_BIN): a vcoild with the NAT44 renderer serves a cluster IP
// and a NodePort; a new vcoild (a new driver on the same VPP, the pods
// from its checkpoint) with the cnat renderer takes over. A client pod
// opens a new connection to the cluster IP every 20 ms throughout, and
// every one succeeds; afterwards VPP holds no NAT44 mapping of the
// services and the pods no NAT44 role, and the cluster IP and the NodePort
// are served by cnat. The long-lived connections opened before the
// switch are counted, not required: those cnat sends to another backend
// than NAT44-ED had are cut (cnat cannot take sessions over).
func TestRealVPPSwitchFromNAT44KeepsServing(t *testing.T) {
	netnstest.RequireRoot(t)
	bin := vpptest.Binary(t)
	node, ext := netnstest.New(t, "swnode"), netnstest.New(t, "swext")
	netnstest.Veth(t, node, "vppup", ext, "eth0")
	ext.AddAddr("eth0", netip.PrefixFrom(itClient, 24).String())
	v := vpptest.Start(t, bin, node.Path(), "create host-interface name vppup hw-addr 02:fe:00:00:00:01")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	newDriver := func(pods checkpoint) vpp.Dataplane {
		cfg := vpp.Config{
			APISocket: v.APISocket, NodeNetns: node.Path(), PodInterface: vpp.InterfaceType(vpptest.PodInterface()),
			Uplink: "host-vppup", UplinkAddresses: []netip.Prefix{itUplink},
			PingInterval: 200 * time.Millisecond, RequestTimeout: 3 * time.Second, ReadyWait: 30 * time.Second,
		}
		if pods != nil {
			cfg.Allocations = pods
		}
		d, err := vpp.New(cfg, testr.New(t))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Close)
		if err := d.Init(ctx); err != nil {
			t.Fatalf("Init: %v", err)
		}
		return d
	}
	t.Cleanup(func() {
		if t.Failed() {
			logVPPState(t, v)
		}
	})
	old := newDriver(nil)
	if err := old.Blocks().Sync(ctx, []netip.Prefix{itBlock}); err != nil {
		t.Fatal(err)
	}
	var pods checkpoint
	ns := map[string]*netnstest.NS{}
	var backends []service.Endpoint
	for i, name := range []string{"a", "b", "c"} {
		n := netnstest.New(t, "swpod-"+name)
		p := dataplane.Pod{PodKey: dataplane.PodKey{ContainerID: "cnat-sw-" + name, IfName: "eth0"}, Netns: n.Path(),
			IPv4: netip.AddrFrom4([4]byte{10, 100, 0, byte(2 + i)})}
		if _, err := old.SetupPod(ctx, p); err != nil {
			t.Fatalf("SetupPod %s: %v", name, err)
		}
		if name != "c" {
			echotest.Serve(t, n, name, netip.IPv4Unspecified())
			backends = append(backends, service.Endpoint{Addr: p.IPv4, Port: 8080, Local: true, Ready: true, Serving: true})
		}
		pods, ns[name] = append(pods, p), n
	}
	ext.IP("route", "add", "10.96.0.0/12", "via", itUplink.Addr().String())
	web := &service.Service{ID: service.ID{Namespace: "it", Name: "web"}, ClusterIPs: []netip.Addr{itWeb},
		Ports: []service.Port{{Protocol: service.TCP, Port: 80, NodePort: itNodePort, Endpoints: backends, Cluster: backends, HasEndpoints: true}}}
	state := &service.State{
		Node:     service.Node{Name: "node", NodePortAddresses: []netip.Addr{itUplink.Addr()}, NATLoopback: []netip.Addr{itLoopback}},
		Services: map[service.ID]*service.Service{web.ID: web},
	}
	cidrs := []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}
	r1, err := nat44.New(old, nat44.Config{ServiceCIDRs: cidrs}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := r1.Resync(ctx, state); err != nil {
		t.Fatalf("NAT44 Resync: %v", err)
	}
	target := netip.AddrPortFrom(itWeb, 80)
	poll.Eventually(t, 20*time.Second, func() error {
		_, _, err := echotest.Ask(ctx, ns["c"], "tcp", target, netip.Addr{})
		return err
	})

	// Long-lived connections through NAT44-ED, each with its backend.
	const held = 16
	type conn struct {
		c       net.Conn
		backend string
	}
	var conns []conn
	for range held {
		var c net.Conn
		if err := ns["c"].Do(func() error {
			var err error
			c, err = (&net.Dialer{Timeout: 2 * time.Second}).DialContext(ctx, "tcp4", target.String())
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			t.Fatalf("greeting of a long-lived connection: %v", err)
		}
		conns = append(conns, conn{c, strings.Fields(line)[0]})
	}

	// New connections every 20 ms from before the switch until after it.
	type probe struct {
		at  time.Time
		rtt time.Duration
		err error
	}
	var (
		mu     sync.Mutex
		probes []probe
		stop   = make(chan struct{})
		done   = make(chan struct{})
	)
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			start := time.Now()
			_, _, err := echotest.Ask(ctx, ns["c"], "tcp", target, netip.Addr{})
			mu.Lock()
			probes = append(probes, probe{start, time.Since(start), err})
			mu.Unlock()
		}
	}()
	time.Sleep(300 * time.Millisecond)

	// The new vcoild: a new driver on the same VPP, the cnat renderer.
	switchStart := time.Now()
	old.Close()
	d := newDriver(pods)
	r2, err := cnat.New(d, cnat.Config{ServiceCIDRs: cidrs}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := r2.Resync(ctx, state); err != nil {
		t.Fatalf("cnat Resync: %v", err)
	}
	switchEnd := time.Now()
	time.Sleep(time.Second)
	close(stop)
	<-done

	var during, failed, slow int
	for _, p := range probes {
		if p.at.Add(p.rtt).After(switchStart) && p.at.Before(switchEnd) {
			during++
		}
		if p.err != nil {
			failed++
			t.Errorf("new connection at %s (switch %s..%s): %v", p.at.Format("15:04:05.000"),
				switchStart.Format("15:04:05.000"), switchEnd.Format("15:04:05.000"), p.err)
		} else if p.rtt > 500*time.Millisecond {
			slow++
		}
	}
	t.Logf("switch from NAT44 to cnat: %s (new driver and cnat Resync); new connections: %d in all, %d during the switch, %d failed, %d slower than 500 ms",
		switchEnd.Sub(switchStart).Round(time.Millisecond), len(probes), during, failed, slow)
	if during == 0 {
		t.Error("no new connection overlapped the switch: the check proves nothing")
	}

	survived := 0
	for i, c := range conns {
		_ = c.c.SetDeadline(time.Now().Add(2 * time.Second))
		msg := "after the switch\n"
		if _, err := c.c.Write([]byte(msg)); err != nil {
			continue
		}
		buf := make([]byte, len(msg))
		if n, err := io.ReadFull(c.c, buf); err == nil && n == len(msg) && string(buf) == msg {
			survived++
		} else {
			t.Logf("long-lived connection %d (backend %s) cut: %v", i, c.backend, err)
		}
	}
	t.Logf("long-lived connections across the switch: %d of %d survived, %d cut", survived, held, held-survived)

	// What stays of NAT44: no service mapping, no pod role.
	ch, _, err := d.Channel(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	var mappings []string
	_ = vppapi.Dump(ch, &nat44_ed.Nat44LbStaticMappingDump{}, func() *nat44_ed.Nat44LbStaticMappingDetails { return &nat44_ed.Nat44LbStaticMappingDetails{} },
		func(m *nat44_ed.Nat44LbStaticMappingDetails) { mappings = append(mappings, m.Tag) })
	_ = vppapi.Dump(ch, &nat44_ed.Nat44StaticMappingDump{}, func() *nat44_ed.Nat44StaticMappingDetails { return &nat44_ed.Nat44StaticMappingDetails{} },
		func(m *nat44_ed.Nat44StaticMappingDetails) { mappings = append(mappings, m.Tag) })
	if len(mappings) != 0 {
		t.Errorf("VPP keeps the NAT44 mappings %q after the switch", mappings)
	}
	roles := 0
	_ = vppapi.Dump(ch, &nat44_ed.Nat44InterfaceDump{}, func() *nat44_ed.Nat44InterfaceDetails { return &nat44_ed.Nat44InterfaceDetails{} },
		func(m *nat44_ed.Nat44InterfaceDetails) { roles++ })
	t.Logf("NAT44 interfaces after the switch: %d (the node's uplink and host interconnect keep theirs)", roles)

	// cnat serves: both backends through the cluster IP, the NodePort
	// from outside.
	seen := map[string]bool{}
	poll.Eventually(t, 10*time.Second, func() error {
		name, _, err := echotest.Ask(ctx, ns["c"], "tcp", target, netip.Addr{})
		if err != nil {
			return err
		}
		seen[name] = true
		if !seen["a"] || !seen["b"] {
			return errors.New("not both backends yet")
		}
		return nil
	})
	poll.Eventually(t, 10*time.Second, func() error {
		_, from, err := echotest.Ask(ctx, ext, "tcp", netip.AddrPortFrom(itUplink.Addr(), itNodePort), netip.Addr{})
		if err == nil && from != itLoopback {
			t.Errorf("the NodePort's backend saw %s, want the NAT loopback", from)
		}
		return err
	})
}
