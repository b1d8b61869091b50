package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/vcoil/vcoil/v2/internal/testenv"
	"github.com/vcoil/vcoil/v2/pkg/cniinstall"
)

// install-cni only writes the node's CNI directories: in every DaemonSet of
// every installation it runs unprivileged, as root (the directories'
// owner) without a capability, on a read-only root filesystem.
func TestInstallCNIRunsWithoutPrivileges(t *testing.T) {
	for _, overlay := range []string{"default", "overlays/vpp", "overlays/lab", "overlays/lab-vpp"} {
		m, err := testenv.Render(overlay)
		if err != nil {
			t.Fatal(err)
		}
		seen := 0
		for _, o := range m {
			if o.GetKind() != "DaemonSet" {
				continue
			}
			ds := &appsv1.DaemonSet{}
			decode(t, m, "DaemonSet", o.GetName(), ds)
			for _, c := range ds.Spec.Template.Spec.InitContainers {
				if c.Name != "install-cni" {
					continue
				}
				seen++
				if err := unprivileged(c.SecurityContext); err != nil {
					t.Errorf("%s: DaemonSet %s: install-cni: %v", overlay, ds.Name, err)
				}
			}
		}
		if seen == 0 {
			t.Errorf("%s renders no install-cni container", overlay)
		}
	}
}

func unprivileged(sc *corev1.SecurityContext) error {
	switch {
	case sc == nil:
		return errors.New("no security context")
	case ptr.Deref(sc.Privileged, false):
		return errors.New("privileged")
	case ptr.Deref(sc.AllowPrivilegeEscalation, true):
		return errors.New("may escalate privileges")
	case !ptr.Deref(sc.ReadOnlyRootFilesystem, false):
		return errors.New("writes its root filesystem")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		return errors.New("keeps capabilities")
	case sc.RunAsUser == nil || *sc.RunAsUser != 0:
		return errors.New("does not run as root, the owner of the node's CNI directories")
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		return errors.New("without the runtime's seccomp profile")
	}
	return nil
}

// What the security context leaves install-cni is enough: root without a
// capability installs into root's directories of mode 0755 (the host's
// /opt/cni/bin and /etc/cni/net.d), replacing an older vcoil and
// conflist.
func TestInstallCNIWorksWithoutCapabilities(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the test drops root's capabilities and installs as root")
	}
	dir := t.TempDir()
	mk := func(parts ...string) string {
		p := filepath.Join(append([]string{dir}, parts...)...)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write := func(p, content string, mode os.FileMode) {
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, bin, conf := mk("image", "cni"), mk("host", "opt", "cni", "bin"), mk("host", "etc", "cni", "net.d")
	write(filepath.Join(src, "vcoil"), "new vcoil", 0o755)
	write(filepath.Join(src, "portmap"), "portmap", 0o755)
	write(filepath.Join(bin, "vcoil"), "old vcoil", 0o755)
	write(filepath.Join(bin, "bridge"), "another plugin", 0o755)
	write(filepath.Join(conf, "10-vcoil.conflist"), "{}", 0o644)
	// A directory of another user: writable with CAP_DAC_OVERRIDE only,
	// which shows that the capabilities are gone.
	foreign := mk("foreign")
	if err := os.Chown(foreign, 65534, 65534); err != nil {
		t.Fatal(err)
	}

	type outcome struct {
		foreignErr error
		res        cniinstall.Result
		err        error
	}
	done := make(chan outcome)
	go func() {
		// Capabilities belong to a thread: this goroutine keeps its
		// thread, and the thread ends with it (never unlocked), so no
		// other goroutine runs without capabilities.
		runtime.LockOSThread()
		var o outcome
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var none [2]unix.CapUserData
		if err := unix.Capset(&hdr, &none[0]); err != nil {
			o.err = err
			done <- o
			return
		}
		o.foreignErr = os.WriteFile(filepath.Join(foreign, "x"), nil, 0o644)
		var c cniinstall.Conflist
		if err := c.ForDataplane("linux"); err != nil {
			o.err = err
			done <- o
			return
		}
		c.CNIVersion, c.Name, c.Socket = "1.0.0", "vcoil", "/run/vcoil/vcoild.sock"
		o.res, o.err = cniinstall.Install(cniinstall.Options{
			SourceDir: src, BinDir: bin, ConfDir: conf, ConfName: "10-vcoil.conflist", Conflist: c,
		})
		done <- o
	}()
	o := <-done
	if !errors.Is(o.foreignErr, os.ErrPermission) {
		t.Fatalf("writing another user's directory: %v, want permission denied (capabilities not dropped?)", o.foreignErr)
	}
	if o.err != nil {
		t.Fatalf("install without capabilities: %v", o.err)
	}
	for name, want := range map[string]string{"vcoil": "new vcoil", "portmap": "portmap", "bridge": "another plugin"} {
		got, err := os.ReadFile(filepath.Join(bin, name))
		if err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", name, got, err, want)
		}
	}
	got, err := os.ReadFile(filepath.Join(conf, "10-vcoil.conflist"))
	if err != nil || len(got) < 10 {
		t.Errorf("conflist %q, %v", got, err)
	}
}
