package main

import (
	"archive/tar"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vcoil/vcoil/v2/e2e/images/imageset"
	"github.com/vcoil/vcoil/v2/e2e/images/imageset/imagesettest"
)

// fakeRootFS is a merged-/usr root file system whose /bin/busybox is a
// script listing four applets, one of which (unzip) no package provides.
func fakeRootFS(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"usr/bin", "usr/sbin", "etc", "dev", "usr/share/doc/curl"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range [][2]string{{"usr/bin", "bin"}, {"usr/sbin", "sbin"}} {
		if err := os.Symlink(l[0], filepath.Join(root, l[1])); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"usr/bin/busybox":           "#!/bin/sh\nprintf 'busybox\\nsh\\nnslookup\\nwget\\nunzip\\n'\n",
		"usr/bin/wget":              "GNU wget",
		"etc/wgetrc":                "# Debian's",
		"usr/bin/sh":                "dash",
		"usr/bin/nslookup":          "bind9",
		"etc/passwd":                "root:x:0:0:root:/root:/bin/bash\n",
		"etc/group":                 "root:x:0:",
		"usr/share/doc/curl/README": "docs",
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func layerNames(t *testing.T, l imageset.Layer) map[string]*tar.Header {
	t.Helper()
	hdrs, _ := imagesettest.FileEntries(t, l.Path)
	return hdrs
}

func TestBuildImagesNamesEveryImageAsTheE2EFrameworkDoes(t *testing.T) {
	root := fakeRootFS(t)
	prog := filepath.Join(t.TempDir(), "prog")
	if err := os.WriteFile(prog, []byte("a static program"), 0o755); err != nil {
		t.Fatal(err)
	}
	in := imageInputs{
		RootFS: root, Agnhost: prog, CoreDNS: prog, Pause: prog, Regression: prog,
		PorterCert: prog, PorterKey: prog, WorkDir: t.TempDir(),
	}
	images, err := buildImages(in, func(string) {})
	if err != nil {
		t.Fatal(err)
	}
	byTag := map[string]imageset.Image{}
	for _, img := range images {
		for _, tag := range img.Tags {
			byTag[tag] = img
		}
	}
	// The names of test/utils/image/manifest.go (v1.37.1) the network
	// tests use.
	for _, tag := range []string{
		"registry.k8s.io/e2e-test-images/agnhost:2.66.1",
		"registry.k8s.io/e2e-test-images/busybox:1.37.0-2",
		"registry.k8s.io/e2e-test-images/nginx:1.27.0-2",
		"registry.k8s.io/e2e-test-images/nginx:1.28.0-2",
		"registry.k8s.io/e2e-test-images/glibc-dns-testing:2.1.1",
		"registry.k8s.io/e2e-test-images/regression-issue-74839:1.5",
		"registry.k8s.io/build-image/distroless-iptables:v0.9.7",
		"registry.k8s.io/pause:3.10.2",
	} {
		if _, ok := byTag[tag]; !ok {
			t.Errorf("no image %s", tag)
		}
	}

	agnhost := byTag["registry.k8s.io/e2e-test-images/agnhost:2.66.1"]
	if !slices.Equal(agnhost.Entrypoint, []string{"/agnhost"}) || len(agnhost.Layers) != 2 {
		t.Fatalf("agnhost: entrypoint %v, %d layers; want /agnhost on the root file system", agnhost.Entrypoint, len(agnhost.Layers))
	}
	rootfs := layerNames(t, agnhost.Layers[0])
	if _, ok := rootfs["usr/share/doc/curl/README"]; ok {
		t.Error("the root file system's layer has the documentation")
	}
	if h := rootfs["bin"]; h == nil || h.Typeflag != tar.TypeSymlink {
		t.Errorf("the root file system's /bin: %+v, want the merged-/usr link", h)
	}
	top, topData := imagesettest.FileEntries(t, agnhost.Layers[1].Path)
	for _, name := range []string{"agnhost", "agnhost-2", "coredns", "uploads/", "etc/passwd", "etc/group", "etc/wgetrc"} {
		if _, ok := top[name]; !ok {
			t.Errorf("agnhost's layer has no %s", name)
		}
	}
	if h := top["usr/local/bin/unzip"]; h == nil || h.Linkname != "/bin/busybox" {
		t.Errorf("unzip in agnhost: %+v, want a link to busybox (no package provides it)", h)
	}
	if string(topData["etc/wgetrc"]) != "# Debian's\ntries = 1\n" {
		t.Errorf("agnhost's /etc/wgetrc %q, want the root file system's set to one try", topData["etc/wgetrc"])
	}
	for _, name := range []string{"usr/local/bin/nslookup", "usr/local/bin/sh", "usr/local/bin/wget"} {
		if _, ok := top[name]; ok {
			t.Errorf("%s links to busybox though the root file system has it", name)
		}
	}

	busybox := byTag["registry.k8s.io/e2e-test-images/busybox:1.37.0-2"]
	bb := layerNames(t, busybox.Layers[0])
	for _, name := range []string{"bin/busybox", "bin/sh", "bin/wget", "tmp/", "etc/passwd"} {
		if _, ok := bb[name]; !ok {
			t.Errorf("busybox's layer has no %s", name)
		}
	}

	// The archive of them all holds each shared layer once.
	out := filepath.Join(t.TempDir(), "images.tar")
	if err := imageset.WriteArchiveFile(out, images); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	var manifest []struct{ RepoTags []string }
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "manifest.json" {
			if err := json.NewDecoder(tr).Decode(&manifest); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(manifest) != len(images) {
		t.Errorf("manifest.json lists %d images, want %d", len(manifest), len(images))
	}
}
