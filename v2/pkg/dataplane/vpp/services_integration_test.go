package vpp_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/acl"
	"go.fd.io/govpp/binapi/acl_types"
	"go.fd.io/govpp/binapi/interface_types"
	"go.fd.io/govpp/binapi/ip"
	"go.fd.io/govpp/binapi/ip_types"
	"go.fd.io/govpp/binapi/nat44_ed"
	"go.fd.io/govpp/binapi/nat_types"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
)

// The Services API against a real VPP (VCOIL_VPP_BIN): a renderer's own
// channel on vcoild's connection, an ACL list on the uplink, the pods' NAT
// roles, the service network with real refusals (a pod and the node
// connecting to the reject sink and to an unmapped cluster IP), and after
// VPP is killed and started again: a new incarnation announced, the
// service network and roles back, the ACL list not, the old incarnation
// refused.
func TestRealVPPServicesAPI(t *testing.T) {
	netnstest.RequireRoot(t)
	bin := vpptest.Binary(t)
	node := netnstest.New(t, "vppsvc")
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
	if inc := <-d.Resynced(); inc != 1 {
		t.Fatalf("first incarnation %d", inc)
	}
	block := netip.MustParsePrefix("10.100.0.0/29")
	if err := d.Blocks().Sync(ctx, []netip.Prefix{block}); err != nil {
		t.Fatal(err)
	}
	podNS := netnstest.New(t, "vppsvc-pod")
	pod := dataplane.Pod{PodKey: dataplane.PodKey{ContainerID: "vpp-svc-a", IfName: "eth0"}, Netns: podNS.Path(), IPv4: netip.MustParseAddr("10.100.0.2")}
	if _, err := d.SetupPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	net := vpp.ServiceNetwork{
		CIDRs:  []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("fd00:96::/112")},
		Source: netip.MustParseAddr("10.100.0.7"), Sinks: true,
	}
	if err := d.SetServiceNetwork(ctx, net); err != nil {
		t.Fatal(err)
	}

	ch, ifs, err := d.Channel(ctx, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if ifs.Incarnation != 1 || ifs.Uplink == vpp.NoInterface || ifs.HostInterconnect == ifs.Uplink {
		t.Fatalf("node interfaces %+v", ifs)
	}
	checkRoutes := func(ch api.Channel, ifs vpp.NodeInterfaces, when string) {
		t.Helper()
		var got []string
		err := vppapi.Dump(ch, &ip.IPRouteDump{Table: ip.IPTable{TableID: 0}}, func() *ip.IPRouteDetails { return &ip.IPRouteDetails{} }, func(m *ip.IPRouteDetails) {
			p := m.Route.Prefix
			if len(m.Route.Paths) == 1 && (m.Route.Paths[0].SwIfIndex == ifs.HostInterconnect || p.Len == 32) {
				got = append(got, fmt.Sprintf("%s sw=%d type=%d", p, m.Route.Paths[0].SwIfIndex, m.Route.Paths[0].Type))
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			fmt.Sprintf("10.96.0.0/12 sw=%d type=0", ifs.HostInterconnect),
			fmt.Sprintf("10.100.0.7/32 sw=%d type=0", ifs.HostInterconnect),
			fmt.Sprintf("169.254.101.1/32 sw=%d type=0", ifs.HostInterconnect),
			"169.254.101.2/32 sw=4294967295 type=2", // FIB_API_PATH_TYPE_DROP
		} {
			if !slices.Contains(got, want) {
				t.Fatalf("%s: VPP lacks the route %s:\n%s", when, want, strings.Join(got, "\n"))
			}
		}
		if r := strings.TrimSpace(node.IP("-4", "route", "show", "proto", "33")); r != "10.96.0.0/12 via 169.254.100.1 dev vcoilhost src 10.100.0.7" {
			t.Fatalf("%s: the node's service routes:\n%s", when, r)
		}
	}
	checkRoutes(ch, ifs, "before the restart")

	// An ACL the "renderer" makes on its channel, set on the uplink.
	reply := &acl.ACLAddReplaceReply{}
	permit := acl_types.ACLRule{IsPermit: acl_types.ACL_ACTION_API_PERMIT, SrcPrefix: prefix("0.0.0.0/0"), DstPrefix: prefix("0.0.0.0/0"),
		SrcportOrIcmptypeLast: 65535, DstportOrIcmpcodeLast: 65535}
	if err := ch.SendRequest(&acl.ACLAddReplace{ACLIndex: ^uint32(0), Tag: "vcoil-test", Count: 1, R: []acl_types.ACLRule{permit}}).ReceiveReply(reply); err != nil {
		t.Fatal(err)
	}
	if err := d.SetInterfaceACLs(ctx, ifs.Incarnation, vpp.Uplink, vpp.ACLServices, []uint32{reply.ACLIndex}); err != nil {
		t.Fatal(err)
	}
	if got := aclList(t, ch, ifs.Uplink); got != fmt.Sprintf("n_input=1 %v", []uint32{reply.ACLIndex}) {
		t.Fatalf("the uplink's ACL list: %s", got)
	}

	refused := func(from *netnstest.NS, dst, when string) {
		t.Helper()
		poll.Eventually(t, 20*time.Second, func() error {
			c, err := from.Dial(ctx, "tcp4", dst)
			if err == nil {
				c.Close()
				return fmt.Errorf("%s: %s accepted a connection", when, dst)
			}
			if !errors.Is(err, syscall.ECONNREFUSED) {
				return fmt.Errorf("%s: connect to %s from %s: %w, want connection refused", when, dst, from, err)
			}
			return nil
		})
	}
	refused(podNS, "169.254.101.1:80", "a pod to the reject sink")
	refused(podNS, "10.96.0.10:80", "a pod to an unmapped cluster IP")
	refused(node, "10.96.0.10:80", "the node to an unmapped cluster IP")

	if err := d.SetPodNATRoles(ctx, []netip.Addr{pod.IPv4}); err != nil {
		t.Fatal(err)
	}
	podIf := natInterfaces(t, ch)
	if len(podIf) != 1 {
		t.Fatalf("NAT interfaces: %v", podIf)
	}

	vpptest.RestartAndAwait(ctx, t, v, d.Resynced(), 2)
	if err := ch.SendRequest(&acl.ACLAddReplace{ACLIndex: ^uint32(0), Tag: "vcoil-test", Count: 1, R: []acl_types.ACLRule{permit}}).ReceiveReply(reply); err == nil {
		t.Fatal("the old incarnation's channel still works")
	}
	ch2, ifs2, err := d.Channel(ctx, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer ch2.Close()
	if ifs2.Incarnation != 2 {
		t.Fatalf("node interfaces after the restart %+v", ifs2)
	}
	checkRoutes(ch2, ifs2, "after the restart")
	if got := aclList(t, ch2, ifs2.Uplink); got != "none" {
		t.Fatalf("the uplink's ACL list after the restart: %s", got)
	}
	if got := natInterfaces(t, ch2); !slices.Equal(got, podIf) {
		t.Fatalf("NAT interfaces after the restart %v, want %v", got, podIf)
	}
	if err := d.SetInterfaceACLs(ctx, ifs.Incarnation, vpp.Uplink, vpp.ACLServices, []uint32{reply.ACLIndex}); err == nil {
		t.Fatal("an ACL list of the old incarnation was accepted")
	}
	refused(podNS, "169.254.101.1:80", "a pod to the reject sink after the restart")
	refused(node, "10.96.0.10:80", "the node to an unmapped cluster IP after the restart")
}

func prefix(s string) ip_types.Prefix { return vppapi.Prefix(netip.MustParsePrefix(s)) }

// aclList is an interface's ACL list as VPP holds it.
func aclList(t *testing.T, ch api.Channel, sw uint32) string {
	t.Helper()
	out := "none"
	err := vppapi.Dump(ch, &acl.ACLInterfaceListDump{SwIfIndex: interface_types.InterfaceIndex(sw)},
		func() *acl.ACLInterfaceListDetails { return &acl.ACLInterfaceListDetails{} },
		func(m *acl.ACLInterfaceListDetails) {
			if len(m.Acls) > 0 {
				out = fmt.Sprintf("n_input=%d %v", m.NInput, m.Acls)
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// natInterfaces lists the interfaces that are both NAT inside and outside
// (the pods that back a service), by name.
func natInterfaces(t *testing.T, ch api.Channel) []string {
	t.Helper()
	var out []string
	err := vppapi.Dump(ch, &nat44_ed.Nat44InterfaceDump{}, func() *nat44_ed.Nat44InterfaceDetails { return &nat44_ed.Nat44InterfaceDetails{} },
		func(m *nat44_ed.Nat44InterfaceDetails) {
			if m.Flags&(nat_types.NAT_IS_INSIDE|nat_types.NAT_IS_OUTSIDE) == nat_types.NAT_IS_INSIDE|nat_types.NAT_IS_OUTSIDE {
				out = append(out, fmt.Sprint(m.SwIfIndex))
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
