package checkpoint

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// copyFixtures copies testdata/format1 (files the code wrote before format
// versions) into a fresh directory.
func copyFixtures(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files, err := os.ReadDir("testdata/format1")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join("testdata/format1", f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// The entries of the format 1 fixtures, as they were saved.
var format1Entries = []Entry{
	{ContainerID: "4f1d2c3b5a6978e0d1c2b3a4f5e6d7c8b9a0f1e2d3c4b5a6978e0d1c2b3a4f5e", IfName: "eth0", Netns: "/var/run/netns/cni-1234", Namespace: "default", Name: "web-0",
		Pool: "default", Block: "default-3", Offset: 7, IPv4: netip.MustParseAddr("10.100.0.7"), IPv6: netip.MustParseAddr("fd00:100::7"), MTU: 1450,
		PortMappings: []PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}, {HostIP: netip.MustParseAddr("198.18.0.11"), HostPort: 5353, ContainerPort: 53, Protocol: "udp"}},
		Created:      time.Unix(1764100000, 0).UTC()},
	{ContainerID: "c0ffee", IfName: "eth0", Netns: "/var/run/netns/cni-5678", Namespace: "kube-system", Name: "dns-1",
		Pool: "default", Block: "default-0", Offset: 2, IPv4: netip.MustParseAddr("10.100.0.2"), Created: time.Unix(1764100100, 0).UTC()},
}

func TestFilesOfFormat1AreReadAsTheyWereWrittenAndRewrittenWithTheirFormat(t *testing.T) {
	dir := copyFixtures(t)
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	all, err := s.Load()
	if err != nil {
		t.Fatalf("Load of format 1 files: %v", err)
	}
	byID := map[string]Entry{}
	for _, e := range all {
		byID[e.ContainerID] = e
	}
	for _, want := range format1Entries {
		if got := byID[want.ContainerID]; !reflect.DeepEqual(got, want) {
			t.Errorf("entry of %s:\n got %+v\nwant %+v", want.ContainerID, got, want)
		}
		// The file names are derived from the keys as before.
		if _, err := os.Stat(filepath.Join(dir, fileName(want.ContainerID, want.IfName))); err != nil {
			t.Errorf("format 1 file of %s not found under today's name: %v", want.ContainerID, err)
		}
	}
	if len(all) != len(format1Entries) {
		t.Fatalf("Load = %d entries, want %d", len(all), len(format1Entries))
	}
	// A save rewrites the entry in the current format, with the same
	// content.
	if err := s.Save(format1Entries[1]); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, fileName("c0ffee", "eth0")))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte(`{"format":2,"containerID":"c0ffee",`)) {
		t.Fatalf("saved file = %s, want it to start with its format", data)
	}
	got, ok, err := s.Get("c0ffee", "eth0")
	if err != nil || !ok || !reflect.DeepEqual(got, format1Entries[1]) {
		t.Fatalf("Get after the save = %+v %v %v", got, ok, err)
	}
}

func TestAFileOfANewerFormatIsRefusedByNameAndNeverChanged(t *testing.T) {
	dir := copyFixtures(t)
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, fileName("c0ffee", "eth0"))
	// A newer vcoild's file, whose entry may not even decode as today's.
	newer := []byte(`{"format":3,"containerID":"c0ffee","ifName":"eth0","block":{"name":"default-0","v":3}}`)
	if err := os.WriteFile(path, newer, 0o600); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	checkRefusal := func(what string, err error) {
		t.Helper()
		var ne *formatversion.NewerError
		if !errors.Is(err, formatversion.ErrNewer) || !errors.As(err, &ne) || ne.Found != 3 || ne.Known != formatversion.Checkpoint {
			t.Fatalf("%s: error %v, want a refusal of format 3", what, err)
		}
		for _, want := range []string{path, "format version 3", "this vcoild's 2"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("%s: error %q lacks %q", what, err, want)
			}
		}
	}
	all, err := s.Load()
	checkRefusal("Load", err)
	if len(all) != 1 || all[0].ContainerID != format1Entries[0].ContainerID {
		t.Fatalf("Load returned %+v, want the other, readable entry", all)
	}
	_, _, err = s.Get("c0ffee", "eth0")
	checkRefusal("Get", err)
	checkRefusal("Save", s.Save(format1Entries[1]))
	checkRefusal("Delete", s.Delete("c0ffee", "eth0"))
	after, err := os.Stat(path)
	if err != nil {
		t.Fatalf("the newer file is gone: %v", err)
	}
	data, _ := os.ReadFile(path)
	if !bytes.Equal(data, newer) || !after.ModTime().Equal(before.ModTime()) {
		t.Fatalf("the newer file changed: %s", data)
	}
}
