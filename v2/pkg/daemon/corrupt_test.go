package daemon

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/pkg/checkpoint"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
)

// entryPath finds the checkpoint file of a key by its content: its name is
// the store's business.
func entryPath(t *testing.T, dir, containerID string) string {
	t.Helper()
	files, _ := os.ReadDir(dir)
	for _, f := range files {
		b, _ := os.ReadFile(filepath.Join(dir, f.Name()))
		if strings.Contains(string(b), `"containerID":"`+containerID+`"`) {
			return filepath.Join(dir, f.Name())
		}
	}
	t.Fatalf("no checkpoint file of %s in %s", containerID, dir)
	return ""
}

// damage replaces a file's IPv4 address with something that does not
// decode, leaving its other fields readable.
func damage(t *testing.T, path string, ipv4 netip.Addr) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := strings.Replace(string(b), `"ipv4":"`+ipv4.String()+`"`, `"ipv4":"`+ipv4.String()+`x"`, 1)
	if d == string(b) {
		t.Fatalf("%s has no ipv4 %s", b, ipv4)
	}
	if err := os.WriteFile(path, []byte(d), 0o600); err != nil {
		t.Fatal(err)
	}
}

func drainEvents(n *node) []string {
	var out []string
	for {
		select {
		case e := <-n.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func addrsInUse(n *node) int {
	total := 0
	for _, b := range n.ipam.Blocks() {
		total += b.InUse
	}
	return total
}

// Checkpoint files that cannot be decoded stop neither vcoild's start nor
// their pods' DEL: each is set aside and named in an Event; the address of
// a pod the file still tells is kept out of use until its DEL, and a pod
// the dataplane still holds is recovered from it.
func TestACheckpointFileThatCannotBeDecodedIsSetAsideAndItsAddressKept(t *testing.T) {
	ensureNode(t, "node-fc")
	state := t.TempDir()
	dp := newFakeDataplane()
	n := startNode(t, "node-fc", state, dp)
	for _, id := range []string{"q0000001", "q0000002", "q0000003"} {
		n.add(t, id, "plain")
	}
	e1, _, _ := n.srv.store.Get("q0000001", "eth0")
	e2, _, _ := n.srv.store.Get("q0000002", "eth0")
	// q1's and q2's files keep their keys and blocks but lose their IPv4
	// addresses; q3's is garbage. The dataplane still holds q1 and q2, not q3.
	p1, p2, p3 := entryPath(t, state, "q0000001"), entryPath(t, state, "q0000002"), entryPath(t, state, "q0000003")
	damage(t, p1, e1.IPv4)
	damage(t, p2, e2.IPv4)
	if err := os.WriteFile(p3, []byte("\x00\x00\x00"), 0o600); err != nil {
		t.Fatal(err)
	}
	delete(dp.pods, dataplane.PodKey{ContainerID: "q0000003", IfName: "eth0"})
	// q1's dataplane pod lost its address record too (as far as adoption
	// goes): only the file tells its address.
	k1 := dataplane.PodKey{ContainerID: "q0000001", IfName: "eth0"}
	p := dp.pods[k1]
	p.IPv4, p.IPv6 = netip.Addr{}, netip.Addr{}
	dp.pods[k1] = p

	// The agents read the checkpoint before the daemon starts: with the
	// files set aside first they do not fail on them.
	if err := os.Rename(state, state+"-pods"); err != nil {
		t.Fatal(err)
	}
	stateDir := t.TempDir()
	if err := os.Rename(state+"-pods", CheckpointDir(stateDir)); err != nil {
		t.Fatal(err)
	}
	set, err := SetAsideCorrupt(stateDir)
	if err != nil || len(set) != 3 {
		t.Fatalf("SetAsideCorrupt = %v, %v; want the three files", set, err)
	}
	if _, err := KnownPodAddresses(stateDir); err != nil {
		t.Fatalf("the agents' read after the files were set aside: %v", err)
	}
	state = CheckpointDir(stateDir)
	p1, p2, p3 = filepath.Join(state, filepath.Base(p1)), filepath.Join(state, filepath.Base(p2)), filepath.Join(state, filepath.Base(p3))

	n2 := startNode(t, "node-fc", state, dp)
	evs := strings.Join(drainEvents(n2), "\n")
	for _, f := range []string{p1, p2, p3} {
		if !strings.Contains(evs, filepath.Base(f)) {
			t.Errorf("no Event names %s:\n%s", filepath.Base(f), evs)
		}
	}
	if _, err := os.Stat(p1 + checkpoint.CorruptSuffix); err != nil {
		t.Fatalf("q1's file is not set aside: %v", err)
	}
	if _, ok := dp.pods[k1]; !ok {
		t.Fatal("recovery tore down q1, whose file is set aside")
	}
	// q2 is recovered from the dataplane: a new entry, the file removed.
	if got, found, err := n2.srv.store.Get("q0000002", "eth0"); err != nil || !found || got.IPv4 != e2.IPv4 {
		t.Fatalf("q2 after the restart: %+v %v %v, want it adopted with %s", got, found, err, e2.IPv4)
	}
	if _, err := os.Stat(p2 + checkpoint.CorruptSuffix); !os.IsNotExist(err) {
		t.Fatalf("q2's file set aside is still there once its pod was recovered: %v", err)
	}
	// q3's file tells nothing, and nothing is held for it: it stays for the
	// operator.
	if _, err := os.Stat(p3 + checkpoint.CorruptSuffix); err != nil {
		t.Fatalf("q3's file is not set aside: %v", err)
	}
	// q1's address is never given while q1 lives.
	for i := 0; i < 8; i++ {
		r := n2.add(t, fmt.Sprintf("q10000%02d", i), "plain")
		if r.IPs[0].Address.IP.String() == e1.IPv4.String() {
			t.Fatalf("q1's address %s was given to another pod", e1.IPv4)
		}
	}
	before := addrsInUse(n2)
	if _, err := n2.srv.Del(context.Background(), n2.args("q0000001", "plain")); err != nil {
		t.Fatalf("DEL of q1: %v", err)
	}
	if _, ok := dp.pods[k1]; ok {
		t.Fatal("DEL left q1 in the dataplane")
	}
	if _, err := os.Stat(p1 + checkpoint.CorruptSuffix); !os.IsNotExist(err) {
		t.Fatalf("q1's file set aside is still there after its DEL: %v", err)
	}
	if after := addrsInUse(n2); after != before-1 {
		t.Fatalf("%d addresses in use after q1's DEL, want %d", after, before-1)
	}
	for i := 0; i < 2; i++ {
		if _, err := n2.srv.Del(context.Background(), n2.args("q0000003", "plain")); err != nil {
			t.Fatalf("DEL %d of q3: %v", i, err)
		}
	}
}

// A file that breaks while vcoild runs does not fail its pod's DEL: the
// pod is torn down by its key, the address is freed when the file still
// tells it, and the file is named in an Event.
func TestDELOfAPodWhoseFileBrokeWhileRunningSucceeds(t *testing.T) {
	ensureNode(t, "node-fc")
	state := t.TempDir()
	dp := newFakeDataplane()
	n := startNode(t, "node-fc", state, dp)
	n.add(t, "r0000001", "plain")
	e, _, _ := n.srv.store.Get("r0000001", "eth0")
	path := entryPath(t, state, "r0000001")
	// The IPv6 address still tells which offset to free.
	damage(t, path, e.IPv4)
	drainEvents(n)
	before := addrsInUse(n)
	if _, err := n.srv.Del(context.Background(), n.args("r0000001", "plain")); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if _, ok := dp.pods[dataplane.PodKey{ContainerID: "r0000001", IfName: "eth0"}]; ok {
		t.Fatal("DEL left the pod in the dataplane")
	}
	if after := addrsInUse(n); after != before-1 {
		t.Fatalf("%d addresses in use after the DEL, want %d", after, before-1)
	}
	if evs := strings.Join(drainEvents(n), "\n"); !strings.Contains(evs, filepath.Base(path)) {
		t.Fatalf("no Event names %s:\n%s", filepath.Base(path), evs)
	}
	if _, err := n.srv.Del(context.Background(), n.args("r0000001", "plain")); err != nil {
		t.Fatalf("second DEL: %v", err)
	}
}
