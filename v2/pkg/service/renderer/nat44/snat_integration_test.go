package nat44_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"go.fd.io/govpp/binapi/ip"
	"go.fd.io/govpp/binapi/vlib"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
	"github.com/vcoil/vcoil/v2/pkg/service"
	"github.com/vcoil/vcoil/v2/pkg/service/renderer/nat44"
)

// The addresses of the SNAT test. The node's uplink is on 198.18.0.0/24,
// whose .254 (the "ext" namespace) is the gateway, another node holding
// the remote pod 10.100.1.2, and the Internet's host 203.0.113.20. ext
// routes this node's pods (10.100.0.0/24) to the uplink, as a cluster's
// network does, so that an untranslated packet would be answered too: the
// checks look at the source the servers saw.
var (
	snatUplink    = netip.MustParsePrefix("198.18.0.10/24")
	snatGateway   = netip.MustParseAddr("198.18.0.254")
	snatInternet  = netip.MustParseAddr("203.0.113.20")
	snatRemotePod = netip.MustParseAddr("10.100.1.2")
	snatBlock     = netip.MustParsePrefix("10.100.0.0/29")
	snatLoopback  = netip.MustParseAddr("10.100.0.7")
	snatRemoteVIP = netip.MustParseAddr("10.96.0.30")
	snatWebVIP    = netip.MustParseAddr("10.96.0.31")
	snatExempt    = netip.MustParseAddr("10.100.0.3") // pod b
)

const snatNodePort = 30080

