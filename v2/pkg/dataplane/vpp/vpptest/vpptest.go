// Package vpptest runs a real VPP for integration tests: inside a network
// namespace the test made, with a startup.conf written to a temporary
// directory that also holds every socket, log and pid file, without DPDK
// or hugepages. Tests skip, naming the variable, unless VCOIL_VPP_BIN
// names a VPP 25.10 binary (a build tree's build-root/.../bin/vpp finds its
// plugins by itself).
//
// It does not build VPP, and it never runs VPP outside the namespace it is
// given.
package vpptest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.fd.io/govpp/adapter/socketclient"
	"go.fd.io/govpp/api"
	"go.fd.io/govpp/core"

	"github.com/vcoil/vcoil/v2/internal/poll"
)

// Environment variables that choose the VPP and the pod interface type.
const (
	BinEnv   = "VCOIL_VPP_BIN"
	PodIfEnv = "VCOIL_VPP_POD_IF"
)

// Binary returns the VPP binary named by VCOIL_VPP_BIN, and skips t when
// the variable is unset.
func Binary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv(BinEnv)
	if bin == "" {
		t.Skipf("skipped: set %s to a VPP %s binary to run the VPP integration tests (docs/vpp.md)", BinEnv, "25.10")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s=%s: %v", BinEnv, bin, err)
	}
	return bin
}

// PodInterface is VCOIL_VPP_POD_IF, else "tap" where /dev/vhost-net
// exists and "af_packet" where it does not.
func PodInterface() string {
	if v := os.Getenv(PodIfEnv); v != "" {
		return v
	}
	if _, err := os.Stat("/dev/vhost-net"); err == nil {
		return "tap"
	}
	return "af_packet"
}

// VPP is one VPP process in a namespace.
type VPP struct {
	t         testing.TB
	bin       string
	netns     string
	Dir       string
	APISocket string
	conf      string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	out    *bytes.Buffer
}

// Start writes startup.conf (and, when startupCLI is not empty, a file of
// CLI commands VPP runs at start, e.g. "create host-interface name up0")
// and starts VPP in the namespace at netnsPath, waiting until its API
// socket accepts connections. VPP is killed when the test ends.
func Start(t testing.TB, bin, netnsPath string, startupCLI ...string) *VPP {
	t.Helper()
	return StartWith(t, bin, netnsPath, Options{}, startupCLI...)
}

// Options change VPP's startup.conf for tests that need more than the
// defaults (benchmarks holding tens of thousands of NAT mappings).
type Options struct {
	// MainHeapSize is memory { main-heap-size }, e.g. "2G"; empty means
	// DefaultMainHeapSize.
	MainHeapSize string
	// StatsegSize is statseg { size }, e.g. "512M"; empty means 32M. The
	// ACL plugin keeps a counter per ACL rule there.
	StatsegSize string
}

// DefaultMainHeapSize is the main heap of the tests' VPP (docs/vpp.md's
// startup.conf).
const DefaultMainHeapSize = "512M"

// StartWith is Start with opts.
func StartWith(t testing.TB, bin, netnsPath string, opts Options, startupCLI ...string) *VPP {
	t.Helper()
	v := PrepareWith(t, bin, opts, startupCLI...)
	if err := v.Launch(netnsPath); err != nil {
		t.Fatal(err)
	}
	return v
}

// Prepare writes VPP's configuration without starting it: Launch starts it
// later, from any goroutine (for a namespace that another helper creates
// while the test waits for it). VPP is killed when the test ends.
func Prepare(t testing.TB, bin string, startupCLI ...string) *VPP {
	t.Helper()
	return PrepareWith(t, bin, Options{}, startupCLI...)
}

