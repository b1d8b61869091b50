// Command mkimage writes a container image as a docker-archive tarball from
// files on disk, for vcoil's local cluster (make lab-images):
//
//	mkimage --out vcoil.tar --tag ghcr.io/vcoil/vcoil:lab --entrypoint /vcoild \
//	    --file /vcoild=bin/vcoild --file /opt/vcoil/cni/bin/vcoil=bin/vcoil
package main

import (
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vcoil/vcoil/v2/e2e/images/imageset"
)

type options struct {
	out                  string
	tags                 []string
	files, dirs, tmpDirs []string
	entrypoint, cmd      []string
}

func main() {
	var o options
	cmd := &cobra.Command{
		Use:          "mkimage --out FILE --tag NAME:TAG --file /PATH=SOURCE...",
		Short:        "write a docker-archive image of static programs",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(*cobra.Command, []string) error {
			layer, err := write(o)
			if err != nil {
				return err
			}
			fmt.Printf("%s %s %s\n", o.out, strings.Join(o.tags, ","), layer)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.out, "out", "", "tarball to write")
	fs.StringArrayVar(&o.tags, "tag", nil, "image name with tag (repeatable)")
	fs.StringArrayVar(&o.entrypoint, "entrypoint", nil, "entrypoint word (repeatable, in order)")
	fs.StringArrayVar(&o.cmd, "cmd", nil, "default argument (repeatable, in order)")
	fs.StringArrayVar(&o.files, "file", nil, "/PATH=SOURCE: copy SOURCE to PATH in the image, mode 0755 (repeatable)")
	fs.StringArrayVar(&o.tmpDirs, "tmp-dir", []string{"/tmp"}, "directory of mode 1777 (repeatable)")
	fs.StringArrayVar(&o.dirs, "dir", nil, "empty directory (repeatable)")
	_ = cmd.MarkFlagRequired("out")
	_ = cmd.MarkFlagRequired("tag")
	if err := cmd.Execute(); err != nil {
		os.Exit(1)
	}
}

// write writes the image's one layer beside the archive, then the archive,
// and removes the layer file; it returns the layer's digest.
func write(o options) (string, error) {
	var entries []imageset.Entry
	for _, f := range o.files {
		dst, src, ok := strings.Cut(f, "=")
		if !ok || dst == "" || src == "" {
			return "", fmt.Errorf("--file %q: want /PATH=SOURCE", f)
		}
		entries = append(entries, imageset.Entry{Type: imageset.File, Path: dst, Source: src})
	}
	for _, d := range o.dirs {
		entries = append(entries, imageset.Entry{Type: imageset.Dir, Path: path.Clean(d)})
	}
	for _, d := range o.tmpDirs {
		entries = append(entries, imageset.Entry{Type: imageset.Dir, Path: path.Clean(d), Mode: os.ModeSticky | 0o777})
	}
	layerFile := o.out + ".layer"
	defer os.Remove(layerFile)
	layer, err := imageset.WriteLayer(layerFile, entries)
	if err != nil {
		return "", err
	}
	img := imageset.Image{Tags: o.tags, Layers: []imageset.Layer{layer}, Entrypoint: o.entrypoint, Cmd: o.cmd}
	if err := imageset.WriteArchiveFile(o.out, []imageset.Image{img}); err != nil {
		return "", err
	}
	return layer.DiffID, nil
}
