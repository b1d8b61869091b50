package formatgate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// Scan sorts what the checks found: newer state holds vcoild, a check that
// could not read does not.
func TestScanSeparatesNewerStateFromUnreadableState(t *testing.T) {
	newer := &formatversion.NewerError{Object: "table t", Found: 3, Known: 2}
	n, o := Scan(context.Background(), []Check{
		{Name: "fine", Run: func(context.Context) error { return nil }},
		{Name: "newer", Run: func(context.Context) error { return newer }},
		{Name: "unreadable", Run: func(context.Context) error { return errors.New("no nft binary") }},
	})
	if !errors.Is(n, formatversion.ErrNewer) || !strings.Contains(n.Error(), "table t") || strings.Contains(n.Error(), "nft binary") {
		t.Errorf("newer = %v", n)
	}
	if o == nil || errors.Is(o, formatversion.ErrNewer) || !strings.Contains(o.Error(), "unreadable: no nft binary") {
		t.Errorf("other = %v", o)
	}
	if n, o := Scan(context.Background(), nil); n != nil || o != nil {
		t.Errorf("no checks: %v %v", n, o)
	}
}

func TestCheckpointOfANewerFormatIsNewerAndAMissingOneIsNot(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pods")
	if err := Checkpoint(dir).Run(context.Background()); err != nil {
		t.Fatalf("a missing checkpoint: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the check made the directory: %v", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "c1-eth0.json"), []byte(`{"format":9,"containerID":"c1","ifName":"eth0"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	err := Checkpoint(dir).Run(context.Background())
	if !errors.Is(err, formatversion.ErrNewer) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("a newer entry: %v", err)
	}
}

// In a namespace: tables and link aliases of a newer format are found,
// those of the current and older formats (and strangers) are not.
func TestNFTablesAndLinkAliasesOfANewerFormat(t *testing.T) {
	netnstest.RequireRoot(t)
	n := netnstest.New(t, "gate")
	n.Exec("nft", "add table inet cur")
	n.Exec("nft", `add set inet cur format { type ipv4_addr; comment "vcoil services v2"; }`)
	n.Exec("nft", "add table inet old") // before format sets: version 1
	n.Exec("nft", "add table inet new")
	n.Exec("nft", `add set inet new format { type ipv4_addr; comment "vcoil policy v4"; }`)
	ctx := context.Background()
	tables := func(names ...string) []Table {
		var out []Table
		for _, name := range names {
			out = append(out, Table{Family: knftables.InetFamily, Name: name, Known: 2})
		}
		return out
	}
	if err := NFTables(n.Path(), tables("cur", "old", "missing")).Run(ctx); err != nil {
		t.Fatalf("current, older and missing tables: %v", err)
	}
	err := NFTables(n.Path(), tables("cur", "new")).Run(ctx)
	if !errors.Is(err, formatversion.ErrNewer) || !strings.Contains(err.Error(), "inet new") || !strings.Contains(err.Error(), "format version 4") {
		t.Fatalf("a newer table: %v", err)
	}

	n.IP("link", "add", "name", "d1", "type", "veth")
	n.IP("link", "set", "d1", "alias", "vcoil@2 c1 eth0")
	n.IP("link", "add", "name", "d2", "type", "veth")
	n.IP("link", "set", "d2", "alias", "someone else's")
	if err := LinkAliases(n.Path()).Run(ctx); err != nil {
		t.Fatalf("current and foreign aliases: %v", err)
	}
	n.IP("link", "add", "name", "d3", "type", "veth")
	n.IP("link", "set", "d3", "alias", "vcoil@5 c2 eth0")
	err = LinkAliases(n.Path()).Run(ctx)
	if !errors.Is(err, formatversion.ErrNewer) || !strings.Contains(err.Error(), "link d3") {
		t.Fatalf("a newer alias: %v", err)
	}
}