// TestRealVPPSNAT runs the driver with SNAT and the NAT44 services
// renderer against a real VPP (VCOIL_VPP_BIN) and checks real traffic:
// pod a's TCP, UDP and ping to the Internet leave with the uplink's
// address and are answered; pod b, an exempt source (an egress NAT router
// that translates itself), keeps its address; cluster traffic keeps the
// pods' addresses (a remote pod, a cluster IP whose backend is the remote
// pod); outside clients still reach a NodePort and the pods directly; and
// all of it again after VPP is killed and started again.
func TestRealVPPSNAT(t *testing.T) {
	netnstest.RequireRoot(t)
	bin := vpptest.Binary(t)
	node := netnstest.New(t, "snatnode")
	ext := netnstest.New(t, "snatext")
	netnstest.Veth(t, node, "vppup", ext, "eth0")
	ext.AddAddr("eth0", netip.PrefixFrom(snatGateway, 24).String())
	ext.AddAddr("lo", snatInternet.String()+"/32")
	ext.AddAddr("lo", snatRemotePod.String()+"/32")
	ext.IP("route", "add", "10.100.0.0/24", "via", snatUplink.Addr().String())
	ext.IP("route", "add", "10.96.0.0/12", "via", snatUplink.Addr().String())
	serveNamedOn(t, ext, "internet", snatInternet)
	serveNamedOn(t, ext, "remote", snatRemotePod)
	// A fixed MAC, as a NIC has: ext keeps it in its ARP cache across
	// VPP's restart.
	v := vpptest.Start(t, bin, node.Path(), "create host-interface name vppup hw-addr 02:fe:00:00:00:01")

	cfg := vpp.Config{
		APISocket: v.APISocket, NodeNetns: node.Path(), PodInterface: vpp.InterfaceType(vpptest.PodInterface()),
		Uplink: "host-vppup", UplinkAddresses: []netip.Prefix{snatUplink}, UplinkGatewayIPv4: snatGateway,
		SNAT: &vpp.SNATConfig{
			ClusterCIDRs: []netip.Prefix{
				netip.MustParsePrefix("10.100.0.0/16"), netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("10.96.0.0/12"),
			},
			ExemptSources: []netip.Addr{snatExempt},
		},
		PingInterval: 200 * time.Millisecond, RequestTimeout: 3 * time.Second, ReadyWait: 30 * time.Second,
	}
	d, err := vpp.New(cfg, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	t.Cleanup(func() {
		if t.Failed() {
			logSNATState(t, d)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := d.Init(ctx); err != nil {
		t.Fatalf("Init: %v", err)
	}
	if inc := <-d.Resynced(); inc != 1 {
		t.Fatalf("first incarnation %d", inc)
	}
	if err := d.Blocks().Sync(ctx, []netip.Prefix{snatBlock}); err != nil {
		t.Fatal(err)
	}
	type pod struct {
		ns  *netnstest.NS
		pod dataplane.Pod
	}
	pods := map[string]pod{}
	for i, name := range []string{"a", "b"} {
		ns := netnstest.New(t, "snatpod-"+name)
		p := dataplane.Pod{PodKey: dataplane.PodKey{ContainerID: "snat-it-" + name, IfName: "eth0"}, Netns: ns.Path(),
			IPv4: netip.AddrFrom4([4]byte{10, 100, 0, byte(2 + i)})}
		if _, err := d.SetupPod(ctx, p); err != nil {
			t.Fatalf("SetupPod %s: %v", name, err)
		}
		serveNamed(t, ns, name)
		pods[name] = pod{ns, p}
	}
	a, b := pods["a"], pods["b"]

	// The services renderer, as vcoild runs it: a cluster IP whose backend
	// is the remote pod, and a NodePort to pod a.
	r, err := nat44.New(d, nat44.Config{ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	port := func(nodePort uint16, ep service.Endpoint) []service.Port {
		eps := []service.Endpoint{ep}
		return []service.Port{{Name: "http", Protocol: service.TCP, Port: 80, NodePort: nodePort, Endpoints: eps, Cluster: eps, HasEndpoints: true}}
	}
	remote := &service.Service{ID: service.ID{Namespace: "it", Name: "remote"}, ClusterIPs: []netip.Addr{snatRemoteVIP},
		Ports: port(0, service.Endpoint{Addr: snatRemotePod, Port: 8080, NodeName: "other", Ready: true, Serving: true})}
	web := &service.Service{ID: service.ID{Namespace: "it", Name: "web"}, ClusterIPs: []netip.Addr{snatWebVIP},
		Ports: port(snatNodePort, service.Endpoint{Addr: a.pod.IPv4, Port: 8080, NodeName: "node", Local: true, Ready: true, Serving: true})}
	state := &service.State{
		Node:     service.Node{Name: "node", NodePortAddresses: []netip.Addr{snatUplink.Addr()}, NATLoopback: []netip.Addr{snatLoopback}},
		Services: map[service.ID]*service.Service{remote.ID: remote, web.ID: web},
	}
	if err := r.Resync(ctx, state); err != nil {
		t.Fatalf("Resync: %v", err)
	}

	internet := netip.AddrPortFrom(snatInternet, 8080)
	check := func(t *testing.T, when string) {
		t.Helper()
		for _, c := range []struct {
			what     string
			from     *netnstest.NS
			network  string
			target   netip.AddrPort
			name     string
			wantSeen netip.Addr // invalid: any
		}{
			{"pod a to the Internet is translated to the uplink's address", a.ns, "tcp", internet, "internet", snatUplink.Addr()},
			{"pod a to the Internet over UDP too", a.ns, "udp", internet, "internet", snatUplink.Addr()},
			{"the exempt pod b to the Internet keeps its address", b.ns, "tcp", internet, "internet", b.pod.IPv4},
			{"the exempt pod b over UDP too", b.ns, "udp", internet, "internet", b.pod.IPv4},
			{"pod a to another node's pod keeps its address", a.ns, "tcp", netip.AddrPortFrom(snatRemotePod, 8080), "remote", a.pod.IPv4},
			{"pod a to another node's pod over UDP too", a.ns, "udp", netip.AddrPortFrom(snatRemotePod, 8080), "remote", a.pod.IPv4},
			{"pod a to a cluster IP whose backend is another node's pod keeps its address", a.ns, "tcp", netip.AddrPortFrom(snatRemoteVIP, 80), "remote", a.pod.IPv4},
			{"pod b to pod a keeps its address", b.ns, "tcp", netip.AddrPortFrom(a.pod.IPv4, 8080), "a", b.pod.IPv4},
			{"the gateway reaches pod a directly", ext, "tcp", netip.AddrPortFrom(a.pod.IPv4, 8080), "a", snatGateway},
			{"the gateway reaches the NodePort", ext, "tcp", netip.AddrPortFrom(snatUplink.Addr(), snatNodePort), "a", netip.Addr{}},
		} {
			poll.Eventually(t, 20*time.Second, func() error {
				name, seen, err := ask(ctx, c.from, c.network, c.target, netip.Addr{})
				if err != nil {
					return fmt.Errorf("%s: %s: %w", when, c.what, err)
				}
				if name != c.name || (c.wantSeen.IsValid() && seen != c.wantSeen) {
					return fmt.Errorf("%s: %s: %q saw %s, want %q seeing %s", when, c.what, name, seen, c.name, c.wantSeen)
				}
				return nil
			})
		}
		for _, p := range []pod{a, b} {
			if err := p.ns.Ping(ctx, snatInternet.String()); err != nil {
				t.Fatalf("%s: ping from %s to the Internet: %v", when, p.ns, err)
			}
		}
		// The service CIDR is a cluster CIDR too: the service network's
		// route to the kernel wins over SNAT's route to the gateway.
		ch, ifs, err := d.Channel(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer ch.Close()
		var paths []string
		err = vppapi.Dump(ch, &ip.IPRouteDump{Table: ip.IPTable{TableID: 0}}, func() *ip.IPRouteDetails { return &ip.IPRouteDetails{} }, func(m *ip.IPRouteDetails) {
			if m.Route.Prefix == vppapi.Prefix(netip.MustParsePrefix("10.96.0.0/12")) {
				for _, p := range m.Route.Paths {
					paths = append(paths, fmt.Sprint(p.SwIfIndex))
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprint(ifs.HostInterconnect); len(paths) != 1 || paths[0] != want {
			t.Fatalf("%s: VPP routes 10.96.0.0/12 through interfaces %v, want the host interconnect %s only", when, paths, want)
		}
	}
	check(t, "first start")

	vpptest.RestartAndAwait(ctx, t, v, d.Resynced(), 2)
	if err := r.Resync(ctx, state); err != nil {
		t.Fatalf("Resync after the restart: %v", err)
	}
	check(t, "after VPP's restart")

	// vcoild restarts and finds SNAT in the VPP that outlived it.
	d.Close()
	cfg.Allocations = allocations{a.pod, b.pod}
	if d, err = vpp.New(cfg, testr.New(t)); err != nil {
		t.Fatal(err)
	}
	if err := d.Init(ctx); err != nil {
		t.Fatalf("Init after vcoild's restart: %v", err)
	}
	if inc := <-d.Resynced(); inc != 1 {
		t.Fatalf("first incarnation of the new driver %d", inc)
	}
	if r, err = nat44.New(d, nat44.Config{ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}}, testr.New(t)); err != nil {
		t.Fatal(err)
	}
	if err := r.Resync(ctx, state); err != nil {
		t.Fatalf("Resync after vcoild's restart: %v", err)
	}
	check(t, "after vcoild's restart")
}

// allocations are vcoild's pods as its checkpoint gives them.
type allocations []dataplane.Pod

func (a allocations) Pods() ([]dataplane.Pod, error) { return a, nil }

// logSNATState logs VPP's NAT sessions, interfaces, tables and pipes, for
// a failed test.
func logSNATState(t *testing.T, d vpp.Dataplane) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, _, err := d.Channel(ctx, 1)
	if err != nil {
		t.Logf("VPP state: %v", err)
		return
	}
	defer ch.Close()
	for _, cmd := range []string{"show interface addr", "show nat44 interfaces", "show nat44 addresses", "show nat44 sessions",
		"show nat44 static mappings", "show classify tables verbose", "show ip fib table 0", "show ip fib table 118", "show ip fib table 119"} {
		reply := &vlib.CliInbandReply{}
		if err := ch.SendRequest(&vlib.CliInband{Cmd: cmd}).ReceiveReply(reply); err != nil {
			t.Logf("VPP state: %s: %v", cmd, err)
			continue
		}
		t.Logf("vpp# %s\n%s", cmd, reply.Reply)
	}
}
