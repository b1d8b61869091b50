package vpp

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"go.fd.io/govpp/binapi/memclnt"
	"go.fd.io/govpp/binapi/nat_types"

	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
)

// waitSynced waits until the driver is synced with the fake VPP of
// pid, and returns the incarnation.
func waitSynced(t *testing.T, h *harness, pid uint32) Incarnation {
	t.Helper()
	var inc Incarnation
	poll.Eventually(t, 5*time.Second, func() error {
		h.d.mu.Lock()
		defer h.d.mu.Unlock()
		if !h.d.synced || h.d.pid != pid {
			return fmt.Errorf("not synced with VPP pid %d: %v", pid, h.d.why)
		}
		inc = h.d.incarnation
		return nil
	})
	return inc
}

// A renderer's channel is a new one on the driver's connection, sized for
// its requests in flight, with the node's interfaces of the incarnation;
// it stops working when VPP restarts, and the next one belongs to the new
// incarnation.
func TestChannelIsANewChannelOnTheCurrentConnection(t *testing.T) {
	cfg := testConfig()
	cfg.Uplink = "host-up0"
	h := start(t, cfg, func(h *harness) { h.vpp.add(&fakeIf{name: "host-up0", mtu: 1500}) })
	ch, ifs, err := h.d.Channel(ctx(t), 256)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	if want := (NodeInterfaces{Incarnation: 1, Uplink: 1, HostInterconnect: 3, Loopback: 2}); ifs != want {
		t.Fatalf("node interfaces = %+v, want %+v", ifs, want)
	}
	h.vpp.mu.Lock()
	opened := slices.Clone(h.vpp.opened)
	h.vpp.mu.Unlock()
	if !slices.Equal(opened, []int{256 + channelSlack}) {
		t.Fatalf("channels opened with buffers %v, want [%d]", opened, 256+channelSlack)
	}
	reply := &memclnt.ControlPingReply{}
	if err := ch.SendRequest(&memclnt.ControlPing{}).ReceiveReply(reply); err != nil || reply.VpePID != 100 {
		t.Fatalf("ping on the renderer's channel: pid %d, %v", reply.VpePID, err)
	}

	h.vpp.restart(func(f *fakeVPP) { f.add(&fakeIf{name: "host-up0", mtu: 1500}) })
	waitSynced(t, h, 101)
	if err := ch.SendRequest(&memclnt.ControlPing{}).ReceiveReply(reply); err == nil {
		t.Fatal("the channel of the old VPP still works")
	}
	ch2, ifs2, err := h.d.Channel(ctx(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer ch2.Close()
	if want := (NodeInterfaces{Incarnation: 2, Uplink: 1, HostInterconnect: 3, Loopback: 2}); ifs2 != want {
		t.Fatalf("node interfaces after the restart = %+v, want %+v", ifs2, want)
	}
	if err := ch2.SendRequest(&memclnt.ControlPing{}).ReceiveReply(reply); err != nil || reply.VpePID != 101 {
		t.Fatalf("ping on the new channel: pid %d, %v", reply.VpePID, err)
	}
	if _, _, err := h.d.Channel(ctx(t), 0); err == nil {
		t.Fatal("a channel for 0 requests in flight was opened")
	}
}

func TestChannelWithoutAnUplinkSaysNoInterface(t *testing.T) {
	h := start(t, testConfig())
	ch, ifs, err := h.d.Channel(ctx(t), 8)
	if err != nil {
		t.Fatal(err)
	}
	ch.Close()
	if want := (NodeInterfaces{Incarnation: 1, Uplink: NoInterface, HostInterconnect: 2, Loopback: 1}); ifs != want {
		t.Fatalf("node interfaces = %+v, want %+v", ifs, want)
	}
}

// While VPP is gone, Channel waits, then fails with ErrNotReady.
func TestChannelWaitsForVPP(t *testing.T) {
	cfg := testConfig()
	cfg.ReadyWait = 100 * time.Millisecond
	h := start(t, cfg)
	h.vpp.setDown(true)
	poll.Eventually(t, 5*time.Second, func() error {
		if h.d.Healthy(ctx(t)) == nil {
			return errors.New("still healthy")
		}
		return nil
	})
	if _, _, err := h.d.Channel(ctx(t), 8); !errors.Is(err, ErrNotReady) {
		t.Fatalf("Channel while VPP is gone = %v, want ErrNotReady", err)
	}
}

// Resynced holds the last incarnation synced, one value at most, and the
// driver never waits for a reader.
func TestResyncedHoldsTheLatestIncarnation(t *testing.T) {
	h := start(t, testConfig())
	select {
	case inc := <-h.d.Resynced():
		if inc != 1 {
			t.Fatalf("first value %d, want incarnation 1", inc)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing on Resynced after the first sync")
	}
	for pid := uint32(101); pid <= 103; pid++ {
		h.vpp.restart()
		waitSynced(t, h, pid)
	}
	select {
	case inc := <-h.d.Resynced():
		if inc != 4 {
			t.Fatalf("Resynced = %d after three unread restarts, want the latest, 4", inc)
		}
	default:
		t.Fatal("nothing on Resynced after three restarts")
	}
	select {
	case inc := <-h.d.Resynced():
		t.Fatalf("a second value %d on Resynced", inc)
	default:
	}
}

var podC = dataplane.Pod{
	PodKey: dataplane.PodKey{ContainerID: "d00d", IfName: "eth0"}, Netns: "/run/netns/pod-c",
	IPv4: netip.MustParseAddr("10.100.0.4"),
}

// Every pod is a frontend, the backends' pods also backends; a change sends
// only the differences, and a pod wired later gets its role at SetupPod.
func TestSetPodNATRolesSendsOnlyTheDifferences(t *testing.T) {
	h := start(t, testConfig())
	for _, p := range []dataplane.Pod{podA, podB} {
		if _, err := h.d.SetupPod(ctx(t), p); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range h.vpp.take() {
		if strings.HasPrefix(m, "nat44_interface") {
			t.Fatalf("a pod got a NAT role before SetPodNATRoles: %s", m)
		}
	}
	// podA is interface 3, podB 4; pods go in key order: beef (B), c0ffee (A).
	steps := []struct {
		name     string
		backends []netip.Addr
		want     []string
	}{
		{"B backs a service", []netip.Addr{podB.IPv4, netip.MustParseAddr("10.200.0.9"), podA.IPv6}, []string{
			"nat44_ed_plugin_enable_disable enable=true sessions=0",
			"nat44_interface_add_del_feature add=true 4 flags=32",
			"nat44_interface_add_del_feature add=true 4 flags=0",
			"nat44_interface_add_del_feature add=true 3 flags=0",
		}},
		{"the same again", []netip.Addr{podB.IPv4}, nil},
		{"A instead of B", []netip.Addr{podA.IPv4}, []string{
			"nat44_interface_add_del_feature add=false 4 flags=32",
			"nat44_interface_add_del_feature add=true 3 flags=32",
		}},
		{"no backends", nil, []string{
			"nat44_interface_add_del_feature add=false 3 flags=32",
		}},
	}
	for _, s := range steps {
		if err := h.d.SetPodNATRoles(ctx(t), s.backends); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		wantLines(t, s.name, h.vpp.take(), s.want)
	}
	if err := h.d.SetPodNATRoles(ctx(t), []netip.Addr{podC.IPv4}); err != nil {
		t.Fatal(err)
	}
	h.vpp.take()
	if _, err := h.d.SetupPod(ctx(t), podC); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "a pod wired after SetPodNATRoles", h.vpp.take(), slices.Concat([]string{
		`tap_create_v3 tag="vcoil@2 d00d eth0" host_if="eth0" ns="/run/netns/pod-c"(true) mtu=1500(true) flags=16 random_mac=true queues=1/1 rings=256/256`,
		"sw_interface_set_unnumbered add=true 5 uses 1",
	}, sourceSetUp(5, "10.100.0.4", ""), []string{
		guardOnly(5),
		"sw_interface_set_flags 5 flags=1",
		"ip_route_add_del add=true 10.100.0.4/32 via 10.100.0.4 5",
		"nat44_interface_add_del_feature add=true 5 flags=32",
		"nat44_interface_add_del_feature add=true 5 flags=0",
		"sw_interface_dump 5",
	}))
}

// A VPP that outlived vcoild holds the NAT features of the pods vcoild
// keeps, which vcoild does not know: the first roles set add what is
// wanted (what VPP has already is no error) and remove what is not.
func TestSetPodNATRolesOnFeaturesVPPAlreadyHas(t *testing.T) {
	cfg := testConfig()
	cfg.Allocations = allocations{{PodKey: podB.PodKey, Netns: podB.Netns, IPv4: podB.IPv4}}
	h := start(t, cfg, func(h *harness) {
		f := h.vpp
		f.add(&fakeIf{name: "loop1", tag: loopbackTag, addrs: []netip.Prefix{LoopbackIPv4}, up: true})
		f.add(&fakeIf{name: "tap2", tag: interconnectTag, addrs: []netip.Prefix{InterconnectVPPIPv4}, up: true})
		b := f.add(&fakeIf{name: "tap3", tag: podTag(podB.PodKey), up: true, mtu: 1500})
		f.routes[hostPrefix(podB.IPv4)] = viaPath(b.sw, podB.IPv4)
		f.nat = true
		// An earlier vcoild made it a backend too.
		f.natFeat[b.sw] = map[nat_types.NatConfigFlags]bool{0: true, nat_types.NAT_IS_INSIDE: true}
	})
	h.vpp.take()
	if err := h.d.SetPodNATRoles(ctx(t), nil); err != nil {
		t.Fatalf("SetPodNATRoles on a feature VPP has: %v", err)
	}
	wantLines(t, "VPP messages", h.vpp.take(), []string{
		"nat44_interface_dump",
		"nat44_ed_plugin_enable_disable enable=true sessions=0",
		"nat44_interface_add_del_feature add=false 3 flags=32",
	})
	h.vpp.mu.Lock()
	feats := fmt.Sprint(h.vpp.natFeat[3])
	h.vpp.mu.Unlock()
	if feats != "map[NAT_IS_NONE:true]" {
		t.Fatalf("pod B's NAT features in VPP: %s, want outside only", feats)
	}
	t.Log("once known, only the differences")
	if err := h.d.SetPodNATRoles(ctx(t), nil); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "VPP messages of a repeat", h.vpp.take(), nil)
}

// A restarted vcoild finds a pod that an earlier vcoild made a frontend
// only. It reads the pod's features from VPP rather than removing the
// backend feature the pod lacks: VPP 25.10 answers that removal with
// success, forgets the interface's frontend feature and leaves it in the
// interface's feature arc, and the pod, once a backend, could no longer
// open connections that VPP does not translate.
func TestSetPodNATRolesNeverRemovesAFeatureVPPLacks(t *testing.T) {
	cfg := testConfig()
	cfg.Allocations = allocations{{PodKey: podB.PodKey, Netns: podB.Netns, IPv4: podB.IPv4}}
	h := start(t, cfg, func(h *harness) {
		f := h.vpp
		f.add(&fakeIf{name: "loop1", tag: loopbackTag, addrs: []netip.Prefix{LoopbackIPv4}, up: true})
		f.add(&fakeIf{name: "tap2", tag: interconnectTag, addrs: []netip.Prefix{InterconnectVPPIPv4}, up: true})
		b := f.add(&fakeIf{name: "tap3", tag: podTag(podB.PodKey), up: true, mtu: 1500})
		f.routes[hostPrefix(podB.IPv4)] = viaPath(b.sw, podB.IPv4)
		f.nat = true
		f.natFeat[b.sw] = map[nat_types.NatConfigFlags]bool{0: true}
	})
	h.vpp.take()
	if err := h.d.SetPodNATRoles(ctx(t), nil); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "VPP messages for a frontend that stays one", h.vpp.take(), []string{"nat44_interface_dump"})
	if err := h.d.SetPodNATRoles(ctx(t), []netip.Addr{podB.IPv4}); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "VPP messages when it becomes a backend", h.vpp.take(), []string{
		"nat44_ed_plugin_enable_disable enable=true sessions=0",
		"nat44_interface_add_del_feature add=true 3 flags=32",
	})
	h.vpp.mu.Lock()
	defer h.vpp.mu.Unlock()
	if feats := fmt.Sprint(h.vpp.natFeat[3]); feats != "map[NAT_IS_NONE:true NAT_IS_INSIDE:true]" {
		t.Errorf("pod B's NAT features in VPP: %s, want inside and outside", feats)
	}
	if len(h.vpp.natBroken) > 0 {
		t.Errorf("interfaces whose NAT feature arc VPP would leave inconsistent: %v", h.vpp.natBroken)
	}
}

