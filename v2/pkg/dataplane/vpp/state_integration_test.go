package vpp_test

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"go.fd.io/govpp/binapi/acl"
	"go.fd.io/govpp/binapi/acl_types"
	"go.fd.io/govpp/binapi/ip_types"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

// The node state's dump against a real VPP (VCOIL_VPP_BIN): VPP knows
// every message it sends, and it finds the version, vcoil's interfaces
// with their addresses, the pod's interface as PodInterfaces names it,
// and vcoil's ACL beside someone else's.
func TestRealVPPStateDump(t *testing.T) {
	netnstest.RequireRoot(t)
	bin := vpptest.Binary(t)
	typ := vpp.InterfaceType(vpptest.PodInterface())
	node := netnstest.New(t, "vppstate")
	netnstest.Veth(t, node, "vppup", node, "vppup-peer")
	v := vpptest.Start(t, bin, node.Path(), "create host-interface name vppup")
	d, err := vpp.New(vpp.Config{
		APISocket: v.APISocket, NodeNetns: node.Path(), PodInterface: typ, Uplink: "host-vppup",
		UplinkAddresses: []netip.Prefix{netip.MustParsePrefix("198.18.5.2/24")},
		PingInterval:    200 * time.Millisecond, ReadyWait: 30 * time.Second,
	}, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := d.Init(ctx); err != nil {
		t.Fatalf("Init: %v", err)
	}
	pod := dataplane.Pod{PodKey: dataplane.PodKey{ContainerID: "vpp-state-a", IfName: "eth0"}, Netns: netnstest.New(t, "pod-a").Path(),
		IPv4: netip.MustParseAddr("10.100.0.2")}
	if _, err := d.SetupPod(ctx, pod); err != nil {
		t.Fatalf("SetupPod: %v", err)
	}
	ch, _, err := d.Channel(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	var indexes []uint32
	for _, tag := range []string{"someone-else", "vcoil-pol state-test"} {
		reply := &acl.ACLAddReplaceReply{}
		rule := acl_types.ACLRule{IsPermit: acl_types.ACL_ACTION_API_PERMIT, Proto: ip_types.IP_API_PROTO_TCP,
			SrcPrefix: vppapi.Prefix(netip.MustParsePrefix("10.100.0.0/29")), DstPrefix: vppapi.Prefix(netip.MustParsePrefix("10.100.0.2/32")),
			SrcportOrIcmptypeLast: 65535, DstportOrIcmpcodeFirst: 8080, DstportOrIcmpcodeLast: 8080}
		if err := vppapi.Call(ch, &acl.ACLAddReplace{ACLIndex: ^uint32(0), Tag: tag, Count: 1, R: []acl_types.ACLRule{rule}}, reply); err != nil {
			t.Fatal(err)
		}
		indexes = append(indexes, reply.ACLIndex)
	}

	st := &nodestate.State{}
	for _, src := range []nodestate.Source{d.StateSource()} {
		if err := src.Fill(ctx, st); err != nil {
			t.Fatalf("Fill: %v", err)
		}
	}
	s := st.VPP
	if !s.Connected || !strings.HasPrefix(s.Version, vpp.VPPVersion) || s.Incarnation != 1 || s.Resync.Last.IsZero() || s.Resync.Error != "" {
		t.Errorf("connection: connected %t, version %q, incarnation %d, resync %+v", s.Connected, s.Version, s.Incarnation, s.Resync)
	}
	byTag := map[string]nodestate.VPPInterface{}
	for _, i := range s.Interfaces {
		byTag[i.Tag] = i
	}
	if lo := byTag["vcoil-loopback@2"]; !lo.Up || !slices.Contains(lo.Addresses, vpp.LoopbackIPv4) {
		t.Errorf("vcoil's loopback is %+v, want up with %s", lo, vpp.LoopbackIPv4)
	}
	up := slices.IndexFunc(s.Interfaces, func(i nodestate.VPPInterface) bool { return i.Name == "host-vppup" })
	if up < 0 || !slices.Contains(s.Interfaces[up].Addresses, netip.MustParsePrefix("198.18.5.2/24")) {
		t.Errorf("the uplink lacks its address: %+v", s.Interfaces)
	}
	ifs, err := d.PodInterfaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pi, ok := ifs[pod.PodKey]
	if !ok || pi.Kind != string(typ) {
		t.Fatalf("PodInterfaces = %+v, want the pod's %s interface", ifs, typ)
	}
	i := slices.IndexFunc(s.Interfaces, func(i nodestate.VPPInterface) bool { return i.Index == pi.Index })
	if i < 0 || s.Interfaces[i].Name != pi.Name || s.Interfaces[i].Tag != "vcoil@2 vpp-state-a eth0" || !s.Interfaces[i].Up {
		t.Errorf("the pod's interface %+v is not in VPP's dump as tagged: %+v", pi, s.Interfaces)
	}
	if typ == vpp.AFPacket && "host-"+pi.HostName != pi.Name {
		t.Errorf("af_packet interface %s is bound to %q", pi.Name, pi.HostName)
	}
	// The pod guard's two ACLs, made at the sync, then the test's own.
	want := []nodestate.VPPACL{
		{Index: 0, Tag: "vcoil-guard@2 deny", Rules: []string{
			"deny icmp6 ::/0 > ::/0 type 134-134 code 0-255", "deny icmp6 ::/0 > ::/0 type 137-137 code 0-255", "deny icmp 0.0.0.0/0 > 0.0.0.0/0 type 5-5 code 0-255"}},
		{Index: 1, Tag: "vcoil-guard@2 permit", Rules: []string{"permit any 0.0.0.0/0 > 0.0.0.0/0", "permit any ::/0 > ::/0"}},
		{Index: indexes[1], Tag: "vcoil-pol state-test", Rules: []string{"permit tcp 10.100.0.0/29 > 10.100.0.2/32:8080"}},
	}
	if !slices.EqualFunc(s.ACLs, want, func(a, b nodestate.VPPACL) bool {
		return a.Index == b.Index && a.Tag == b.Tag && slices.Equal(a.Rules, b.Rules)
	}) {
		t.Errorf("ACLs = %+v, want %+v", s.ACLs, want)
	}
	t.Logf("VPP state: %d interfaces, %d ACLs, %d NAT mappings", len(s.Interfaces), len(s.ACLs), len(s.NATMappings))
}
