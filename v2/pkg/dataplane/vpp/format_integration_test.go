package vpp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	interfaces "go.fd.io/govpp/binapi/interface"
	"go.fd.io/govpp/binapi/interface_types"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vpptest"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

type checkpointPods []dataplane.Pod

func (c checkpointPods) Pods() ([]dataplane.Pod, error) { return c, nil }

// tags dumps VPP's interface tags by sw_if_index, through d.
func tags(ctx context.Context, t *testing.T, d vpp.Dataplane) map[uint32]string {
	t.Helper()
	ch, _, err := d.Channel(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	out := map[uint32]string{}
	err = vppapi.Dump(ch, &interfaces.SwInterfaceDump{SwIfIndex: ^interface_types.InterfaceIndex(0)},
		func() *interfaces.SwInterfaceDetails { return &interfaces.SwInterfaceDetails{} },
		func(m *interfaces.SwInterfaceDetails) { out[uint32(m.SwIfIndex)] = m.Tag })
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The upgrade on a real VPP (VCOIL_VPP_BIN): a vcoild before format
// versions tagged the node's and the pods' interfaces in format 1 (made
// here by re-tagging them so); the new vcoild adopts them: the same
// interfaces, now tagged in format 2, and a TCP connection held between
// the pods carries data across the upgrade.
func TestRealVPPAdoptsFormat1TagsWithoutDisturbingTraffic(t *testing.T) {
	netnstest.RequireRoot(t)
	bin := vpptest.Binary(t)
	typ := vpp.InterfaceType(vpptest.PodInterface())
	node := netnstest.New(t, "vppfmt")
	netnstest.Veth(t, node, "vppup", node, "vppup-peer")
	v := vpptest.Start(t, bin, node.Path(), "create host-interface name vppup")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a, b := netnstest.New(t, "pod-a"), netnstest.New(t, "pod-b")
	pods := checkpointPods{
		{PodKey: dataplane.PodKey{ContainerID: "vpp-fmt-a", IfName: "eth0"}, Netns: a.Path(), IPv4: netip.MustParseAddr("10.100.0.2")},
		{PodKey: dataplane.PodKey{ContainerID: strings.Repeat("0123456789abcdef", 4), IfName: "eth0"}, Netns: b.Path(), IPv4: netip.MustParseAddr("10.100.0.3")},
	}
	newDriver := func(allocated checkpointPods) vpp.Dataplane {
		d, err := vpp.New(vpp.Config{
			APISocket: v.APISocket, NodeNetns: node.Path(), PodInterface: typ, Uplink: "host-vppup",
			PingInterval: 200 * time.Millisecond, ReadyWait: 30 * time.Second, Allocations: allocated,
		}, testr.New(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Init(ctx); err != nil {
			t.Fatalf("Init: %v", err)
		}
		return d
	}
	old := newDriver(nil)
	if err := old.Blocks().Sync(ctx, []netip.Prefix{netip.MustParsePrefix("10.100.0.0/29")}); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if _, err := old.SetupPod(ctx, p); err != nil {
			t.Fatalf("SetupPod %s: %v", p.ContainerID, err)
		}
	}
	b.ServeTCPEcho(":8080")
	if err := echo(ctx, a, "10.100.0.3:8080"); err != nil {
		t.Fatal(err)
	}
	held, err := a.Dial(ctx, "tcp", "10.100.0.3:8080")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	roundTrip := func(when string) {
		t.Helper()
		_ = held.SetDeadline(time.Now().Add(5 * time.Second))
		msg := "held connection " + when
		if _, err := held.Write([]byte(msg)); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(held, buf); err != nil || string(buf) != msg {
			t.Fatalf("%s: echo %q, %v", when, buf, err)
		}
	}
	roundTrip("before the upgrade")

	// What a vcoild before format versions left: the same objects, its
	// tags (the fixture's forms, testdata/format1/tags.tsv).
	current := tags(ctx, t, old)
	ch, _, err := old.Channel(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	format1 := map[uint32]string{}
	for sw, tag := range current {
		first, rest, _ := strings.Cut(tag, " ")
		if !strings.HasPrefix(first, "vcoil") || !strings.HasSuffix(first, "@2") {
			continue
		}
		old := strings.TrimSuffix(first, "@2")
		if rest != "" {
			old += " " + rest
		}
		format1[sw] = old
		if err := vppapi.Call(ch, &interfaces.SwInterfaceTagAddDel{IsAdd: true, SwIfIndex: interface_types.InterfaceIndex(sw), Tag: old}, &interfaces.SwInterfaceTagAddDelReply{}); err != nil {
			t.Fatal(err)
		}
	}
	ch.Close()
	old.Close()
	if len(format1) != 4 {
		t.Fatalf("re-tagged %v, want the loopback, the interconnect and the two pods", format1)
	}
	for _, want := range []string{"vcoil-loopback", "vcoil-host", "vcoil vpp-fmt-a eth0", "vcoil64 ASNFZ4mrze8BI0VniavN7wEjRWeJq83vASNFZ4mrze8 eth0"} {
		found := false
		for _, tag := range format1 {
			found = found || tag == want
		}
		if !found {
			t.Fatalf("no interface tagged %q in format 1: %v", want, format1)
		}
	}
	roundTrip("with format 1 tags")

	upgraded := newDriver(pods)
	t.Cleanup(upgraded.Close)
	roundTrip("after the upgrade")
	if err := echo(ctx, a, "10.100.0.3:8080"); err != nil {
		t.Fatalf("a new connection after the upgrade: %v", err)
	}
	after := tags(ctx, t, upgraded)
	for sw, tag := range current {
		if after[sw] != tag {
			t.Errorf("interface %d: tag %q after the upgrade, want %q (the same interface, re-tagged)", sw, after[sw], tag)
		}
	}
	for _, p := range pods {
		if err := upgraded.CheckPod(ctx, p); err != nil {
			t.Errorf("CheckPod %s after the upgrade: %v", p.ContainerID, err)
		}
	}
}

// vcoild reads VPP's tags before any of its parts starts
// (vpp.NewerObjects), on a real VPP (VCOIL_VPP_BIN): with the NAT44 plugin
// off and no vcoil object, nothing is newer; an interface a newer vcoild
// tagged is refused as a newer format, naming it.
func TestRealVPPNewerObjectsFindsANewerTag(t *testing.T) {
	netnstest.RequireRoot(t)
	bin := vpptest.Binary(t)
	for _, tc := range []struct {
		name  string
		cli   []string
		newer bool
	}{
		{"a VPP without vcoil's objects", []string{"create loopback interface"}, false},
		{"an interface tagged by a newer vcoild", []string{"create loopback interface", "set interface tag loop0 vcoil@3"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := netnstest.New(t, "vppnewer")
			v := vpptest.Start(t, bin, node.Path(), tc.cli...)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if !tc.newer {
				if err := vpp.NewerObjects(ctx, v.APISocket, 0); err != nil {
					t.Fatalf("NewerObjects: %v", err)
				}
				return
			}
			// VPP runs its startup CLI after its API socket answers: wait
			// for the tag rather than race it.
			poll.Eventually(t, 20*time.Second, func() error {
				err := vpp.NewerObjects(ctx, v.APISocket, 0)
				if !errors.Is(err, formatversion.ErrNewer) || !strings.Contains(err.Error(), `(loop0), tag "vcoil@3"`) {
					return fmt.Errorf("NewerObjects = %v, want the loopback's newer tag", err)
				}
				return nil
			})
		})
	}
}
