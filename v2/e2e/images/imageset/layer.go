// Package imageset writes container images as one docker-archive tarball
// (the format of `docker save`, which `ctr images import` and `docker load`
// read), for clusters without a registry: the lab's own images (one layer of
// static programs, through mkimage) and the images of the upstream
// Kubernetes e2e tests (Debian root file systems). An archive holds several
// images, each of one or more uncompressed layers; a layer shared between
// images is stored once. A layer is made from a list of entries (programs,
// links, small files) or from a directory tree, which keeps what a root file
// system needs: symbolic and hard links, owners, set-uid bits. The same
// inputs give the same bytes. It does not pull, push or compress.
package imageset

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// epoch is the time of every entry, so that the same inputs give the same
// layer (and the same digest).
var epoch = time.Unix(0, 0).UTC()

// Layer is a layer tarball written to a file.
type Layer struct {
	// Path of the layer tarball on disk.
	Path string
	// DiffID is "sha256:" and the digest of the tarball.
	DiffID string
	Size   int64
}

// EntryType is the kind of an Entry.
type EntryType int

const (
	// File is a regular file: Data, or the contents of Source.
	File EntryType = iota
	// Dir is a directory.
	Dir
	// Symlink is a symbolic link to Target.
	Symlink
)

// Entry is one entry of a layer made from a list.
type Entry struct {
	Type EntryType
	// Path inside the image, absolute and clean ("/agnhost").
	Path string
	// Source is a file on disk to copy (File); Data is used when empty.
	Source string
	Data   []byte
	// Target of a Symlink.
	Target string
	// Mode is the permission bits (with os.ModeSticky, os.ModeSetuid);
	// 0 means 0755.
	Mode os.FileMode
}

// WriteLayer writes a layer holding entries, and the directories leading to
// them, to the file dst.
func WriteLayer(dst string, entries []Entry) (Layer, error) {
	byPath := map[string]Entry{}
	for _, e := range entries {
		if !path.IsAbs(e.Path) || path.Clean(e.Path) != e.Path || e.Path == "/" {
			return Layer{}, fmt.Errorf("entry %q: want a clean absolute path", e.Path)
		}
		if _, dup := byPath[e.Path]; dup {
			return Layer{}, fmt.Errorf("entry %s given twice", e.Path)
		}
		byPath[e.Path] = e
		for d := path.Dir(e.Path); d != "/"; d = path.Dir(d) {
			if p, ok := byPath[d]; ok && p.Type != Dir {
				return Layer{}, fmt.Errorf("%s is inside %s, which is not a directory", e.Path, d)
			}
		}
	}
	// Parents that were not listed become directories of mode 0755.
	for p := range byPath {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := byPath[d]; !ok {
				byPath[d] = Entry{Type: Dir, Path: d}
			}
		}
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	// Sorted, a directory comes before what it holds.
	sort.Strings(paths)
	return writeLayerFile(dst, func(tw *tar.Writer) error {
		for _, p := range paths {
			if err := writeEntry(tw, byPath[p]); err != nil {
				return fmt.Errorf("layer entry %s: %w", p, err)
			}
		}
		return nil
	})
}

func writeEntry(tw *tar.Writer, e Entry) error {
	mode := e.Mode
	if mode == 0 {
		mode = 0o755
	}
	hdr := &tar.Header{Name: strings.TrimPrefix(e.Path, "/"), Mode: tarMode(mode), ModTime: epoch, Format: tar.FormatPAX}
	switch e.Type {
	case Dir:
		hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
		return tw.WriteHeader(hdr)
	case Symlink:
		if e.Target == "" {
			return errors.New("symbolic link without a target")
		}
		hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, e.Target, 0o777
		return tw.WriteHeader(hdr)
	case File:
		data := e.Data
		if e.Source != "" {
			var err error
			if data, err = os.ReadFile(e.Source); err != nil {
				return err
			}
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	return fmt.Errorf("unknown entry type %d", e.Type)
}

// WriteDirLayer writes a layer holding the tree under root (a root file
// system) to the file dst, leaving out every path for which skip returns true
// (paths are absolute as inside the image, "/usr/share/doc"; a skipped
// directory is left out with all it holds). Regular files, directories,
// symbolic and hard links keep their owner and mode; device nodes, sockets
// and pipes are left out (the runtime provides /dev).
func WriteDirLayer(dst, root string, skip func(p string) bool) (Layer, error) {
	return writeLayerFile(dst, func(tw *tar.Writer) error {
		// The first path seen of every inode with several links; later ones
		// become hard links to it.
		seen := map[[2]uint64]string{}
		return filepath.WalkDir(root, func(name string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(root, name)
			if err != nil {
				return err
			}
			if rel == "." {
				return nil
			}
			p := "/" + filepath.ToSlash(rel)
			if skip != nil && skip(p) {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			hdr, err := dirEntryHeader(name, p, info, seen)
			if err != nil || hdr == nil {
				return err
			}
			if err := tw.WriteHeader(hdr); err != nil {
				return fmt.Errorf("layer entry %s: %w", p, err)
			}
			if hdr.Typeflag != tar.TypeReg {
				return nil
			}
			f, err := os.Open(name)
			if err != nil {
				return err
			}
			defer f.Close()
			if n, err := io.Copy(tw, f); err != nil || n != hdr.Size {
				return fmt.Errorf("layer entry %s: copied %d of %d bytes: %v", p, n, hdr.Size, err)
			}
			return nil
		})
	})
}

// dirEntryHeader is the tar header of the file at name (p inside the image),
// or nil for a kind of file a layer does not carry.
func dirEntryHeader(name, p string, info fs.FileInfo, seen map[[2]uint64]string) (*tar.Header, error) {
	hdr := &tar.Header{
		Name: strings.TrimPrefix(p, "/"), Mode: tarMode(info.Mode()), ModTime: epoch, Format: tar.FormatPAX,
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
		if !info.IsDir() && st.Nlink > 1 {
			key := [2]uint64{st.Dev, st.Ino}
			if first, ok := seen[key]; ok {
				hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
				return hdr, nil
			}
			seen[key] = hdr.Name
		}
	}
	switch {
	case info.Mode().IsRegular():
		hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
	case info.IsDir():
		hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
	case info.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(name)
		if err != nil {
			return nil, err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
	default:
		return nil, nil
	}
	return hdr, nil
}

// writeLayerFile writes a layer tarball through fill to dst (atomically) and
// returns it with its digest.
func writeLayerFile(dst string, fill func(*tar.Writer) error) (Layer, error) {
	tmp := dst + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return Layer{}, err
	}
	h := sha256.New()
	cw := &countingWriter{w: io.MultiWriter(f, h)}
	tw := tar.NewWriter(cw)
	err = fill(tw)
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		os.Remove(tmp)
		return Layer{}, fmt.Errorf("write layer %s: %w", dst, err)
	}
	return Layer{Path: dst, DiffID: "sha256:" + hex.EncodeToString(h.Sum(nil)), Size: cw.n}, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// tarMode turns Go's file mode into the tar header's, with the set-uid,
// set-gid and sticky bits where tar keeps them.
func tarMode(m os.FileMode) int64 {
	mode := int64(m.Perm())
	if m&os.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&os.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&os.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}