func TestSetServiceNetworkRoutesAndRemovesWhatIsNoLongerWanted(t *testing.T) {
	h := start(t, testConfig())
	h.vpp.take()
	h.kernel.take()
	net := ServiceNetwork{
		CIDRs:  []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("fd00:96::/112")},
		Source: netip.MustParseAddr("10.100.0.1"), Sinks: true,
	}
	if err := h.d.SetServiceNetwork(ctx(t), net); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "kernel calls", h.kernel.take(), []string{"SyncServiceNetwork cidrs=[10.96.0.0/12] source=10.100.0.1 sinks=true"})
	wantLines(t, "VPP messages", h.vpp.take(), []string{
		"fib_source_dump", "ip_route_v2_dump src=8 table=0 ip6=false", "fib_source_dump", "ip_route_v2_dump src=8 table=0 ip6=true",
		"ip_route_add_del add=true 10.96.0.0/12 via 169.254.100.2 2",
		"ip_route_add_del add=true 10.100.0.1/32 via 169.254.100.2 2",
		"ip_route_add_del add=true 169.254.101.1/32 via 169.254.100.2 2",
		"ip_route_add_del add=true 169.254.101.2/32 drop",
	})

	t.Log("the same again sends nothing but the dump, with entries of VPP's plugins through the interconnect")
	// cnat tracks each backend by an entry of its own that inherits its
	// covering route's path: here the host interconnect. They are not the
	// service network's, whatever they look like.
	h.vpp.mu.Lock()
	for _, p := range []string{"10.96.0.10/32", "198.51.100.7/32", "fd00:96::10/128"} {
		pfx := netip.MustParsePrefix(p)
		host := InterconnectHostIPv4.Addr()
		if pfx.Addr().Is6() {
			host = InterconnectHostIPv6.Addr()
		}
		h.vpp.otherRoutes[pfx] = viaPath(2, host)
	}
	h.vpp.mu.Unlock()
	if err := h.d.SetServiceNetwork(ctx(t), net); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "VPP messages of a repeat", h.vpp.take(), []string{"fib_source_dump", "ip_route_v2_dump src=8 table=0 ip6=false", "fib_source_dump", "ip_route_v2_dump src=8 table=0 ip6=true"})
	h.kernel.take()

	t.Log("another CIDR and NAT loopback, no sinks")
	net = ServiceNetwork{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.112.0.0/16"), netip.MustParsePrefix("10.96.0.0/12")}, Source: netip.MustParseAddr("10.100.0.65")}
	if err := h.d.SetServiceNetwork(ctx(t), net); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "kernel calls after a change", h.kernel.take(), []string{"SyncServiceNetwork cidrs=[10.96.0.0/12 10.112.0.0/16] source=10.100.0.65 sinks=false"})
	wantLines(t, "VPP messages after a change", h.vpp.take(), []string{
		"fib_source_dump", "ip_route_v2_dump src=8 table=0 ip6=false", "fib_source_dump", "ip_route_v2_dump src=8 table=0 ip6=true",
		"ip_route_add_del add=false 10.100.0.1/32 via 169.254.100.2 2",
		"ip_route_add_del add=false 169.254.101.1/32 via 169.254.100.2 2",
		"ip_route_add_del add=false 169.254.101.2/32 drop",
		"ip_route_add_del add=true 10.112.0.0/16 via 169.254.100.2 2",
		"ip_route_add_del add=true 10.100.0.65/32 via 169.254.100.2 2",
	})
	h.vpp.mu.Lock()
	if _, ok := h.vpp.routes[netip.MustParsePrefix("0.0.0.0/0")]; !ok {
		t.Error("the default route through the host went with the service network's")
	}
	h.vpp.mu.Unlock()

	t.Log("an IPv6 NAT loopback is routed to the host's link-local end, and goes when unset")
	net.SourceIPv6 = netip.MustParseAddr("fd00:100::f")
	if err := h.d.SetServiceNetwork(ctx(t), net); err != nil {
		t.Fatal(err)
	}
	h.kernel.take()
	wantLines(t, "VPP messages with an IPv6 NAT loopback", h.vpp.take(), []string{
		"fib_source_dump", "ip_route_v2_dump src=8 table=0 ip6=false", "fib_source_dump", "ip_route_v2_dump src=8 table=0 ip6=true",
		"ip_route_add_del add=true fd00:100::f/128 via fe80::2 2",
	})
	net.SourceIPv6 = netip.Addr{}
	if err := h.d.SetServiceNetwork(ctx(t), net); err != nil {
		t.Fatal(err)
	}
	h.kernel.take()
	wantLines(t, "VPP messages without it", h.vpp.take(), []string{
		"fib_source_dump", "ip_route_v2_dump src=8 table=0 ip6=false", "fib_source_dump", "ip_route_v2_dump src=8 table=0 ip6=true",
		"ip_route_add_del add=false fd00:100::f/128 via fe80::2 2",
	})

	t.Log("a bad source is refused, changing nothing")
	if err := h.d.SetServiceNetwork(ctx(t), ServiceNetwork{Source: netip.MustParseAddr("fd00::1")}); err == nil {
		t.Fatal("an IPv6 source was accepted")
	}
	if m := h.vpp.take(); len(m) != 0 {
		t.Fatalf("a refused service network sent %v", m)
	}
}

