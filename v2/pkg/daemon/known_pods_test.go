package daemon

import (
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/vcoil/vcoil/v2/pkg/checkpoint"
)

// The agents' first view of the node's pods comes from the checkpoint:
// the policy agent gets every named pod's addresses (two entries of one
// pod merged, each address once), the egress agent the pods that name
// their netns. A file of a newer format is the daemon's to report, not a
// reason for the agents to fail.
func TestKnownPodsComeFromTheCheckpoint(t *testing.T) {
	stateDir := t.TempDir()
	store, err := checkpoint.Open(CheckpointDir(stateDir))
	if err != nil {
		t.Fatal(err)
	}
	a4, a6 := netip.MustParseAddr("10.1.0.2"), netip.MustParseAddr("fd00:1::2")
	b4 := netip.MustParseAddr("10.1.0.3")
	for _, e := range []checkpoint.Entry{
		{ContainerID: "a1", IfName: "eth0", Netns: "/var/run/netns/a", Namespace: "ns", Name: "a", Block: "default-0", IPv4: a4, IPv6: a6},
		// A second interface of pod a, sharing an address with the first.
		{ContainerID: "a1", IfName: "net1", Namespace: "ns", Name: "a", Block: "default-0", IPv4: a4},
		{ContainerID: "b1", IfName: "eth0", Netns: "/var/run/netns/b", Namespace: "ns", Name: "b", Block: "default-0", IPv4: b4},
		// An ADD without the pod's name (an older runtime): no pod to key.
		{ContainerID: "c1", IfName: "eth0", Netns: "/var/run/netns/c", Block: "default-0", IPv4: netip.MustParseAddr("10.1.0.4")},
	} {
		if err := store.Save(e); err != nil {
			t.Fatal(err)
		}
	}
	newer := []byte(`{"format":99,"containerID":"d1","ifName":"eth0","block":"default-0","name":"d","namespace":"ns"}`)
	if err := os.WriteFile(filepath.Join(CheckpointDir(stateDir), "newer.json"), newer, 0o600); err != nil {
		t.Fatal(err)
	}

	addrs, err := KnownPodAddresses(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	wantAddrs := map[types.NamespacedName][]netip.Addr{a: {a4, a6}, b: {b4}}
	if !reflect.DeepEqual(addrs, wantAddrs) {
		t.Errorf("KnownPodAddresses = %v, want %v", addrs, wantAddrs)
	}

	pods, err := KnownPodNetns(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	wantPods := map[types.NamespacedName]KnownPod{
		a: {Netns: "/var/run/netns/a", IPs: []netip.Addr{a4, a6}},
		b: {Netns: "/var/run/netns/b", IPs: []netip.Addr{b4}},
	}
	if !reflect.DeepEqual(pods, wantPods) {
		t.Errorf("KnownPodNetns = %v, want %v", pods, wantPods)
	}
}

// A checkpoint file that cannot be read fails the agents' start: they
// would otherwise drop the rules of pods they do not know.
func TestKnownPodsFailOnABrokenCheckpoint(t *testing.T) {
	stateDir := t.TempDir()
	if err := os.MkdirAll(CheckpointDir(stateDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(CheckpointDir(stateDir), "broken.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := KnownPodAddresses(stateDir); err == nil {
		t.Error("KnownPodAddresses read a broken checkpoint without an error")
	}
	if _, err := KnownPodNetns(stateDir); err == nil {
		t.Error("KnownPodNetns read a broken checkpoint without an error")
	}
}
