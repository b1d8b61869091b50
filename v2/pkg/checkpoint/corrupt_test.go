package checkpoint

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// A file that cannot be decoded is told apart from a newer one, keeps what
// its fields still say, and can be set aside, where Load no longer sees it
// and Corrupted lists it until it is removed.
func TestAFileThatCannotBeDecodedIsSetAsideWithWhatItStillSays(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	good := Entry{ContainerID: "good", IfName: "eth0", Pool: "default", Block: "default-0", Offset: 1, IPv4: netip.MustParseAddr("10.0.0.1")}
	if err := s.Save(good); err != nil {
		t.Fatal(err)
	}
	// The address field is damaged; the rest still reads.
	damaged := filepath.Join(s.Dir(), fileName("bad", "eth0"))
	if err := os.WriteFile(damaged, []byte(`{"format":2,"containerID":"bad","ifName":"eth0","netns":"/var/run/netns/cni-9","namespace":"ns","name":"web",`+
		`"pool":"default","block":"default-0","offset":3,"ipv4":"10.0.0.x3","created":"2026-01-01T00:00:00Z"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(s.Dir(), "0123456789abcdef0123456789abcdef.json")
	if err := os.WriteFile(garbage, []byte("\x00\x00{"), 0o600); err != nil {
		t.Fatal(err)
	}
	newer := filepath.Join(s.Dir(), fileName("newer", "eth0"))
	if err := os.WriteFile(newer, []byte(`{"format":3,"containerID":"newer","ifName":"eth0","block":"default-0"}`), 0o600); err != nil {
		t.Fatal(err)
	}

	_, _, err = s.Get("bad", "eth0")
	var ce *CorruptError
	if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) || ce.Path != damaged {
		t.Fatalf("Get of the damaged file = %v, want a CorruptError naming %s", err, damaged)
	}
	entries, corrupt, err := s.LoadAll()
	if !errors.Is(err, formatversion.ErrNewer) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("LoadAll error = %v, want the newer file only", err)
	}
	if len(entries) != 1 || entries[0].ContainerID != "good" {
		t.Fatalf("LoadAll entries = %+v", entries)
	}
	if len(corrupt) != 2 {
		t.Fatalf("LoadAll corrupt = %v, want the damaged and the garbage files", corrupt)
	}
	byPath := map[string]*CorruptError{}
	for _, c := range corrupt {
		byPath[c.Path] = c
	}
	p := byPath[damaged].Partial
	if p.ContainerID != "bad" || p.IfName != "eth0" || p.Netns != "/var/run/netns/cni-9" || p.Namespace != "ns" || p.Name != "web" ||
		p.Block != "default-0" || p.Offset != 3 || !byPath[damaged].HasOffset || p.IPv4.IsValid() {
		t.Fatalf("what the damaged file still says: %+v (offset known %v)", p, byPath[damaged].HasOffset)
	}
	if g := byPath[garbage]; g == nil || g.Partial.ContainerID != "" || g.HasOffset {
		t.Fatalf("the garbage file: %+v", g)
	}

	for _, c := range corrupt {
		aside, err := s.SetAside(c.Path)
		if err != nil {
			t.Fatal(err)
		}
		if aside != c.Path+CorruptSuffix {
			t.Fatalf("set aside as %s, want %s", aside, c.Path+CorruptSuffix)
		}
	}
	if _, found, err := s.Get("bad", "eth0"); found || err != nil {
		t.Fatalf("Get after setting aside = %v, %v; want nothing", found, err)
	}
	if _, corrupt, _ := s.LoadAll(); len(corrupt) != 0 {
		t.Fatalf("LoadAll still reports %v", corrupt)
	}
	aside, err := s.Corrupted()
	if err != nil || len(aside) != 2 {
		t.Fatalf("Corrupted = %v, %v", aside, err)
	}
	for _, c := range aside {
		if c.Path == damaged+CorruptSuffix && (c.Partial.ContainerID != "bad" || c.Partial.Block != "default-0") {
			t.Fatalf("the damaged file set aside says %+v", c.Partial)
		}
		if !strings.Contains(c.Error(), c.Path) {
			t.Fatalf("error %q does not name %s", c, c.Path)
		}
		if err := s.RemoveCorrupt(c.Path); err != nil {
			t.Fatal(err)
		}
	}
	if aside, _ := s.Corrupted(); len(aside) != 0 {
		t.Fatalf("Corrupted after removal = %v", aside)
	}
	if err := s.RemoveCorrupt(filepath.Join(s.Dir(), fileName("good", "eth0"))); err == nil {
		t.Fatal("RemoveCorrupt removed an entry that is not set aside")
	}
}