// Before VPP is synced the service network is only recorded; the sync
// routes it.
func TestSetServiceNetworkBeforeTheFirstSync(t *testing.T) {
	net := ServiceNetwork{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}, Sinks: true}
	h := start(t, testConfig(), func(h *harness) {
		if err := h.d.SetServiceNetwork(ctx(t), net); err != nil {
			t.Fatal(err)
		}
		if m := h.vpp.take(); len(m) != 0 {
			t.Fatalf("sent before Init: %v", m)
		}
	})
	got := h.vpp.take()
	wantLines(t, "the end of the first sync", got[len(got)-5:], []string{
		"fib_source_dump", "ip_route_v2_dump src=8 table=0 ip6=true",
		"ip_route_add_del add=true 10.96.0.0/12 via 169.254.100.2 2",
		"ip_route_add_del add=true 169.254.101.1/32 via 169.254.100.2 2",
		"ip_route_add_del add=true 169.254.101.2/32 drop",
	})
	wantLines(t, "kernel calls", h.kernel.take(), []string{"SetUpHost", "SyncHostPorts []", "SyncServiceNetwork cidrs=[10.96.0.0/12] source=invalid IP sinks=true"})
}

// The lists of every owner, merged with the policies' first, sent only
// when the merged list changes.
func TestSetInterfaceACLsMergesTheOwnersLists(t *testing.T) {
	cfg := testConfig()
	cfg.Uplink = "host-up0"
	h := start(t, cfg, func(h *harness) { h.vpp.add(&fakeIf{name: "host-up0", mtu: 1500}) })
	h.vpp.take()
	const inc = 1
	steps := []struct {
		name  string
		iface NodeInterface
		owner ACLOwner
		acls  []uint32
		want  []string
	}{
		{"services' ACLs on the uplink", Uplink, ACLServices, []uint32{7, 3}, []string{"acl_interface_set_acl_list 1 count=2 n_input=2 acls=[7 3]"}},
		{"the policies' go after them", Uplink, ACLPolicy, []uint32{9}, []string{"acl_interface_set_acl_list 1 count=3 n_input=3 acls=[7 3 9]"}},
		{"the same list again", Uplink, ACLServices, []uint32{7, 3}, nil},
		{"the first list of the interconnect is sent even empty", HostInterconnect, ACLServices, nil, []string{"acl_interface_set_acl_list 3 count=0 n_input=0 acls=[]"}},
		{"an empty list again", HostInterconnect, ACLServices, []uint32{}, nil},
		{"services remove theirs", Uplink, ACLServices, nil, []string{"acl_interface_set_acl_list 1 count=1 n_input=1 acls=[9]"}},
		{"the services' come back before the policies'", Uplink, ACLServices, []uint32{4}, []string{"acl_interface_set_acl_list 1 count=2 n_input=2 acls=[4 9]"}},
	}
	for _, s := range steps {
		if err := h.d.SetInterfaceACLs(ctx(t), inc, s.iface, s.owner, s.acls); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		wantLines(t, s.name, h.vpp.take(), s.want)
	}
	h.vpp.mu.Lock()
	lists := fmt.Sprint(h.vpp.aclLists)
	h.vpp.mu.Unlock()
	if lists != "map[1:[2 4 9] 3:[0]]" {
		t.Fatalf("VPP's ACL lists (n_input, acls) = %s", lists)
	}
	if err := h.d.SetInterfaceACLs(ctx(t), 0, Uplink, ACLServices, []uint32{1}); err == nil || !strings.Contains(err.Error(), "incarnation 0 is stale") {
		t.Fatalf("a stale incarnation: %v", err)
	}
	if err := h.d.SetInterfaceACLs(ctx(t), inc, Uplink, ACLOwner(9), []uint32{1}); err == nil {
		t.Fatal("an unknown owner was accepted")
	}
	if err := h.d.SetInterfaceACLs(ctx(t), inc, Uplink, ACLServices, make([]uint32, 255)); err == nil || !strings.Contains(err.Error(), "at most 255") {
		t.Fatalf("256 ACLs: %v", err)
	}
	if m := h.vpp.take(); len(m) != 0 {
		t.Fatalf("refused lists sent %v", m)
	}
}

