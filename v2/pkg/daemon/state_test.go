package daemon

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/pkg/checkpoint"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/ipam"
	"github.com/vcoil/vcoil/v2/pkg/nodestate"
)

// stateIPAM is node IPAM as the node state reads it: its subnet, NAT
// loopback and blocks. The state never allocates.
type stateIPAM struct {
	AddressManager
	subnet   ipam.Block
	loopback ipam.NATLoopback
	blocks   []ipam.BlockUsage
}

func (f stateIPAM) NodeSubnet() ipam.Block                { return f.subnet }
func (f stateIPAM) NATLoopback() ipam.NATLoopback         { return f.loopback }
func (f stateIPAM) Blocks() []ipam.BlockUsage             { return f.blocks }
func (f stateIPAM) Ready() error                          { return nil }
func (f stateIPAM) Lookup(netip.Addr) (string, int, bool) { return "", 0, false }

type interfaceLister map[dataplane.PodKey]nodestate.Interface

func (l interfaceLister) PodInterfaces(context.Context) (map[dataplane.PodKey]nodestate.Interface, error) {
	return l, nil
}

func TestStateSourceFillsSubnetBlocksAndPodsAndInterfaces(t *testing.T) {
	p := netip.MustParsePrefix
	a := netip.MustParseAddr
	im := stateIPAM{
		subnet:   ipam.Block{IPv4: p("10.60.0.0/29"), IPv6: p("fd00:60::/125")},
		loopback: ipam.NATLoopback{IPv4: a("10.60.0.6"), IPv6: a("fd00:60::6")},
		blocks: []ipam.BlockUsage{
			{Pool: "default", Name: "default-0", Block: ipam.Block{IPv4: p("10.60.0.0/29"), IPv6: p("fd00:60::/125")}, NodeSubnet: true, InUse: 3, Free: 4},
			{Pool: "public", Name: "public-2", Index: 2, Block: ipam.Block{IPv4: p("203.0.113.8/30")}, Draining: true, InUse: 1, Free: 3},
		},
	}
	dir := t.TempDir()
	store, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 11, 26, 2, 0, 0, 0, time.UTC)
	for _, e := range []checkpoint.Entry{
		{ContainerID: "c2", IfName: "eth0", Netns: "/var/run/netns/b", Namespace: "dmz", Name: "gw", Pool: "public", Block: "public-2", Offset: 1, IPv4: a("203.0.113.9"), Created: created},
		{ContainerID: "c1", IfName: "eth0", Netns: "/var/run/netns/a", Namespace: "default", Name: "web", Pool: "default", Block: "default-0", Offset: 1, IPv4: a("10.60.0.1"), IPv6: a("fd00:60::1"), Created: created},
		{ContainerID: "c3", IfName: "net1", Namespace: "default", Name: "web", Pool: "default", Block: "default-0", Offset: 2, IPv4: a("10.60.0.2"), Created: created},
	} {
		if err := store.Save(e); err != nil {
			t.Fatal(err)
		}
	}
	srv := NewServer(Config{IPAM: im, Store: store, NodeName: "node1"})
	veth := nodestate.Interface{Kind: "veth", Name: "vcoil0123456789", Index: 12}
	lister := interfaceLister{
		{ContainerID: "c1", IfName: "eth0"}: veth,
		{ContainerID: "c2", IfName: "eth0"}: {Kind: "veth", Name: "vcoil9876543210", Index: 13},
		// A dataplane interface without a checkpoint entry is not a pod
		// vcoild gave an address to.
		{ContainerID: "c9", IfName: "eth0"}: {Kind: "veth", Name: "vcoilffffffffff", Index: 14},
	}
	st := &nodestate.State{}
	if err := srv.StateSource().Fill(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	err = PodInterfaces(lister).Fill(context.Background(), st)
	if err == nil || err.Error() != "the dataplane holds no interface for 1 pods: default/web (c3/net1)" {
		t.Errorf("interfaces error = %v, want the pod without an interface named", err)
	}
	want := &nodestate.State{
		NodeSubnet:  []netip.Prefix{p("10.60.0.0/29"), p("fd00:60::/125")},
		NATLoopback: []netip.Addr{a("10.60.0.6"), a("fd00:60::6")},
		Blocks: []nodestate.Block{
			{Name: "default-0", Pool: "default", Prefixes: []netip.Prefix{p("10.60.0.0/29"), p("fd00:60::/125")}, NodeSubnet: true, InUse: 3, Free: 4},
			{Name: "public-2", Pool: "public", Prefixes: []netip.Prefix{p("203.0.113.8/30")}, Draining: true, InUse: 1, Free: 3},
		},
		Pods: []nodestate.Pod{
			{Namespace: "default", Name: "web", ContainerID: "c1", IfName: "eth0", Netns: "/var/run/netns/a", IPs: []netip.Addr{a("10.60.0.1"), a("fd00:60::1")},
				Pool: "default", Block: "default-0", Interface: &veth, Created: created},
			{Namespace: "default", Name: "web", ContainerID: "c3", IfName: "net1", IPs: []netip.Addr{a("10.60.0.2")},
				Pool: "default", Block: "default-0", Created: created},
			{Namespace: "dmz", Name: "gw", ContainerID: "c2", IfName: "eth0", Netns: "/var/run/netns/b", IPs: []netip.Addr{a("203.0.113.9")},
				Pool: "public", Block: "public-2", Interface: &nodestate.Interface{Kind: "veth", Name: "vcoil9876543210", Index: 13}, Created: created},
		},
	}
	if !reflect.DeepEqual(st, want) {
		t.Errorf("state:\n got %+v\nwant %+v", st, want)
	}
}

// An unreadable checkpoint entry is named in the error; the other pods are
// served all the same.
func TestStateSourceServesReadablePodsWithAnUnreadableEntry(t *testing.T) {
	dir := t.TempDir()
	store, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Save(checkpoint.Entry{ContainerID: "c1", IfName: "eth0", Pool: "default", Block: "default-0", IPv4: netip.MustParseAddr("10.60.0.1")}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "0123.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := NewServer(Config{IPAM: stateIPAM{}, Store: store})
	st := &nodestate.State{}
	err = srv.StateSource().Fill(context.Background(), st)
	if err == nil || !strings.Contains(err.Error(), "0123.json") || !strings.Contains(err.Error(), dir) {
		t.Errorf("error = %v, want one naming the unreadable file", err)
	}
	if len(st.Pods) != 1 || st.Pods[0].ContainerID != "c1" {
		t.Errorf("pods = %+v, want the readable entry", st.Pods)
	}
	if st.NodeSubnet != nil || st.NATLoopback != nil || st.Blocks != nil {
		t.Errorf("a node without a subnet has %+v", st)
	}
}
