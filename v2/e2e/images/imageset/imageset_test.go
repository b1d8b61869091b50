package imageset

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/e2e/images/imageset/imagesettest"
)

func TestWriteLayerHoldsEntriesAndTheirParentDirectories(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "prog")
	if err := os.WriteFile(src, []byte("binary"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := WriteLayer(filepath.Join(dir, "l.tar"), []Entry{
		{Path: "/bin/busybox", Source: src},
		{Path: "/bin/sh", Type: Symlink, Target: "busybox"},
		{Path: "/etc/passwd", Data: []byte("root:x:0:0::/:/bin/sh\n"), Mode: 0o644},
		{Path: "/tmp", Type: Dir, Mode: 0o777 | os.ModeSticky},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(l.DiffID, "sha256:") || l.Size == 0 {
		t.Errorf("layer %+v: want a digest and a size", l)
	}
	hdrs, data := imagesettest.FileEntries(t, l.Path)
	for name, want := range map[string]struct {
		typ  byte
		mode int64
	}{
		"bin/":        {tar.TypeDir, 0o755},
		"etc/":        {tar.TypeDir, 0o755},
		"bin/busybox": {tar.TypeReg, 0o755},
		"bin/sh":      {tar.TypeSymlink, 0o777},
		"etc/passwd":  {tar.TypeReg, 0o644},
		"tmp/":        {tar.TypeDir, 0o1777},
	} {
		h, ok := hdrs[name]
		if !ok {
			t.Errorf("no entry %s (have %v)", name, hdrs)
			continue
		}
		if h.Typeflag != want.typ || h.Mode != want.mode {
			t.Errorf("%s: type %c mode %o, want %c %o", name, h.Typeflag, h.Mode, want.typ, want.mode)
		}
	}
	if string(data["bin/busybox"]) != "binary" || hdrs["bin/sh"].Linkname != "busybox" {
		t.Errorf("busybox %q, sh -> %q", data["bin/busybox"], hdrs["bin/sh"].Linkname)
	}
}

func TestWriteLayerRefusesBadPaths(t *testing.T) {
	for name, entries := range map[string][]Entry{
		"a relative path":            {{Path: "bin/sh", Data: []byte("x")}},
		"a path given twice":         {{Path: "/a", Data: []byte("x")}, {Path: "/a", Data: []byte("y")}},
		"an unclean path":            {{Path: "/a/../b", Data: []byte("x")}},
		"a file inside a file":       {{Path: "/a", Data: []byte("x")}, {Path: "/a/b", Data: []byte("y")}},
		"a symbolic link to nothing": {{Path: "/a", Type: Symlink}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := WriteLayer(filepath.Join(t.TempDir(), "l.tar"), entries); err == nil {
				t.Error("want an error")
			}
		})
	}
}

func TestWriteDirLayerKeepsLinksAndLeavesOutSkippedPaths(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"usr/bin", "usr/share/doc/curl", "dev"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "usr/bin/perl"), []byte("perl"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(root, "usr/bin/perl"), filepath.Join(root, "usr/bin/perl5")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("usr/bin", filepath.Join(root, "bin")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "usr/share/doc/curl/README"), []byte("doc"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "usr/bin/perl"), 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}

	l, err := WriteDirLayer(filepath.Join(t.TempDir(), "rootfs.tar"), root, func(p string) bool { return p == "/usr/share/doc" })
	if err != nil {
		t.Fatal(err)
	}
	hdrs, data := imagesettest.FileEntries(t, l.Path)
	if h := hdrs["bin"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "usr/bin" {
		t.Errorf("bin: %+v, want a symbolic link to usr/bin", h)
	}
	perl, perl5 := hdrs["usr/bin/perl"], hdrs["usr/bin/perl5"]
	if perl == nil || perl5 == nil {
		t.Fatalf("perl %v perl5 %v: want both", perl, perl5)
	}
	// Walked in lexical order: perl is the file, perl5 the hard link to it.
	if perl.Typeflag != tar.TypeReg || string(data["usr/bin/perl"]) != "perl" || perl.Mode != 0o4755 {
		t.Errorf("perl: type %c mode %o data %q, want a set-uid file", perl.Typeflag, perl.Mode, data["usr/bin/perl"])
	}
	if perl5.Typeflag != tar.TypeLink || perl5.Linkname != "usr/bin/perl" {
		t.Errorf("perl5: type %c -> %q, want a hard link to usr/bin/perl", perl5.Typeflag, perl5.Linkname)
	}
	for name := range hdrs {
		if strings.HasPrefix(name, "usr/share/doc") {
			t.Errorf("%s was not left out", name)
		}
	}
	if _, ok := hdrs["usr/share/"]; !ok {
		t.Error("usr/share/ is missing: only what skip names is left out")
	}
}

func TestWriteArchiveStoresSharedLayersOnceAndNamesEveryTag(t *testing.T) {
	dir := t.TempDir()
	base, err := WriteLayer(filepath.Join(dir, "base.tar"), []Entry{{Path: "/bin/sh", Data: []byte("sh")}})
	if err != nil {
		t.Fatal(err)
	}
	top, err := WriteLayer(filepath.Join(dir, "top.tar"), []Entry{{Path: "/agnhost", Data: []byte("agnhost")}})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	err = WriteArchive(&buf, []Image{
		{Tags: []string{"registry.k8s.io/e2e-test-images/agnhost:2.66.1"}, Layers: []Layer{base, top}, Entrypoint: []string{"/agnhost"}},
		{Tags: []string{"registry.k8s.io/e2e-test-images/nginx:1.27.0-2", "registry.k8s.io/e2e-test-images/nginx:1.28.0-2"}, Layers: []Layer{base}},
		{Tags: []string{"example.test/same-as-nginx:1"}, Layers: []Layer{base}},
	})
	if err != nil {
		t.Fatal(err)
	}
	hdrs, data := imagesettest.Entries(t, &buf)
	var manifest []manifestEntry
	if err := json.Unmarshal(data["manifest.json"], &manifest); err != nil {
		t.Fatal(err)
	}
	if len(manifest) != 3 {
		t.Fatalf("manifest has %d images, want 3", len(manifest))
	}
	layerFiles := 0
	for name := range hdrs {
		if strings.HasSuffix(name, "/layer.tar") {
			layerFiles++
		}
	}
	if layerFiles != 2 {
		t.Errorf("%d layer files, want 2 (the base layer once)", layerFiles)
	}
	if got := manifest[1].RepoTags; len(got) != 2 || got[1] != "registry.k8s.io/e2e-test-images/nginx:1.28.0-2" {
		t.Errorf("nginx tags %v", got)
	}
	for _, m := range manifest {
		if _, ok := data[m.Config]; !ok {
			t.Errorf("config %s of %v is missing", m.Config, m.RepoTags)
		}
		for _, l := range m.Layers {
			if _, ok := data[l]; !ok {
				t.Errorf("layer %s of %v is missing", l, m.RepoTags)
			}
		}
	}
	var cfg imageConfig
	if err := json.Unmarshal(data[manifest[0].Config], &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.RootFS.DiffIDs) != 2 || cfg.RootFS.DiffIDs[0] != base.DiffID || cfg.RootFS.DiffIDs[1] != top.DiffID {
		t.Errorf("agnhost's diff IDs %v, want base then top", cfg.RootFS.DiffIDs)
	}
	if len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/agnhost" {
		t.Errorf("entrypoint %v", cfg.Config.Entrypoint)
	}
}

func TestWriteArchiveRefusesBadImages(t *testing.T) {
	dir := t.TempDir()
	l, err := WriteLayer(filepath.Join(dir, "l.tar"), []Entry{{Path: "/pause", Data: []byte("p")}})
	if err != nil {
		t.Fatal(err)
	}
	for name, images := range map[string][]Image{
		"no image":               nil,
		"an image without tag":   {{Layers: []Layer{l}}},
		"a tag without version":  {{Tags: []string{"registry.k8s.io/pause"}, Layers: []Layer{l}}},
		"a tag given twice":      {{Tags: []string{"a:1"}, Layers: []Layer{l}}, {Tags: []string{"a:1"}, Layers: []Layer{l}}},
		"an image without layer": {{Tags: []string{"a:1"}}},
	} {
		t.Run(name, func(t *testing.T) {
			if err := WriteArchive(io.Discard, images); err == nil {
				t.Error("want an error")
			}
		})
	}
}

func TestWriteArchiveNoticesALayerChangedOnDisk(t *testing.T) {
	dir := t.TempDir()
	l, err := WriteLayer(filepath.Join(dir, "l.tar"), []Entry{{Path: "/pause", Data: []byte("p")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.Path, bytes.Repeat([]byte{0}, int(l.Size)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteArchive(io.Discard, []Image{{Tags: []string{"a:1"}, Layers: []Layer{l}}}); err == nil {
		t.Error("want an error: the layer's digest no longer matches")
	}
}