// PrepareWith is Prepare with opts.
func PrepareWith(t testing.TB, bin string, opts Options, startupCLI ...string) *VPP {
	t.Helper()
	if opts.StatsegSize == "" {
		opts.StatsegSize = "32M"
	}
	if opts.MainHeapSize == "" {
		opts.MainHeapSize = DefaultMainHeapSize
	}
	// Unix socket paths are short (108 bytes): a directory of our own
	// under /tmp rather than t.TempDir's long names.
	dir, err := os.MkdirTemp("", "vcoil-vpp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	v := &VPP{t: t, bin: bin, Dir: dir, APISocket: filepath.Join(dir, "api.sock"), conf: filepath.Join(dir, "startup.conf")}
	startup := ""
	if len(startupCLI) > 0 {
		cli := filepath.Join(dir, "startup.cli")
		if err := os.WriteFile(cli, []byte(strings.Join(startupCLI, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		startup = " startup-config " + cli
	}
	conf := fmt.Sprintf(`unix { nodaemon cli-listen %[1]s/cli.sock log %[1]s/vpp.log runtime-dir %[1]s pidfile %[1]s/vpp.pid%[3]s }
api-segment { prefix %[2]s }
socksvr { socket-name %[1]s/api.sock }
cpu { main-core 0 }
buffers { buffers-per-numa 16384 page-size 4k }
memory { main-heap-size %[4]s main-heap-page-size 4k }
statseg { size %[5]s page-size 4k socket-name %[1]s/stats.sock }
plugins { plugin dpdk_plugin.so { disable } }
`, dir, filepath.Base(dir), startup, opts.MainHeapSize, opts.StatsegSize)
	if err := os.WriteFile(v.conf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		v.Kill()
		// A killed VPP leaves its API segments in /dev/shm, named after
		// api-segment's prefix.
		if shm, _ := filepath.Glob(filepath.Join("/dev/shm", filepath.Base(dir)+"-*")); len(shm) > 0 {
			for _, f := range shm {
				_ = os.Remove(f)
			}
		}
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "vpp.log"))
			t.Logf("VPP output:\n%s\nvpp.log:\n%s", v.output(), log)
		}
	})
	return v
}

// Launch starts VPP in the namespace at netnsPath and waits until its API
// socket accepts connections. It reports failures as errors, so it may run
// outside the test's goroutine.
func (v *VPP) Launch(netnsPath string) error {
	v.mu.Lock()
	v.netns = netnsPath
	v.mu.Unlock()
	return v.start()
}

func (v *VPP) output() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.out == nil {
		return ""
	}
	return v.out.String()
}

func (v *VPP) start() error {
	_ = os.Remove(v.APISocket)
	cmd := exec.Command("nsenter", "--net="+v.netns, "--", v.bin, "-c", v.conf)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = &lockedWriter{mu: &v.mu, w: out}, &lockedWriter{mu: &v.mu, w: out}
	// Its own process group, so that Kill reaches VPP behind nsenter.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start VPP: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	v.mu.Lock()
	v.cmd, v.exited, v.out = cmd, exited, out
	v.mu.Unlock()

	errExited := errors.New("VPP exited at start")
	err := poll.Until(context.Background(), 30*time.Second, 50*time.Millisecond, func(context.Context) error {
		select {
		case <-exited:
			return poll.Stop(errExited)
		default:
		}
		c, err := net.Dial("unix", v.APISocket)
		if err != nil {
			return err
		}
		return c.Close()
	})
	switch {
	case errors.Is(err, errExited):
		return fmt.Errorf("%w:\n%s", err, v.output())
	case err != nil:
		return fmt.Errorf("VPP's API socket %s did not open: %w\n%s", v.APISocket, err, v.output())
	}
	return nil
}

// Kill stops VPP with SIGKILL, as a crash would, and waits for it.
func (v *VPP) Kill() {
	v.mu.Lock()
	cmd, exited := v.cmd, v.exited
	v.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
}

// Restart kills VPP and starts it again with the same configuration.
func (v *VPP) Restart() {
	v.t.Helper()
	v.Kill()
	if err := v.start(); err != nil {
		v.t.Fatal(err)
	}
}

// RestartAndAwait kills and starts VPP (Restart) and waits until the
// driver that uses it announces, on resynced (its Resynced channel), that it
// has synced the new VPP as incarnation want. It fails t if the driver
// announces another incarnation or ctx ends first. The incarnation's type is
// a type parameter because the driver's own tests use this package, which
// therefore cannot import the driver.
func RestartAndAwait[I comparable](ctx context.Context, t testing.TB, v *VPP, resynced <-chan I, want I) {
	t.Helper()
	v.Restart()
	select {
	case inc := <-resynced:
		if inc != want {
			t.Fatalf("incarnation after VPP's restart %v, want %v", inc, want)
		}
	case <-ctx.Done():
		t.Fatal("no new incarnation after VPP's restart")
	}
}

// PID is the process ID of nsenter's child, VPP (nsenter execs it).
func (v *VPP) PID() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.cmd.Process.Pid
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Connect opens a connection to v's API and a channel on it, for a test
// that reads or changes VPP itself; done closes both.
func (v *VPP) Connect(t testing.TB) (ch api.Channel, done func()) {
	t.Helper()
	conn, err := core.Connect(socketclient.NewVppClient(v.APISocket))
	if err != nil {
		t.Fatal(err)
	}
	ch, err = conn.NewAPIChannel()
	if err != nil {
		conn.Disconnect()
		t.Fatal(err)
	}
	return ch, func() {
		ch.Close()
		conn.Disconnect()
	}
}
