package nat44_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"go.fd.io/govpp/binapi/acl"
	"go.fd.io/govpp/binapi/interface_types"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
	polrenderer "github.com/vcoil/vcoil/v2/pkg/policy/renderer"
	polacl "github.com/vcoil/vcoil/v2/pkg/policy/renderer/acl"
	"github.com/vcoil/vcoil/v2/pkg/service"
	"github.com/vcoil/vcoil/v2/pkg/service/renderer/nat44"
)

// TestRealVPPSourceRangesHoldWithPolicies runs the NAT44 renderer and the
// VPP ACL policy renderer together on vcoil's driver against a real VPP
// (VCOIL_VPP_BIN). Pod a backs a LoadBalancer service with source ranges
// and has an egress policy that denies everything, so the policy renderer
// puts its global table on the outside interfaces' output and its
// reflective ACL on their input, next to the services' source-ranges ACL.
// The source ranges must still hold, an allowed client must still reach a,
// and a, egress-isolated, must still answer a client that reaches it by its
// own address (its reply passes the global table through the session the
// outside interface's input ACLs recorded).
func TestRealVPPSourceRangesHoldWithPolicies(t *testing.T) {
	netnstest.RequireRoot(t)
	bin := vpptest.Binary(t)
	node := netnstest.New(t, "polsvcnode")
	ext := netnstest.New(t, "polsvcext")
	netnstest.Veth(t, node, "vppup", ext, "eth0")
	ext.AddAddr("eth0", itClient.String()+"/24")
	ext.AddAddr("eth0", itAllowed.String()+"/24")
	for _, dst := range []string{itBlock.String(), "198.51.100.0/24"} {
		ext.IP("route", "add", dst, "via", itUplink.Addr().String())
	}
	serveNamed(t, ext, "ext")
	v := vpptest.Start(t, bin, node.Path(), "create host-interface name vppup hw-addr 02:fe:00:00:00:01")
	d, err := vpp.New(vpp.Config{
		APISocket: v.APISocket, NodeNetns: node.Path(), PodInterface: vpp.InterfaceType(vpptest.PodInterface()),
		Uplink: "host-vppup", UplinkAddresses: []netip.Prefix{itUplink},
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
	ns := netnstest.New(t, "polsvcpod-a")
	a := &itPod{name: "a", ns: ns, pod: dataplane.Pod{
		PodKey: dataplane.PodKey{ContainerID: "polsvc-it-a", IfName: "eth0"}, Netns: ns.Path(),
		Namespace: "it", Name: "a", IPv4: netip.MustParseAddr("10.100.0.2"),
	}}
	if _, err := d.SetupPod(ctx, a.pod); err != nil {
		t.Fatalf("SetupPod a: %v", err)
	}
	serveNamed(t, ns, "a")

	svcs, err := nat44.New(d, nat44.Config{ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	eps := []service.Endpoint{a.endpoint()}
	web := &service.Service{
		ID: service.ID{Namespace: "it", Name: "web"}, ClusterIPs: []netip.Addr{itWeb},
		LoadBalancerIPs:          []netip.Addr{itLBIP},
		LoadBalancerSourceRanges: []netip.Prefix{netip.PrefixFrom(itAllowed, 32)},
		Ports: []service.Port{
			{Name: "http", Protocol: service.TCP, Port: 80, Endpoints: eps, Cluster: eps, HasEndpoints: true},
			{Name: "dns", Protocol: service.UDP, Port: 53, Endpoints: eps, Cluster: eps, HasEndpoints: true},
		},
	}
	if err := svcs.Resync(ctx, &service.State{
		Node:     service.Node{Name: "node", NodePortAddresses: []netip.Addr{itUplink.Addr()}, NATLoopback: []netip.Addr{itLoopback}},
		Services: map[service.ID]*service.Service{web.ID: web},
	}); err != nil {
		t.Fatalf("services Resync: %v", err)
	}
	pols, err := polacl.New(d, polacl.Config{}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}

	lbTCP, lbUDP := netip.AddrPortFrom(itLBIP, 80), netip.AddrPortFrom(itLBIP, 53)
	direct := netip.AddrPortFrom(a.pod.IPv4, 8080)
	extServer := netip.AddrPortFrom(itClient, 8080)
	// answered waits until the client src in ext gets pod a's answer from
	// target.
	answered := func(t *testing.T, network string, target netip.AddrPort, src netip.Addr) {
		t.Helper()
		poll.Eventually(t, 30*time.Second, func() error {
			name, _, err := ask(ctx, ext, network, target, src)
			if err != nil {
				return fmt.Errorf("%s -> %s/%s: %w", src, target, network, err)
			}
			if name != "a" {
				return fmt.Errorf("%s -> %s/%s: answered by %q, want pod a", src, target, network, name)
			}
			return nil
		})
	}
	// unanswered checks, three times, that the client src in ext gets no
	// answer from target.
	unanswered := func(t *testing.T, from *netnstest.NS, target netip.AddrPort, src netip.Addr) {
		t.Helper()
		for range 3 {
			name, _, err := ask(ctx, from, "tcp", target, src)
			if !isTimeout(err) {
				t.Fatalf("%s (%s) -> %s: got %q, %v; want no answer", from, src, target, name, err)
			}
		}
	}
	allowed := func(t *testing.T) {
		answered(t, "tcp", lbTCP, itAllowed)
		answered(t, "udp", lbUDP, itAllowed)
	}

	t.Run("without policies, the source ranges hold", func(t *testing.T) {
		allowed(t)
		unanswered(t, ext, lbTCP, itClient)
		answered(t, "tcp", direct, itClient)
	})

	if err := pols.Render(ctx, polrenderer.Txn{Resync: true, Pods: []polrenderer.PodRules{{
		Pod: polrenderer.PodID{Namespace: "it", Name: "a"}, IPs: []netip.Addr{a.pod.IPv4},
		Egress: []polrenderer.Rule{polrenderer.DenyAll},
	}}}); err != nil {
		t.Fatalf("policy Render: %v", err)
	}

	t.Run("the uplink's input: the source-ranges ACL, then the policies' reflective ACL", func(t *testing.T) {
		_, ifs, err := d.Channel(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := inputACLTags(t, v, ifs.Uplink), []string{"vcoil-svc-source-ranges@2", "vcoil-pol@2 reflect"}; !slices.Equal(got, want) {
			t.Fatalf("the uplink's input ACLs: %v, want %v", got, want)
		}
	})
	t.Run("with a's egress policy, the global table denies a's own connections", func(t *testing.T) {
		poll.Eventually(t, 30*time.Second, func() error {
			if _, _, err := ask(ctx, a.ns, "tcp", extServer, netip.Addr{}); !isTimeout(err) {
				return fmt.Errorf("pod a -> %s: %v, want no answer", extServer, err)
			}
			return nil
		})
		unanswered(t, a.ns, extServer, netip.Addr{})
	})
	t.Run("with a's egress policy, a source outside the ranges gets no answer", func(t *testing.T) {
		unanswered(t, ext, lbTCP, itClient)
	})
	t.Run("with a's egress policy, an allowed source reaches a over TCP and UDP", allowed)
	t.Run("a, egress-isolated, answers an outside client that reaches it by its address", func(t *testing.T) {
		answered(t, "tcp", direct, itClient)
	})
}

// inputACLTags are the tags of the input ACLs of interface sw, in order.
func inputACLTags(t *testing.T, v *vpptest.VPP, sw uint32) []string {
	t.Helper()
	ch, done := v.Connect(t)
	defer done()
	tags := map[uint32]string{}
	if err := vppapi.Dump(ch, &acl.ACLDump{ACLIndex: ^uint32(0)}, func() *acl.ACLDetails { return &acl.ACLDetails{} },
		func(d *acl.ACLDetails) { tags[d.ACLIndex] = d.Tag }); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := vppapi.Dump(ch, &acl.ACLInterfaceListDump{SwIfIndex: interface_types.InterfaceIndex(sw)}, func() *acl.ACLInterfaceListDetails { return &acl.ACLInterfaceListDetails{} },
		func(d *acl.ACLInterfaceListDetails) {
			for _, x := range d.Acls[:d.NInput] {
				got = append(got, tags[x])
			}
		}); err != nil {
		t.Fatal(err)
	}
	return got
}
