package vpp

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.fd.io/govpp/api"
)

// The policy renderer's lists: a pod named by its address gets its lists
// when it is wired (before it is up and routed), a wired pod at once; the node
// interfaces' lists merge the services' input ACLs (first) with the
// policies' input and output ones; a batch is one call, each interface's list sent once.
func TestSetACLListsOnPodsAndNodeInterfaces(t *testing.T) {
	cfg := testConfig()
	cfg.Uplink = "host-up0"
	h := start(t, cfg, func(h *harness) { h.vpp.add(&fakeIf{name: "host-up0", mtu: 1500}) })
	h.vpp.take()
	const inc = 1
	podAddr := ACLInterface{Pod: podB.IPv4}
	if err := h.d.SetACLLists(ctx(t), inc, ACLPolicy, []ACLSetting{
		{Interface: podAddr, Lists: ACLLists{Input: []uint32{0}, Output: []uint32{5}}},
	}); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "lists of a pod that is not wired yet", h.vpp.take(), nil)
	if _, err := h.d.SetupPod(ctx(t), podB); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "the pod's wiring", h.vpp.take(), slices.Concat([]string{
		`tap_create_v3 tag="vcoil@2 beef eth0" host_if="eth0" ns="/run/netns/pod-b"(true) mtu=1500(true) flags=16 random_mac=true queues=1/1 rings=256/256`,
		"sw_interface_set_unnumbered add=true 4 uses 2",
	}, sourceSetUp(4, "10.100.0.3", ""), []string{
		"acl_interface_set_acl_list 4 count=3 n_input=2 acls=[100 0 5]", // the pod guard first
		"sw_interface_set_flags 4 flags=1",
		"ip_route_add_del add=true 10.100.0.3/32 via 10.100.0.3 4",
		"sw_interface_dump 4",
	}))

	if err := h.d.SetInterfaceACLs(ctx(t), inc, Uplink, ACLServices, []uint32{7}); err != nil {
		t.Fatal(err)
	}
	h.vpp.take()
	steps := []struct {
		name     string
		settings []ACLSetting
		want     []string
	}{
		{"the global table and the reflective ACL on the uplink, the reflective ACL behind the services' input ACL", []ACLSetting{
			{Interface: ACLInterface{Node: Uplink}, Lists: ACLLists{Input: []uint32{0}, Output: []uint32{1}}},
			{Interface: podAddr, Lists: ACLLists{Input: []uint32{0}, Output: []uint32{5}}},
		}, []string{"acl_interface_set_acl_list 1 count=3 n_input=2 acls=[7 0 1]"}},
		{"a new table for the pod: its output side only, the new ACL added before the old one goes", []ACLSetting{
			{Interface: podAddr, Lists: ACLLists{Input: []uint32{0}, Output: []uint32{6}}},
		}, []string{
			"acl_interface_add_del add=true input=false 4 acl=6",
			"acl_interface_add_del add=false input=false 4 acl=5",
		}},
		{"an output order VPP's own edits do not reach: the whole list", []ACLSetting{
			{Interface: podAddr, Lists: ACLLists{Input: []uint32{0}, Output: []uint32{8, 6}}},
		}, []string{"acl_interface_set_acl_list 4 count=4 n_input=2 acls=[100 0 8 6]"}},
		{"back to one output ACL", []ACLSetting{
			{Interface: podAddr, Lists: ACLLists{Input: []uint32{0}, Output: []uint32{6}}},
		}, []string{"acl_interface_add_del add=false input=false 4 acl=8"}},
		{"the pod is open again, the global table gone", []ACLSetting{
			{Interface: podAddr},
			{Interface: ACLInterface{Node: Uplink}},
		}, []string{
			"acl_interface_set_acl_list 4 count=2 n_input=2 acls=[100 101]", // the guard and its permit
			"acl_interface_set_acl_list 1 count=1 n_input=1 acls=[7]",
		}},
	}
	for _, s := range steps {
		if err := h.d.SetACLLists(ctx(t), inc, ACLPolicy, s.settings); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		wantLines(t, s.name, h.vpp.take(), s.want)
		h.vpp.mu.Lock()
		lists := map[uint32]string{}
		for sw, l := range h.vpp.aclLists {
			lists[sw] = fmt.Sprint(l)
		}
		h.vpp.mu.Unlock()
		want := map[uint32][]uint32{}
		for _, x := range s.settings {
			sw := uint32(4)
			if x.Interface.Node == Uplink {
				sw = 1
			}
			in, out := x.Lists.Input, x.Lists.Output
			switch {
			case sw == 1:
				in = append([]uint32{7}, in...)
			case len(in) == 0:
				in = []uint32{100, 101} // the pod guard and its permit
			default:
				in = append([]uint32{100}, in...) // the pod guard
			}
			want[sw] = append(append([]uint32{uint32(len(in))}, in...), out...)
		}
		for sw, l := range want {
			if got := lists[sw]; got != fmt.Sprint(l) {
				t.Fatalf("%s: VPP's list of interface %d (n_input, acls) = %s, want %v (all: %v)", s.name, sw, got, l, lists)
			}
		}
	}
	if err := h.d.SetInterfaceACLs(ctx(t), inc, Uplink, ACLServices, nil); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "the services' input ACL gone", h.vpp.take(), []string{"acl_interface_set_acl_list 1 count=0 n_input=0 acls=[]"})
	h.d.mu.Lock()
	_, kept := h.d.acls[podAddr]
	h.d.mu.Unlock()
	if kept {
		t.Fatal("the lists of a pod no owner restricts are kept")
	}

	for _, tc := range []struct {
		name     string
		settings []ACLSetting
		want     string
	}{
		{"256 ACLs on one interface, input and output together", []ACLSetting{{Interface: podAddr, Lists: ACLLists{Input: make([]uint32, 1), Output: make([]uint32, 255)}}}, "pod 10.100.0.3's interface: 257 ACLs (2 input with the pod guard's, 255 output), VPP takes at most 255"},
		{"an interface named twice", []ACLSetting{{Interface: podAddr}, {Interface: podAddr}}, "set twice in one batch"},
		{"neither a node interface nor a pod", []ACLSetting{{}}, "name a node interface or a pod's address"},
		{"both", []ACLSetting{{Interface: ACLInterface{Node: Uplink, Pod: podB.IPv4}}}, "name a node interface or a pod's address"},
	} {
		err := h.d.SetACLLists(ctx(t), inc, ACLPolicy, tc.settings)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if err := h.d.SetACLLists(ctx(t), 0, ACLPolicy, nil); err == nil || !strings.Contains(err.Error(), "incarnation 0 is stale") {
		t.Fatalf("a stale incarnation: %v", err)
	}
	wantLines(t, "refused batches", h.vpp.take(), nil)
}