func TestSetInterfaceACLsOnAMissingUplinkFails(t *testing.T) {
	h := start(t, testConfig())
	if err := h.d.SetInterfaceACLs(ctx(t), 1, Uplink, ACLServices, []uint32{1}); err == nil || !strings.Contains(err.Error(), "no uplink") {
		t.Fatalf("ACLs on a missing uplink: %v", err)
	}
}

// After a VPP restart: a new incarnation, announced on Resynced; the pods'
// roles and the service network are replayed, the ACL lists are not (their
// indexes died with VPP), and the old incarnation's lists are refused.
func TestRestartReplaysRolesAndServiceNetworkButNotACLs(t *testing.T) {
	h := start(t, testConfig())
	<-h.d.Resynced()
	if _, err := h.d.SetupPod(ctx(t), podB); err != nil {
		t.Fatal(err)
	}
	if err := h.d.SetPodNATRoles(ctx(t), []netip.Addr{podB.IPv4}); err != nil {
		t.Fatal(err)
	}
	if err := h.d.SetServiceNetwork(ctx(t), ServiceNetwork{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}, Source: netip.MustParseAddr("10.100.0.1"), Sinks: true}); err != nil {
		t.Fatal(err)
	}
	if err := h.d.SetInterfaceACLs(ctx(t), 1, HostInterconnect, ACLServices, []uint32{4}); err != nil {
		t.Fatal(err)
	}
	h.vpp.take()
	h.kernel.take()

	h.vpp.restart()
	select {
	case inc := <-h.d.Resynced():
		if inc != 2 {
			t.Fatalf("Resynced = %d, want incarnation 2", inc)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing on Resynced after the restart")
	}
	waitSynced(t, h, 101)
	got := h.vpp.take()
	i := slices.Index(got, `tap_create_v3 tag="vcoil@2 beef eth0" host_if="eth0" ns="/run/netns/pod-b"(true) mtu=1500(true) flags=16 random_mac=true queues=1/1 rings=256/256`)
	if i < 0 {
		t.Fatalf("pod B was not wired again:\n%s", strings.Join(got, "\n"))
	}
	wantLines(t, "the replay from pod B on", got[i:], slices.Concat([]string{
		`tap_create_v3 tag="vcoil@2 beef eth0" host_if="eth0" ns="/run/netns/pod-b"(true) mtu=1500(true) flags=16 random_mac=true queues=1/1 rings=256/256`,
		"sw_interface_set_unnumbered add=true 3 uses 1",
	}, sourceSetUp(3, "10.100.0.3", ""), []string{
		guardOnly(3),
		"sw_interface_set_flags 3 flags=1",
		"ip_route_add_del add=true 10.100.0.3/32 via 10.100.0.3 3",
		"nat44_ed_plugin_enable_disable enable=true sessions=0",
		"nat44_interface_add_del_feature add=true 3 flags=32",
		"nat44_interface_add_del_feature add=true 3 flags=0",
		"sw_interface_dump 3",
		"fib_source_dump", "ip_route_v2_dump src=8 table=0 ip6=false", "fib_source_dump", "ip_route_v2_dump src=8 table=0 ip6=true",
		"ip_route_add_del add=true 10.96.0.0/12 via 169.254.100.2 2",
		"ip_route_add_del add=true 10.100.0.1/32 via 169.254.100.2 2",
		"ip_route_add_del add=true 169.254.101.1/32 via 169.254.100.2 2",
		"ip_route_add_del add=true 169.254.101.2/32 drop",
	}))
	wantLines(t, "kernel calls of the replay", h.kernel.take(), []string{
		"SetUpHost",
		"ConfigurePod /run/netns/pod-b/eth0 10.100.0.3 invalid IP",
		"SyncServiceNetwork cidrs=[10.96.0.0/12] source=10.100.0.1 sinks=true",
	})
	// The owners' lists died with the old VPP: the pod has the guard only.
	h.vpp.mu.Lock()
	lists := fmt.Sprint(h.vpp.aclLists)
	h.vpp.mu.Unlock()
	if lists != "map[3:[2 100 101]]" {
		t.Fatalf("the replay set the ACL lists %s, want the pod guard's only", lists)
	}
	if err := h.d.SetInterfaceACLs(ctx(t), 1, HostInterconnect, ACLServices, []uint32{4}); err == nil {
		t.Fatal("the old incarnation's ACLs were accepted")
	}
	if err := h.d.SetInterfaceACLs(ctx(t), 2, HostInterconnect, ACLServices, []uint32{4}); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "the first list of the new incarnation", h.vpp.take(), []string{"acl_interface_set_acl_list 2 count=1 n_input=1 acls=[4]"})
}
