package imagetar

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readTar returns the regular files of a tarball by name, and the mode of
// every entry.
func readTar(t *testing.T, data []byte) (map[string][]byte, map[string]int64) {
	t.Helper()
	files, modes := map[string][]byte{}, map[string]int64{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, modes
		}
		if err != nil {
			t.Fatal(err)
		}
		modes[h.Name] = h.Mode
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = b
		}
	}
}

func TestWriteProducesALoadableDockerArchive(t *testing.T) {
	src := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(src, []byte("#!binary"), 0o700); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	id, err := Write(&buf, Image{
		Tags:       []string{"ghcr.io/vcoil/vcoil:lab", "vcoil:lab"},
		Entrypoint: []string{"/vcoild"},
		Cmd:        []string{"--help"},
		TmpDirs:    []string{"/tmp"},
		Files: []File{
			{Path: "/vcoild", Source: src},
			{Path: "/opt/vcoil/cni/bin/vcoil", Data: []byte("cni")},
			{Path: "/etc/motd", Data: []byte("hi"), Mode: 0o644},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	outer, _ := readTar(t, buf.Bytes())

	var manifest []manifestEntry
	if err := json.Unmarshal(outer["manifest.json"], &manifest); err != nil {
		t.Fatal(err)
	}
	if len(manifest) != 1 || strings.Join(manifest[0].RepoTags, ",") != "ghcr.io/vcoil/vcoil:lab,vcoil:lab" || len(manifest[0].Layers) != 1 {
		t.Fatalf("manifest %+v", manifest)
	}
	cfgJSON := outer[manifest[0].Config]
	sum := sha256.Sum256(cfgJSON)
	if id != "sha256:"+hex.EncodeToString(sum[:]) || manifest[0].Config != hex.EncodeToString(sum[:])+".json" {
		t.Errorf("image ID %s does not match the config's digest (config %s)", id, manifest[0].Config)
	}
	var cfg imageConfig
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != "amd64" || strings.Join(cfg.Config.Entrypoint, " ") != "/vcoild" || strings.Join(cfg.Config.Cmd, " ") != "--help" {
		t.Errorf("config %+v", cfg)
	}

	layer := outer[manifest[0].Layers[0]]
	layerSum := sha256.Sum256(layer)
	if len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != "sha256:"+hex.EncodeToString(layerSum[:]) {
		t.Errorf("diff_ids %v do not name the layer's digest", cfg.RootFS.DiffIDs)
	}
	files, modes := readTar(t, layer)
	if string(files["vcoild"]) != "#!binary" || string(files["opt/vcoil/cni/bin/vcoil"]) != "cni" || string(files["etc/motd"]) != "hi" {
		t.Errorf("layer files %v", files)
	}
	for name, want := range map[string]int64{
		"vcoild": 0o755, "etc/motd": 0o644, "tmp/": 0o1777,
		"opt/": 0o755, "opt/vcoil/": 0o755, "opt/vcoil/cni/": 0o755, "opt/vcoil/cni/bin/": 0o755,
	} {
		if got, ok := modes[name]; !ok || got != want {
			t.Errorf("layer entry %s: mode %o (present %v), want %o", name, got, ok, want)
		}
	}
}

func TestWriteIsReproducible(t *testing.T) {
	img := Image{Tags: []string{"pause:lab"}, Entrypoint: []string{"/pause"}, Files: []File{{Path: "/pause", Data: []byte("x")}}}
	var a, b bytes.Buffer
	idA, err := Write(&a, img)
	if err != nil {
		t.Fatal(err)
	}
	idB, err := Write(&b, img)
	if err != nil {
		t.Fatal(err)
	}
	if idA != idB || !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("the same image written twice differs")
	}
}

func TestWriteRefusesBadInput(t *testing.T) {
	for name, img := range map[string]Image{
		"no tag":               {Files: []File{{Path: "/a", Data: []byte("a")}}},
		"a tag without :tag":   {Tags: []string{"vcoil"}},
		"a relative path":      {Tags: []string{"a:b"}, Files: []File{{Path: "a", Data: []byte("a")}}},
		"a path given twice":   {Tags: []string{"a:b"}, Files: []File{{Path: "/a"}, {Path: "/a"}}},
		"a file that is a dir": {Tags: []string{"a:b"}, Dirs: []string{"/a"}, Files: []File{{Path: "/a"}}},
		"a missing source":     {Tags: []string{"a:b"}, Files: []File{{Path: "/a", Source: "/nonexistent/file"}}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Write(io.Discard, img); err == nil {
				t.Error("no error")
			}
		})
	}
}
