package daemon

import (
	"context"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/pkg/checkpoint"
	"github.com/vcoil/vcoil/v2/pkg/cnicontract"
	"github.com/vcoil/vcoil/v2/pkg/cnirpc"
)

// A client of the socket that is not the vcoil binary may send a key the
// CNI library's skel would have refused. The ADD is refused before any
// address is taken, naming the field; the DEL of such a key has nothing to
// undo and succeeds.
func TestAMalformedKeyIsRefusedBeforeAnythingIsAllocated(t *testing.T) {
	ensureNode(t, "node-fc")
	dp := newFakeDataplane()
	n := startNode(t, "node-fc", t.TempDir(), dp)
	for _, c := range []struct {
		name, id, ifname, field string
	}{
		{"interface name over 15 characters", "k0000001", "eth0-much-too-long", "CNI_IFNAME"},
		{"interface name with a slash", "k0000002", "eth/0", "CNI_IFNAME"},
		{"interface name ..", "k0000003", "..", "CNI_IFNAME"},
		{"container ID with a slash", "k0000004/../x", "eth0", "CNI_CONTAINERID"},
		{"container ID with a space", "k00 5", "eth0", "CNI_CONTAINERID"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := n.args(c.id, "plain")
			args.Ifname = c.ifname
			_, err := n.srv.Add(context.Background(), args)
			if cniCode(err) != cnirpc.ErrorCode_INVALID_ENVIRONMENT_VARIABLES {
				t.Fatalf("ADD: %v, want INVALID_ENVIRONMENT_VARIABLES", err)
			}
			if msg := cnicontract.FromRPCError(err, 0).Msg; !strings.Contains(msg, c.field) {
				t.Fatalf("message %q does not name %s", msg, c.field)
			}
			if _, found, _ := n.srv.store.Get(c.id, c.ifname); found {
				t.Fatal("a refused ADD left a checkpoint entry")
			}
			for _, b := range n.ipam.Blocks() {
				if b.InUse != 0 {
					t.Fatalf("block %s has %d addresses in use after a refused ADD", b.Name, b.InUse)
				}
			}
			for i := 0; i < 2; i++ {
				if _, err := n.srv.Del(context.Background(), args); err != nil {
					t.Fatalf("DEL %d of the malformed key: %v", i, err)
				}
			}
			if _, err := n.srv.Check(context.Background(), args); cniCode(err) != cnirpc.ErrorCode_INVALID_ENVIRONMENT_VARIABLES {
				t.Fatalf("CHECK: %v, want INVALID_ENVIRONMENT_VARIABLES", err)
			}
		})
	}
}

// An older vcoild allocated and recorded malformed keys before it failed to
// wire them: their DEL frees the address and forgets the entry without
// asking the dataplane, which cannot hold such a key.
func TestDELOfARecordedMalformedKeyFreesItsAddress(t *testing.T) {
	ensureNode(t, "node-fc")
	dp := newFakeDataplane()
	n := startNode(t, "node-fc", t.TempDir(), dp)
	a, err := n.ipam.Allocate(context.Background(), "default")
	if err != nil {
		t.Fatal(err)
	}
	e := checkpoint.Entry{ContainerID: "k1000001", IfName: "eth0-much-too-long", Netns: n.netns, Namespace: "plain", Name: "pod-k1000001",
		Pool: a.Pool, Block: a.Block, Offset: a.Offset, IPv4: a.IPv4, IPv6: a.IPv6}
	if err := n.srv.store.Save(e); err != nil {
		t.Fatal(err)
	}
	args := n.args(e.ContainerID, "plain")
	args.Ifname = e.IfName
	if _, err := n.srv.Del(context.Background(), args); err != nil {
		t.Fatalf("DEL of a recorded malformed key: %v", err)
	}
	if _, found, _ := n.srv.store.Get(e.ContainerID, e.IfName); found {
		t.Fatal("the entry of the malformed key is still recorded")
	}
	for _, b := range n.ipam.Blocks() {
		if b.InUse != 0 {
			t.Fatalf("block %s has %d addresses in use after the DEL", b.Name, b.InUse)
		}
	}
}
