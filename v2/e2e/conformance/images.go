package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/vcoil/vcoil/v2/e2e/images/imageset"
)

// The images of the upstream network e2e tests, under the names of
// k8s.io/kubernetes/test/utils/image/manifest.go (v1.37.1): the framework
// runs them with imagePullPolicy IfNotPresent, so an image imported under
// exactly that name is used and nothing is pulled.
const (
	e2eRegistry   = "registry.k8s.io/e2e-test-images"
	buildRegistry = "registry.k8s.io/build-image"
	gcRegistry    = "registry.k8s.io"
)

var (
	// 2.45 is the one the ClusterNetworkPolicy conformance profile of
	// sigs.k8s.io/network-policy-api names (make e2e-cnp).
	agnhostTags    = []string{e2eRegistry + "/agnhost:2.66.1", e2eRegistry + "/agnhost:2.55", e2eRegistry + "/agnhost:2.45"}
	busyboxTags    = []string{e2eRegistry + "/busybox:1.37.0-2", e2eRegistry + "/busybox:1.36.1-1"}
	nginxTags      = []string{e2eRegistry + "/nginx:1.27.0-2", e2eRegistry + "/nginx:1.28.0-2"}
	glibcDNSTags   = []string{e2eRegistry + "/glibc-dns-testing:2.1.1"}
	iptablesTags   = []string{buildRegistry + "/distroless-iptables:v0.9.7"}
	regressionTags = []string{e2eRegistry + "/regression-issue-74839:1.5"}
	pauseTags      = []string{gcRegistry + "/pause:3.10.2", gcRegistry + "/pause:3.10.1"}
)

// imageInputs are the files the images are made of.
type imageInputs struct {
	// RootFS is a Debian root file system (make conformance-rootfs) with
	// bash, curl, netcat, dig, iproute2, socat, conntrack, nginx-light and
	// busybox-static.
	RootFS string
	// Agnhost, CoreDNS, Pause and Regression are static programs.
	Agnhost, CoreDNS, Pause, Regression string
	// PorterCert and PorterKey are agnhost porter's TLS files (in
	// k8s.io/kubernetes/test/images/agnhost/porter).
	PorterCert, PorterKey string
	// WorkDir receives the layer tarballs.
	WorkDir string
}

// rootFSSkip leaves out of the root file system's layer what a container
// never reads: package caches and lists, documentation, the runtime's
// mount points' contents and debootstrap's leftovers.
func rootFSSkip(p string) bool {
	switch p {
	case "/debootstrap", "/var/cache/apt/archives", "/var/lib/apt/lists", "/usr/share/doc",
		"/usr/share/man", "/usr/share/info", "/usr/share/locale":
		return true
	}
	for _, dir := range []string{"/dev/", "/proc/", "/sys/", "/tmp/", "/run/"} {
		if strings.HasPrefix(p, dir) {
			return true
		}
	}
	return false
}

// buildImages writes the layers into in.WorkDir and returns the images.
func buildImages(in imageInputs, progress func(string)) ([]imageset.Image, error) {
	layer := func(name string, entries []imageset.Entry) (imageset.Layer, error) {
		progress("layer " + name)
		return imageset.WriteLayer(filepath.Join(in.WorkDir, name+".tar"), entries)
	}
	progress("layer rootfs (the Debian root file system; takes a while)")
	rootfs, err := imageset.WriteDirLayer(filepath.Join(in.WorkDir, "rootfs.tar"), in.RootFS, rootFSSkip)
	if err != nil {
		return nil, err
	}
	passwd, group, err := agnhostUsers(in.RootFS)
	if err != nil {
		return nil, err
	}
	wgetrc, err := singleTryWgetrc(in.RootFS)
	if err != nil {
		return nil, err
	}
	applets, err := missingApplets(in.RootFS)
	if err != nil {
		return nil, err
	}
	agnhost, err := layer("agnhost", append(applets, []imageset.Entry{
		{Path: "/agnhost", Source: in.Agnhost},
		// Entrypoint tests run the image with /agnhost-2 as command.
		{Path: "/agnhost-2", Type: imageset.Symlink, Target: "agnhost"},
		// DNS tests run /coredns -conf FILE (the hosts and log plugins).
		{Path: "/coredns", Source: in.CoreDNS},
		{Path: "/uploads", Type: imageset.Dir},
		{Path: "/localhost.crt", Source: in.PorterCert, Mode: 0o644},
		{Path: "/localhost.key", Source: in.PorterKey, Mode: 0o644},
		{Path: "/etc/passwd", Data: passwd, Mode: 0o644},
		{Path: "/etc/group", Data: group, Mode: 0o644},
		{Path: "/etc/wgetrc", Data: wgetrc, Mode: 0o644},
	}...))
	if err != nil {
		return nil, err
	}
	bbEntries, err := busyboxEntries(filepath.Join(in.RootFS, "bin/busybox"))
	if err != nil {
		return nil, err
	}
	busybox, err := layer("busybox", bbEntries)
	if err != nil {
		return nil, err
	}
	pause, err := layer("pause", []imageset.Entry{{Path: "/pause", Source: in.Pause}})
	if err != nil {
		return nil, err
	}
	regression, err := layer("regression-issue-74839", []imageset.Entry{{Path: "/regression-issue-74839", Source: in.Regression}})
	if err != nil {
		return nil, err
	}
	return []imageset.Image{
		{Tags: agnhostTags, Layers: []imageset.Layer{rootfs, agnhost}, Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}},
		{Tags: busyboxTags, Layers: []imageset.Layer{busybox}, Cmd: []string{"sh"}},
		// Debian's nginx-light serves /var/www/html on port 80.
		{Tags: nginxTags, Layers: []imageset.Layer{rootfs}, Cmd: []string{"nginx", "-g", "daemon off;"}},
		// glibc's resolver with dig and nslookup (dnsutils).
		{Tags: glibcDNSTags, Layers: []imageset.Layer{rootfs}, Cmd: []string{"sleep", "infinity"}},
		// conntrack (the KubeProxy CLOSE_WAIT test reads the node's table).
		{Tags: iptablesTags, Layers: []imageset.Layer{rootfs}, Cmd: []string{"sleep", "infinity"}},
		{Tags: regressionTags, Layers: []imageset.Layer{regression}, Entrypoint: []string{"/regression-issue-74839"}},
		{Tags: pauseTags, Layers: []imageset.Layer{pause}, Entrypoint: []string{"/pause"}},
	}, nil
}

