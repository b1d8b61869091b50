package daemon

import (
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/pkg/checkpoint"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
)

// A dataplane that starts before the daemon (VPP) gets the checkpoint's
// pods with their namespaces and addresses; an unreadable entry is named and
// the others still come.
func TestAllocationsAreTheCheckpointsPods(t *testing.T) {
	stateDir := t.TempDir()
	store, err := checkpoint.Open(CheckpointDir(stateDir))
	if err != nil {
		t.Fatal(err)
	}
	e := checkpoint.Entry{
		ContainerID: "c1", IfName: "eth0", Netns: "/run/netns/p1", Namespace: "ns", Name: "p1",
		Pool: "default", Block: "default-0", Offset: 5,
		IPv4: netip.MustParseAddr("10.100.0.5"), IPv6: netip.MustParseAddr("fd00:100::5"), MTU: 1400,
		PortMappings: []checkpoint.PortMapping{{HostIP: netip.MustParseAddr("198.18.0.11"), HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}},
	}
	if err := store.Save(e); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(CheckpointDir(stateDir), "broken.json")
	if err := os.WriteFile(broken, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}

	pods, err := Allocations{StateDir: stateDir}.Pods()
	if err == nil || !strings.Contains(err.Error(), broken) {
		t.Errorf("Pods error = %v, want one naming %s", err, broken)
	}
	want := []dataplane.Pod{{
		PodKey: dataplane.PodKey{ContainerID: "c1", IfName: "eth0"}, Netns: "/run/netns/p1", Namespace: "ns", Name: "p1",
		IPv4: e.IPv4, IPv6: e.IPv6, MTU: 1400,
		PortMappings: []dataplane.PortMapping{{HostIP: netip.MustParseAddr("198.18.0.11"), HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}},
	}}
	if !reflect.DeepEqual(pods, want) {
		t.Fatalf("Pods = %+v\nwant %+v", pods, want)
	}
}
