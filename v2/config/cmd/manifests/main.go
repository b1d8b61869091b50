// Command manifests renders a kustomization of v2/config with vcoil's image
// and the apiserver's address given as parameters (make manifests;
// docs/install.md).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/vcoil/vcoil/v2/config"
)

func main() {
	dir := flag.String("kustomization", "v2/config/default", "directory of the kustomization to render")
	image := flag.String("image", "", "vcoil's image: NAME:TAG or NAME@DIGEST (required)")
	apiServer := flag.String("apiserver", "", "HOST:PORT where vcoild and vcoil-controller reach the apiserver (needed without kube-proxy; default: the kubernetes Service)")
	out := flag.String("out", "", "file to write (default: standard output)")
	flag.Parse()
	if err := run(*dir, config.Params{Image: *image, APIServer: *apiServer}, *out); err != nil {
		fmt.Fprintln(os.Stderr, "manifests:", err)
		os.Exit(1)
	}
}

func run(dir string, p config.Params, out string) error {
	if p.Image == "" {
		return fmt.Errorf("--image is required")
	}
	objs, err := config.BuildWith(dir, p)
	if err != nil {
		return err
	}
	y, err := config.YAML(objs)
	if err != nil {
		return err
	}
	if out == "" {
		_, err = os.Stdout.Write(y)
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(out, y, 0o644)
}