// agnhostUsers are the root file system's /etc/passwd and /etc/group with
// the user and group agnhost's image defines (a node test of supplemental
// groups expects them): user-defined-in-image (uid 1000) in
// group-defined-in-image (gid 50000).
func agnhostUsers(rootfs string) (passwd, group []byte, err error) {
	if passwd, err = os.ReadFile(filepath.Join(rootfs, "etc/passwd")); err != nil {
		return nil, nil, err
	}
	if group, err = os.ReadFile(filepath.Join(rootfs, "etc/group")); err != nil {
		return nil, nil, err
	}
	passwd = append(withNewline(passwd), "user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n"...)
	group = append(withNewline(group),
		"user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n"...)
	return passwd, group, nil
}

// singleTryWgetrc is the root file system's /etc/wgetrc set to try once.
// The tests run `wget -q -T 1 -O - URL` as Alpine's busybox wget understands
// it: one attempt. Debian's static busybox crashes on -T, so the images have
// GNU wget, which would try 20 times and so turn a test's 150 probes of a
// service that is down into hours.
func singleTryWgetrc(rootfs string) ([]byte, error) {
	rc, err := os.ReadFile(filepath.Join(rootfs, "etc/wgetrc"))
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	return append(withNewline(rc), "tries = 1\n"...), nil
}

func withNewline(b []byte) []byte {
	if len(b) > 0 && b[len(b)-1] != '\n' {
		b = append(b, '\n')
	}
	return b
}

// missingApplets are links in /usr/local/bin to the root file system's
// /bin/busybox for each busybox applet that no Debian package of the root
// file system provides (unzip, vi, ...). The real agnhost image is Alpine,
// whose busybox provides them, and tests may run them in agnhost's pods.
func missingApplets(rootfs string) ([]imageset.Entry, error) {
	names, err := appletNames(filepath.Join(rootfs, "bin/busybox"))
	if err != nil {
		return nil, err
	}
	var entries []imageset.Entry
	for _, name := range names {
		found := false
		for _, dir := range []string{"usr/local/bin", "usr/local/sbin", "usr/bin", "usr/sbin", "bin", "sbin"} {
			if _, err := os.Lstat(filepath.Join(rootfs, dir, name)); err == nil {
				found = true
				break
			}
		}
		if !found {
			entries = append(entries, imageset.Entry{Path: "/usr/local/bin/" + name, Type: imageset.Symlink, Target: "/bin/busybox"})
		}
	}
	return entries, nil
}

// appletNames lists the applets of a busybox binary, busybox itself left
// out.
func appletNames(busybox string) ([]string, error) {
	out, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("list the applets of %s: %w", busybox, err)
	}
	var names []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		name := strings.TrimSpace(sc.Text())
		if name != "" && name != "busybox" && !strings.Contains(name, "/") {
			names = append(names, name)
		}
	}
	return names, sc.Err()
}

// busyboxEntries are a busybox image's files: the static busybox with a link
// in /bin for each of its applets, minimal passwd and group files, /tmp.
func busyboxEntries(busybox string) ([]imageset.Entry, error) {
	names, err := appletNames(busybox)
	if err != nil {
		return nil, err
	}
	entries := []imageset.Entry{
		{Path: "/bin/busybox", Source: busybox},
		{Path: "/etc/passwd", Data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n"), Mode: 0o644},
		{Path: "/etc/group", Data: []byte("root:x:0:\nnogroup:x:65534:\n"), Mode: 0o644},
		{Path: "/tmp", Type: imageset.Dir, Mode: 0o777 | os.ModeSticky},
		{Path: "/root", Type: imageset.Dir, Mode: 0o700},
		{Path: "/var", Type: imageset.Dir},
	}
	for _, name := range names {
		entries = append(entries, imageset.Entry{Path: "/bin/" + name, Type: imageset.Symlink, Target: "busybox"})
	}
	return entries, nil
}
