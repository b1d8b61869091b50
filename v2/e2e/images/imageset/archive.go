package imageset

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Image is one image of an archive.
type Image struct {
	// Tags are the image's full names ("registry.k8s.io/pause:3.10.2"); at
	// least one.
	Tags []string
	// Layers, bottom first.
	Layers     []Layer
	Entrypoint []string
	Cmd        []string
	// Env defaults to a PATH of the usual directories.
	Env        []string
	WorkingDir string
}

// defaultEnv is the environment of an image that sets none.
var defaultEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}

// WriteArchive writes images as one docker-archive tarball to w. A layer used
// by several images is stored once.
func WriteArchive(w io.Writer, images []Image) error {
	if len(images) == 0 {
		return errors.New("no image")
	}
	tags := map[string]bool{}
	var manifest []manifestEntry
	var configs [][2]string // file name, contents
	configNames := map[string]bool{}
	var layers []Layer
	layerDirs := map[string]bool{}
	for _, img := range images {
		if len(img.Tags) == 0 {
			return errors.New("image without a tag")
		}
		if len(img.Layers) == 0 {
			return fmt.Errorf("image %s has no layer", img.Tags[0])
		}
		for _, t := range img.Tags {
			if err := checkTag(t); err != nil {
				return err
			}
			if tags[t] {
				return fmt.Errorf("tag %s given twice", t)
			}
			tags[t] = true
		}
		cfg := configOf(img)
		cfgJSON, err := json.Marshal(cfg)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(cfgJSON)
		cfgName := hex.EncodeToString(sum[:]) + ".json"
		if !configNames[cfgName] {
			// Images with the same layers and settings share their config.
			configNames[cfgName] = true
			configs = append(configs, [2]string{cfgName, string(cfgJSON)})
		}
		entry := manifestEntry{Config: cfgName, RepoTags: img.Tags}
		for _, l := range img.Layers {
			dir := strings.TrimPrefix(l.DiffID, "sha256:")
			entry.Layers = append(entry.Layers, dir+"/layer.tar")
			if !layerDirs[dir] {
				layerDirs[dir] = true
				layers = append(layers, l)
			}
		}
		manifest = append(manifest, entry)
	}
	manifestJSON, err := json.Marshal(manifest)
	if err != nil {
		return err
	}

	tw := tar.NewWriter(w)
	for _, l := range layers {
		dir := strings.TrimPrefix(l.DiffID, "sha256:")
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		if err := writeBytes(tw, dir+"/VERSION", []byte("1.0")); err != nil {
			return err
		}
		if err := copyLayer(tw, dir+"/layer.tar", l); err != nil {
			return err
		}
	}
	for _, c := range configs {
		if err := writeBytes(tw, c[0], []byte(c[1])); err != nil {
			return err
		}
	}
	if err := writeBytes(tw, "manifest.json", manifestJSON); err != nil {
		return err
	}
	return tw.Close()
}

// WriteArchiveFile writes images to the file at name, atomically.
func WriteArchiveFile(name string, images []Image) error {
	tmp := name + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	err = WriteArchive(f, images)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write image archive %s: %w", name, err)
	}
	return nil
}

func checkTag(t string) error {
	i := strings.LastIndex(t, ":")
	if i <= 0 || i == len(t)-1 || strings.Contains(t[i:], "/") || strings.ContainsAny(t, " \t\n") {
		return fmt.Errorf("tag %q: want name:tag", t)
	}
	return nil
}

// copyLayer copies the layer's file into the archive, checking that it is
// still the file whose digest the manifest names.
func copyLayer(tw *tar.Writer, name string, l Layer) error {
	f, err := os.Open(l.Path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: l.Size, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tw, h), f)
	if err != nil {
		return fmt.Errorf("copy layer %s: %w", l.Path, err)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); n != l.Size || got != l.DiffID {
		return fmt.Errorf("layer %s changed since it was written (%d bytes, %s; want %d, %s)", l.Path, n, got, l.Size, l.DiffID)
	}
	return nil
}

func writeBytes(tw *tar.Writer, name string, data []byte) error {
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
		return err
	}
	_, err := tw.Write(data)
	return err
}

func configOf(img Image) imageConfig {
	env := img.Env
	if env == nil {
		env = defaultEnv
	}
	wd := img.WorkingDir
	if wd == "" {
		wd = "/"
	}
	cfg := imageConfig{
		Architecture: "amd64",
		OS:           "linux",
		Created:      epoch.Format("2006-01-02T15:04:05Z"),
		Config:       containerConfig{Entrypoint: img.Entrypoint, Cmd: img.Cmd, Env: env, WorkingDir: wd},
		RootFS:       rootFS{Type: "layers"},
	}
	for _, l := range img.Layers {
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, l.DiffID)
		cfg.History = append(cfg.History, history{Created: cfg.Created, CreatedBy: "vcoil imageset"})
	}
	return cfg
}

type imageConfig struct {
	Architecture string          `json:"architecture"`
	OS           string          `json:"os"`
	Created      string          `json:"created"`
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
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

type manifestEntry struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}
