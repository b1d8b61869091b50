package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/daemon"
)

// A downgrade: vcoild restarts on a node whose checkpoint holds a file
// of a newer format. It stays up without serving CNI requests, says why in
// its log and in /readyz (the formats check names the file and both
// versions), and leaves the file and the pod's wiring as they are.
func TestVcoildHoldsAndSaysWhyOnACheckpointOfANewerFormat(t *testing.T) {
	netnstest.RequireRoot(t)
	defaultPool(t)
	f := newFabric(t)
	n := newNode(t, f, 33)
	p := newPod(t, "fmt")
	n.mustAdd(p)
	n.kill()

	dir := filepath.Join(n.dir, "state", "pods")
	files, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var path string
	for _, fi := range files {
		if b, _ := os.ReadFile(filepath.Join(dir, fi.Name())); bytes.Contains(b, []byte(p.id)) {
			path = filepath.Join(dir, fi.Name())
		}
	}
	if path == "" {
		t.Fatalf("no checkpoint file of %s in %s", p.id, dir)
	}
	newer := []byte(fmt.Sprintf(`{"format":3,"containerID":%q,"ifName":"eth0","block":"whatever a newer vcoild writes"}`, p.id))
	if err := os.WriteFile(path, newer, 0o600); err != nil {
		t.Fatal(err)
	}
	veths := n.podVeths()

	n.launch()
	var body string
	poll.Eventually(t, 30*time.Second, func() error {
		var code int
		code, body = testenv.HTTPGet(n.health + "/readyz?verbose")
		if code == http.StatusOK || !strings.Contains(body, "[-]formats failed") {
			return fmt.Errorf("readiness %d: %s", code, body)
		}
		return nil
	})
	// controller-runtime withholds the reasons of failed checks; the log
	// has it.
	for _, want := range []string{path, "format version 3", "this vcoild's 2", "newer vcoild"} {
		if !strings.Contains(n.log.String(), want) {
			t.Errorf("the log lacks %q", want)
		}
	}
	// And on the Node, where `kubectl describe node` shows it.
	env.WaitForEvent(t, 20*time.Second, testenv.EventOf{Kind: "Node", Name: n.name, Type: "Warning",
		Reason: daemon.ReasonNewerStateFormat, Note: path})
	select {
	case <-n.exited:
		t.Fatal("vcoild exited instead of holding")
	case <-time.After(2 * time.Second):
	}
	// The killed vcoild's socket file is left; nothing answers on it.
	if c, err := net.Dial("unix", n.socket); err == nil {
		c.Close()
		t.Error("the CNI socket answers")
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, newer) {
		t.Errorf("the newer file changed: %s", got)
	}
	if got := n.podVeths(); strings.Join(got, " ") != strings.Join(veths, " ") || len(got) != 1 {
		t.Errorf("the node's pod veths went from %v to %v", veths, got)
	}
}
