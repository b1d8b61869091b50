package checkpoint

import (
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSaveGetLoadDelete(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := Entry{
		ContainerID: "abc/../weird id", IfName: "eth0", Netns: "/var/run/netns/x",
		Namespace: "ns", Name: "pod", Pool: "default", Block: "default-3", Offset: 7,
		IPv4: netip.MustParseAddr("10.0.0.7"), IPv6: netip.MustParseAddr("fd00::7"),
		PortMappings: []PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"},
			{HostIP: netip.MustParseAddr("198.18.0.11"), HostPort: 5353, ContainerPort: 53, Protocol: "udp"}},
		Created: time.Unix(1700000000, 0).UTC(),
	}
	if err := s.Save(e); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.Get(e.ContainerID, "eth0")
	if err != nil || !ok || !reflect.DeepEqual(got, e) {
		t.Fatalf("Get = %+v %v %v, want %+v", got, ok, err, e)
	}
	e.Offset = 8 // a second save replaces the first
	if err := s.Save(e); err != nil {
		t.Fatal(err)
	}
	all, err := s.Load()
	if err != nil || len(all) != 1 || all[0].Offset != 8 {
		t.Fatalf("Load = %+v, %v", all, err)
	}
	if _, ok, _ := s.Get(e.ContainerID, "eth1"); ok {
		t.Fatal("another interface of the container has an entry")
	}
	if err := s.Delete(e.ContainerID, "eth0"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(e.ContainerID, "eth0"); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if all, _ := s.Load(); len(all) != 0 {
		t.Fatalf("entries after delete: %+v", all)
	}
}

func TestLoadSkipsLeftoversAndReportsCorruptFiles(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(dir)
	_ = s.Save(Entry{ContainerID: "c1", IfName: "eth0", Pool: "p", Block: "p-0", Offset: 1})
	// A writer killed before its rename leaves a temporary file: Open
	// removes it. A file truncated by hand is reported, not fatal.
	if err := os.WriteFile(filepath.Join(dir, ".tmp-123"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "broken.json"), []byte("{\"containerID\":"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".tmp-123")); !os.IsNotExist(err) {
		t.Fatal("temporary leftover not removed")
	}
	all, err := s.Load()
	if len(all) != 1 || all[0].ContainerID != "c1" {
		t.Fatalf("Load = %+v", all)
	}
	if err == nil || !strings.Contains(err.Error(), "broken.json") {
		t.Fatalf("Load error = %v, want it to name broken.json", err)
	}
}

// The pod's source prefixes are an optional field: an entry without them is
// written without the field, and one with them reads back as it was.
func TestSourcePrefixesAreKept(t *testing.T) {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := Entry{ContainerID: "sp", IfName: "eth0", Pool: "default", Block: "default-0", Offset: 2, IPv4: netip.MustParseAddr("10.0.0.2"),
		SourcePrefixes: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24"), netip.MustParsePrefix("fd00:beef::/64")},
		Created:        time.Unix(1700000000, 0).UTC()}
	if err := s.Save(e); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.Get("sp", "eth0")
	if err != nil || !ok || !reflect.DeepEqual(got, e) {
		t.Fatalf("Get = %+v %v %v, want %+v", got, ok, err, e)
	}
	data, _ := os.ReadFile(filepath.Join(s.Dir(), fileName("sp", "eth0")))
	if !strings.Contains(string(data), `"sourcePrefixes":["198.51.100.0/24","fd00:beef::/64"]`) {
		t.Fatalf("file %s lacks the source prefixes", data)
	}
	e.ContainerID, e.SourcePrefixes = "plain", nil
	if err := s.Save(e); err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile(filepath.Join(s.Dir(), fileName("plain", "eth0")))
	if strings.Contains(string(data), "sourcePrefixes") {
		t.Fatalf("an entry without source prefixes was written with the field: %s", data)
	}
}