// A list VPP refuses is sent again on the next call, and the others of
// the batch are sent.
func TestSetACLListsResendsARefusedList(t *testing.T) {
	h := start(t, testConfig())
	if _, err := h.d.SetupPod(ctx(t), podA); err != nil {
		t.Fatal(err)
	}
	if _, err := h.d.SetupPod(ctx(t), podB); err != nil {
		t.Fatal(err)
	}
	h.vpp.take()
	h.vpp.mu.Lock()
	h.vpp.failWhen = func(m api.Message) int32 {
		if strings.Contains(msgString(m), "acl_interface_set_acl_list 3 ") {
			return -6
		}
		return 0
	}
	h.vpp.mu.Unlock()
	set := []ACLSetting{
		{Interface: ACLInterface{Pod: podA.IPv6}, Lists: ACLLists{Output: []uint32{2}}},
		{Interface: ACLInterface{Pod: podB.IPv4}, Lists: ACLLists{Output: []uint32{3}}},
	}
	err := h.d.SetACLLists(ctx(t), 1, ACLPolicy, set)
	if err == nil || !strings.Contains(err.Error(), "pod fd00:100::2's interface (3)") {
		t.Fatalf("a refused list: %v", err)
	}
	// Pod A's lists were sent for its IPv4 address: those of its IPv6
	// address are sent whole.
	wantLines(t, "the batch", h.vpp.take(), []string{
		"acl_interface_set_acl_list 3 count=3 n_input=2 acls=[100 101 2]",
		"acl_interface_add_del add=true input=false 4 acl=3",
	})
	if err := h.d.SetACLLists(ctx(t), 1, ACLPolicy, set); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "the next call", h.vpp.take(), []string{"acl_interface_set_acl_list 3 count=3 n_input=2 acls=[100 101 2]"})
}
