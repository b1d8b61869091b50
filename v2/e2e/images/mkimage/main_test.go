package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vcoil/vcoil/v2/e2e/images/imageset/imagesettest"
)

// The lab's images as make lab-images writes them: one layer with the
// programs, the directories leading to them, a sticky /tmp; a manifest
// naming every tag; nothing left beside the archive.
func TestWriteMakesTheLabsImage(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "prog")
	if err := os.WriteFile(src, []byte("#!binary"), 0o700); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "vcoil.tar")
	o := options{
		out:        out,
		tags:       []string{"ghcr.io/vcoil/vcoil:lab", "vcoil:lab"},
		entrypoint: []string{"/vcoild"},
		cmd:        []string{"--help"},
		files:      []string{"/vcoild=" + src, "/opt/vcoil/cni/bin/vcoil=" + src},
		tmpDirs:    []string{"/tmp"},
		dirs:       []string{"/var/lib/vcoil/"},
	}
	diffID, err := write(o)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Errorf("files beside the archive: %v, want only prog and vcoil.tar", entries)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	_, outer := imagesettest.BytesEntries(t, data)
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(outer["manifest.json"], &manifest); err != nil {
		t.Fatal(err)
	}
	if len(manifest) != 1 || strings.Join(manifest[0].RepoTags, ",") != "ghcr.io/vcoil/vcoil:lab,vcoil:lab" ||
		len(manifest[0].Layers) != 1 || manifest[0].Layers[0] != strings.TrimPrefix(diffID, "sha256:")+"/layer.tar" {
		t.Fatalf("manifest %+v (layer %s)", manifest, diffID)
	}
	var cfg struct {
		Config struct{ Entrypoint, Cmd []string }
	}
	if err := json.Unmarshal(outer[manifest[0].Config], &cfg); err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.Config.Entrypoint, " ") != "/vcoild" || strings.Join(cfg.Config.Cmd, " ") != "--help" {
		t.Errorf("config %+v", cfg)
	}
	hdrs, files := imagesettest.BytesEntries(t, outer[manifest[0].Layers[0]])
	if string(files["vcoild"]) != "#!binary" || string(files["opt/vcoil/cni/bin/vcoil"]) != "#!binary" {
		t.Errorf("layer files %v", files)
	}
	for name, want := range map[string]int64{
		"vcoild": 0o755, "tmp/": 0o1777, "var/lib/vcoil/": 0o755,
		"opt/": 0o755, "opt/vcoil/": 0o755, "opt/vcoil/cni/": 0o755, "opt/vcoil/cni/bin/": 0o755,
	} {
		if h, ok := hdrs[name]; !ok || h.Mode != want {
			t.Errorf("layer entry %s: %+v (present %v), want mode %o", name, h, ok, want)
		}
	}

	// The same inputs give the same bytes, so an unchanged program gives
	// an unchanged image.
	if _, err := write(o); err != nil {
		t.Fatal(err)
	}
	again, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, again) {
		t.Error("the same image written twice differs")
	}
}

func TestWriteRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	for name, o := range map[string]options{
		"no tag":               {files: []string{"/a=/bin/sh"}},
		"a tag without :tag":   {tags: []string{"vcoil"}, files: []string{"/a=/bin/sh"}},
		"a --file without =":   {tags: []string{"a:b"}, files: []string{"/a"}},
		"a relative path":      {tags: []string{"a:b"}, files: []string{"a=/bin/sh"}},
		"a path given twice":   {tags: []string{"a:b"}, files: []string{"/a=/bin/sh", "/a=/bin/sh"}},
		"a file that is a dir": {tags: []string{"a:b"}, dirs: []string{"/a"}, files: []string{"/a=/bin/sh"}},
		"a missing source":     {tags: []string{"a:b"}, files: []string{"/a=/nonexistent/file"}},
	} {
		t.Run(name, func(t *testing.T) {
			o.out = filepath.Join(dir, "x.tar")
			if _, err := write(o); err == nil {
				t.Error("no error")
			}
			if _, err := os.Stat(o.out); !os.IsNotExist(err) {
				t.Errorf("an archive was left: %v", err)
			}
		})
	}
}
