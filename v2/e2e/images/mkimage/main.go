// Command mkimage writes a container image as a docker-archive tarball from
// files on disk, for vcoil's local cluster (make lab-images):
//
//	mkimage --out vcoil.tar --tag ghcr.io/vcoil/vcoil:lab --entrypoint /vcoild \
//	    --file /vcoild=bin/vcoild --file /opt/vcoil/cni/bin/vcoil=bin/vcoil
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vcoil/vcoil/v2/e2e/images/imagetar"
)

func main() {
	var (
		out                  string
		img                  imagetar.Image
		files                []string
		entrypoint, cmdWords []string
	)
	cmd := &cobra.Command{
		Use:          "mkimage --out FILE --tag NAME:TAG --file /PATH=SOURCE...",
		Short:        "write a docker-archive image of static programs",
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(*cobra.Command, []string) error {
			for _, f := range files {
				dst, src, ok := strings.Cut(f, "=")
				if !ok || dst == "" || src == "" {
					return fmt.Errorf("--file %q: want /PATH=SOURCE", f)
				}
				img.Files = append(img.Files, imagetar.File{Path: dst, Source: src})
			}
			img.Entrypoint, img.Cmd = entrypoint, cmdWords
			id, err := imagetar.WriteFile(out, img)
			if err != nil {
				return err
			}
			fmt.Printf("%s %s %s\n", out, strings.Join(img.Tags, ","), id)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&out, "out", "", "tarball to write")
	fs.StringArrayVar(&img.Tags, "tag", nil, "image name with tag (repeatable)")
	fs.StringArrayVar(&entrypoint, "entrypoint", nil, "entrypoint word (repeatable, in order)")
	fs.StringArrayVar(&cmdWords, "cmd", nil, "default argument (repeatable, in order)")
	fs.StringArrayVar(&files, "file", nil, "/PATH=SOURCE: copy SOURCE to PATH in the image, mode 0755 (repeatable)")
	fs.StringArrayVar(&img.TmpDirs, "tmp-dir", []string{"/tmp"}, "directory of mode 1777 (repeatable)")
	fs.StringArrayVar(&img.Dirs, "dir", nil, "empty directory (repeatable)")
	_ = cmd.MarkFlagRequired("out")
	_ = cmd.MarkFlagRequired("tag")
	if err := cmd.Execute(); err != nil {
		os.Exit(1)
	}
}
