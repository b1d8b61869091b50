// Package imagetar writes container images as docker-archive tarballs (the
// format of `docker save`), which `ctr images import` and `docker load` read:
// one uncompressed layer holding the given files, an image config with the
// entrypoint, and a manifest.json naming the image's tags. It does not pull,
// push or compress; the images it writes are for a registry-less cluster.
package imagetar

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

// File is one regular file of the image's layer.
type File struct {
	// Path inside the image, absolute ("/vcoild").
	Path string
	// Source is the file on disk to copy; Data is used when Source is empty.
	Source string
	Data   []byte
	// Mode is the file's permission bits; 0 means 0755 (the files are
	// mostly programs).
	Mode os.FileMode
}

// Image describes the image to write.
type Image struct {
	// Tags are the image's names ("ghcr.io/vcoil/vcoil:lab"); at least one.
	Tags       []string
	Entrypoint []string
	Cmd        []string
	Env        []string
	// Dirs are empty directories to create (mode 0755), e.g. mount points.
	Dirs []string
	// TmpDirs are created with mode 1777 (/tmp).
	TmpDirs []string
	Files   []File
	// Architecture defaults to amd64.
	Architecture string
}

// epoch is the timestamp of every entry and of the image, so that the same
// inputs give the same bytes (and the same image ID).
var epoch = time.Unix(0, 0).UTC()

// Write writes img as a docker-archive tarball to w and returns the image ID
// (the digest of its config).
func Write(w io.Writer, img Image) (string, error) {
	if len(img.Tags) == 0 {
		return "", errors.New("image has no tag")
	}
	for _, t := range img.Tags {
		if !strings.Contains(t, ":") || strings.ContainsAny(t, " \t\n") {
			return "", fmt.Errorf("tag %q: want name:tag", t)
		}
	}
	layer, err := layerTar(img)
	if err != nil {
		return "", err
	}
	layerSum := sha256.Sum256(layer)
	diffID := "sha256:" + hex.EncodeToString(layerSum[:])

	arch := img.Architecture
	if arch == "" {
		arch = "amd64"
	}
	env := img.Env
	if env == nil {
		env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	cfg := imageConfig{
		Architecture: arch,
		OS:           "linux",
		Created:      epoch,
		Config: containerConfig{
			Entrypoint: img.Entrypoint,
			Cmd:        img.Cmd,
			Env:        env,
			WorkingDir: "/",
		},
		RootFS:  rootFS{Type: "layers", DiffIDs: []string{diffID}},
		History: []history{{Created: epoch, CreatedBy: "vcoil imagetar"}},
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return "", err
	}
	cfgSum := sha256.Sum256(cfgJSON)
	cfgHex := hex.EncodeToString(cfgSum[:])
	layerDir := hex.EncodeToString(layerSum[:])
	manifest := []manifestEntry{{
		Config:   cfgHex + ".json",
		RepoTags: img.Tags,
		Layers:   []string{layerDir + "/layer.tar"},
	}}
	manifestJSON, err := json.Marshal(manifest)
	if err != nil {
		return "", err
	}

	tw := tar.NewWriter(w)
	if err := writeDir(tw, layerDir+"/", 0o755); err != nil {
		return "", err
	}
	for _, e := range []struct {
		name string
		data []byte
	}{
		{layerDir + "/VERSION", []byte("1.0")},
		{layerDir + "/layer.tar", layer},
		{cfgHex + ".json", cfgJSON},
		{"manifest.json", manifestJSON},
	} {
		if err := writeFile(tw, e.name, e.data, 0o644); err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	return "sha256:" + cfgHex, nil
}

// WriteFile writes img to the file at name, atomically.
func WriteFile(name string, img Image) (string, error) {
	tmp := name + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return "", err
	}
	id, err := Write(f, img)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("write image %s: %w", name, err)
	}
	return id, os.Rename(tmp, name)
}

// layerTar builds the layer: the directories leading to every file (and the
// requested empty ones) first, then the files, all owned by root.
func layerTar(img Image) ([]byte, error) {
	dirs := map[string]os.FileMode{}
	addParents := func(p string) {
		for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
			if _, ok := dirs[d]; !ok {
				dirs[d] = 0o755
			}
		}
	}
	files := map[string]File{}
	for _, f := range img.Files {
		if !path.IsAbs(f.Path) || path.Clean(f.Path) != f.Path || f.Path == "/" {
			return nil, fmt.Errorf("file path %q: want a clean absolute path", f.Path)
		}
		if _, dup := files[f.Path]; dup {
			return nil, fmt.Errorf("file %s given twice", f.Path)
		}
		files[f.Path] = f
		addParents(f.Path)
	}
	for _, d := range img.Dirs {
		dirs[path.Clean(d)] = 0o755
		addParents(path.Clean(d))
	}
	for _, d := range img.TmpDirs {
		dirs[path.Clean(d)] = os.ModeSticky | 0o777
		addParents(path.Clean(d))
	}
	for p := range files {
		if _, isDir := dirs[p]; isDir {
			return nil, fmt.Errorf("%s is both a file and a directory", p)
		}
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range sortedKeys(dirs) {
		if err := writeDir(tw, strings.TrimPrefix(d, "/")+"/", dirs[d]); err != nil {
			return nil, err
		}
	}
	for _, p := range sortedKeys(files) {
		f := files[p]
		data := f.Data
		if f.Source != "" {
			var err error
			if data, err = os.ReadFile(f.Source); err != nil {
				return nil, fmt.Errorf("file %s: %w", p, err)
			}
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o755
		}
		if err := writeFile(tw, strings.TrimPrefix(p, "/"), data, mode); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func writeDir(tw *tar.Writer, name string, mode os.FileMode) error {
	return tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeDir, Name: name, Mode: tarMode(mode), ModTime: epoch, Format: tar.FormatPAX,
	})
}

func writeFile(tw *tar.Writer, name string, data []byte, mode os.FileMode) error {
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg, Name: name, Mode: tarMode(mode), Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX,
	}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

// tarMode turns Go's file mode into the tar header's (which carries the
// sticky bit as 01000).
func tarMode(m os.FileMode) int64 {
	mode := int64(m.Perm())
	if m&os.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

type imageConfig struct {
	Architecture string          `json:"architecture"`
	OS           string          `json:"os"`
	Created      time.Time       `json:"created"`
	Config       containerConfig `json:"config"`
	RootFS       rootFS          `json:"rootfs"`
	History      []history       `json:"history"`
}

type containerConfig struct {
	Entrypoint []string `json:"Entrypoint,omitempty"`
	Cmd        []string `json:"Cmd,omitempty"`
	Env        []string `json:"Env,omitempty"`
	WorkingDir string   `json:"WorkingDir,omitempty"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type history struct {
	Created   time.Time `json:"created"`
	CreatedBy string    `json:"created_by"`
}

type manifestEntry struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}
