// Package netnstest gives privileged tests network namespaces of their own:
// it creates named or anonymous namespaces that are removed when the test
// ends (also when it fails), runs code and commands inside them, and links
// them with veth pairs.
//
// Every helper works on a *NS that this package created, so a test built
// from these helpers cannot change the namespace the test process runs in
// (the machine's root namespace): it has no handle on it. The package does
// not build topologies; tests describe their own with these bricks.
//
// Nor does a test inherit the root namespace's settings: the kernel copies
// the IPv4 interface settings of a new namespace from the root namespace
// (and the IPv6 ones too where net.core.devconf_inherit_init_net is 1), so
// that on a Docker host or a Kubernetes node a new namespace would forward
// and filter by reverse path. Every namespace starts from the kernel's
// defaults instead (kernelDefaults); a test sets what it depends on besides.
package netnstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// namedDir is where iproute2 (and vishvananda/netns) keep named namespaces.
const namedDir = "/run/netns"

// namePrefix starts the name of every namespace this package names, followed
// by the creating process's PID so that leftovers of a killed test run can be
// recognised and removed (see sweepOrphans).
const namePrefix = "vcoiltest-"

// RequireRoot skips t unless the test runs as root, which creating
// namespaces, veths and routes needs.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: this test creates network namespaces and needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN); run it with sudo")
	}
}

// NS is a network namespace created for one test. It is removed by
// t.Cleanup, or earlier by Remove.
type NS struct {
	t     testing.TB
	label string
	// name is the file under /run/netns of a named namespace, empty for an
	// anonymous one.
	name string
	// netNS is open on path; anchor keeps an anonymous namespace alive (path
	// refers to anchor's descriptor).
	netNS   ns.NetNS
	anchor  ns.NetNS
	path    string
	removed bool
	handle  *netlink.Handle
}

// New creates a named namespace with lo up, visible to `ip netns` as
// vcoiltest-<pid>-<label>-<random> while the test runs, which helps when
// debugging a failing test. Label should say what the namespace plays
// ("node", "pod-a", "router").
func New(t testing.TB, label string) *NS {
	t.Helper()
	RequireRoot(t)
	sweepOrphans(t)

	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		t.Fatalf("netnstest: random name for namespace %q: %v", label, err)
	}
	name := fmt.Sprintf("%s%d-%s-%s", namePrefix, os.Getpid(), label, hex.EncodeToString(suffix))
	if err := createNamed(name); err != nil {
		t.Fatalf("netnstest: create namespace %s: %v", name, err)
	}
	path := filepath.Join(namedDir, name)
	n := &NS{t: t, label: label, name: name, path: path}
	t.Cleanup(n.Remove)
	netNS, err := ns.GetNS(path)
	if err != nil {
		t.Fatalf("netnstest: open namespace %s: %v", path, err)
	}
	n.netNS = netNS
	n.mustNotBeOwn()
	n.resetInherited()
	n.loopbackUp()
	return n
}

// NewAnonymous creates a namespace with lo up that has no name: it exists while the
// test holds it. Its Path is /proc/<pid>/fd/<fd>, valid in this process only.
func NewAnonymous(t testing.TB, label string) *NS {
	t.Helper()
	RequireRoot(t)
	anchor, err := ns.TempNetNS()
	if err != nil {
		t.Fatalf("netnstest: create anonymous namespace %q: %v", label, err)
	}
	n := &NS{t: t, label: label, anchor: anchor}
	t.Cleanup(n.Remove)
	n.path = fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), anchor.Fd())
	netNS, err := ns.GetNS(n.path)
	if err != nil {
		t.Fatalf("netnstest: open anonymous namespace %q: %v", label, err)
	}
	n.netNS = netNS
	n.mustNotBeOwn()
	n.resetInherited()
	n.loopbackUp()
	return n
}

// kernelDefaults are the kernel's own values of the interface settings a
// new namespace may copy from the root namespace, for "all" (which the
// kernel combines with each interface's own), "default" (which interfaces
// created later copy) and lo (created with the namespace). They decide
// whether a namespace routes and which packets it accepts: a root
// namespace that forwards (Docker, Kubernetes) or filters by reverse path
// (most distributions) must not make a test's "pod" a router or drop a
// test's asymmetric flows. net.ipv4.ip_forward is conf/all/forwarding, and
// writing it sets every interface's and the default's too.
var kernelDefaults = []sysctl{
	{"net/ipv4/ip_forward", "0"},
	{"net/ipv4/conf/{}/rp_filter", "0"},
	{"net/ipv4/conf/{}/accept_local", "0"},
	{"net/ipv4/conf/{}/route_localnet", "0"},
	{"net/ipv4/conf/{}/proxy_arp", "0"},
	{"net/ipv4/conf/{}/arp_filter", "0"},
	{"net/ipv4/conf/{}/arp_ignore", "0"},
	{"net/ipv4/conf/{}/arp_announce", "0"},
	{"net/ipv4/conf/{}/send_redirects", "1"},
	{"net/ipv6/conf/{}/disable_ipv6", "0"},
	{"net/ipv6/conf/{}/forwarding", "0"},
	{"net/ipv6/conf/{}/accept_ra", "1"},
}

// sysctl is a key under /proc/sys and its value; {} in key stands for
// each of all, default and lo.
type sysctl struct{ key, value string }

// kernelDefaultKeys expands kernelDefaults' {}.
func kernelDefaultKeys() []sysctl {
	var out []sysctl
	for _, d := range kernelDefaults {
		if !strings.Contains(d.key, "{}") {
			out = append(out, d)
			continue
		}
		for _, dev := range []string{"all", "default", "lo"} {
			out = append(out, sysctl{strings.ReplaceAll(d.key, "{}", dev), d.value})
		}
	}
	return out
}

// resetInherited sets kernelDefaults in the namespace. A kernel without
// IPv6 has no net/ipv6 keys: those are skipped.
func (n *NS) resetInherited() {
	n.t.Helper()
	n.Run(func() error {
		for _, d := range kernelDefaultKeys() {
			path := sysctlPath(d.key)
			if strings.HasPrefix(d.key, "net/ipv6/") {
				if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
					continue
				}
			}
			if err := os.WriteFile(path, []byte(d.value), 0o644); err != nil {
				return fmt.Errorf("netnstest: reset %s to the kernel's default %s: %w", d.key, d.value, err)
			}
		}
		return nil
	})
}

// loopbackUp sets lo up, as container runtimes do for pods and as every
// real host has it. Go's one-time probe of IPv4-mapped IPv6 support binds
// to ::ffff:127.0.0.1 in whatever namespace it first runs in, and without
// lo it would decide that wildcard listeners cannot be dual-stack for the
// rest of the test process.
func (n *NS) loopbackUp() {
	n.t.Helper()
	h := n.Netlink()
	lo, err := h.LinkByName("lo")
	if err == nil {
		err = h.LinkSetUp(lo)
	}
	if err != nil {
		n.t.Fatalf("netnstest: set lo up in %s: %v", n, err)
	}
}

// createNamed creates a namespace on a locked thread, bind-mounts it under
// /run/netns and moves the thread back before unlocking it. The thread must
// go back even though a locked goroutine's thread normally dies with it: the
// process's main thread is kept alive instead, and it would stay in the test
// namespace.
func createNamed(name string) error {
	if err := os.MkdirAll(namedDir, 0o755); err != nil {
		return err
	}
	target := filepath.Join(namedDir, name)
	f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return err
	}
	_ = f.Close()

	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		errc <- func() error {
			orig, err := netns.Get()
			if err != nil {
				return fmt.Errorf("open the thread's namespace: %w", err)
			}
			defer orig.Close()
			if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
				return fmt.Errorf("unshare: %w", err)
			}
			self := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
			mountErr := unix.Mount(self, target, "none", unix.MS_BIND, "")
			if err := netns.Set(orig); err != nil {
				// Stay locked: the runtime then ends this thread.
				return fmt.Errorf("return to the thread's namespace: %w", err)
			}
			runtime.UnlockOSThread()
			if mountErr != nil {
				return fmt.Errorf("bind mount %s: %w", target, mountErr)
			}
			return nil
		}()
	}()
	if err := <-errc; err != nil {
		_ = os.Remove(target)
		return err
	}
	return nil
}

var orphanName = regexp.MustCompile(`^` + namePrefix + `(\d+)-`)

// sweepOrphans removes named namespaces of test processes that no longer
// exist (a test killed by a timeout runs no cleanups). Namespaces of live
// processes, including other tests running now, are left alone.
func sweepOrphans(t testing.TB) {
	entries, err := os.ReadDir(namedDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		m := orphanName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue
		}
		if err := netns.DeleteNamed(e.Name()); err != nil {
			t.Logf("netnstest: remove leftover namespace %s: %v", e.Name(), err)
		}
	}
}

// mustNotBeOwn fails the test if the namespace is the one the test process
// runs in; it is a guard against a broken creation, not an expected case.
func (n *NS) mustNotBeOwn() {
	n.t.Helper()
	var own, created unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &own); err != nil {
		n.t.Fatalf("netnstest: stat own namespace: %v", err)
	}
	if err := unix.Fstat(int(n.netNS.Fd()), &created); err != nil {
		n.t.Fatalf("netnstest: stat namespace %s: %v", n, err)
	}
	if own.Dev == created.Dev && own.Ino == created.Ino {
		n.t.Fatalf("netnstest: namespace %s is the test process's own namespace", n)
	}
}

// String names the namespace for messages.
func (n *NS) String() string {
	if n.name != "" {
		return n.name
	}
	return n.label + " (anonymous)"
}

// Path is the namespace's file, as a CNI runtime passes it (CNI_NETNS).
func (n *NS) Path() string { return n.path }

// Name is the namespace's name under /run/netns; empty when anonymous.
func (n *NS) Name() string { return n.name }

// NetNS is the namespace as containernetworking/plugins' pkg/ns sees it.
func (n *NS) NetNS() ns.NetNS { return n.netNS }

// Remove deletes the namespace now, for tests of what happens when a
// namespace disappears; t.Cleanup calls it too. It is idempotent. The kernel
// destroys the namespace, and with it the veths inside, once nothing holds
// it any more, which happens asynchronously.
func (n *NS) Remove() {
	if n.removed {
		return
	}
	n.removed = true
	if n.handle != nil {
		n.handle.Close()
	}
	if n.netNS != nil {
		_ = n.netNS.Close()
	}
	if n.anchor != nil {
		_ = n.anchor.Close()
	}
	if n.name != "" {
		if err := netns.DeleteNamed(n.name); err != nil && !errors.Is(err, os.ErrNotExist) {
			n.t.Errorf("netnstest: remove namespace %s: %v", n.name, err)
		}
	}
}

// Removed reports whether Remove was called.
func (n *NS) Removed() bool { return n.removed }

// Do runs f on a thread inside the namespace (pkg/ns locks and restores the
// thread). Sockets created by f stay in the namespace after Do returns.
func (n *NS) Do(f func() error) error {
	if n.removed {
		return fmt.Errorf("namespace %s was removed", n)
	}
	return n.netNS.Do(func(ns.NetNS) error { return f() })
}

// Run is Do that fails the test on an error.
func (n *NS) Run(f func() error) {
	n.t.Helper()
	if err := n.Do(f); err != nil {
		n.t.Fatalf("in namespace %s: %v", n, err)
	}
}

// Netlink is a netlink handle bound to the namespace, closed with it.
func (n *NS) Netlink() *netlink.Handle {
	n.t.Helper()
	if n.handle == nil {
		h, err := netlink.NewHandleAt(netns.NsHandle(n.netNS.Fd()), unix.NETLINK_ROUTE)
		if err != nil {
			n.t.Fatalf("netnstest: netlink handle in %s: %v", n, err)
		}
		n.handle = h
	}
	return n.handle
}

// TryExec runs a program inside the namespace (through nsenter, so that
// only the network namespace changes) and returns its standard output. Its
// standard error goes into the error, or is dropped on success: iproute2,
// for one, warns there about namespaces that other tests remove meanwhile.
func (n *NS) TryExec(ctx context.Context, name string, args ...string) (string, error) {
	if n.removed {
		return "", fmt.Errorf("namespace %s was removed", n)
	}
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + n.path, "--", name}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s %s in %s: %w: %s", name, strings.Join(args, " "), n, err,
			strings.TrimSpace(string(out)+" "+stderr.String()))
	}
	return string(out), nil
}

// Exec is TryExec that fails the test on an error.
func (n *NS) Exec(name string, args ...string) string {
	n.t.Helper()
	out, err := n.TryExec(n.t.Context(), name, args...)
	if err != nil {
		n.t.Fatal(err)
	}
	return out
}

// IP runs `ip` with args inside the namespace, failing the test on an error:
// ns.IP("route", "add", "default", "via", "198.18.0.1").
func (n *NS) IP(args ...string) string {
	n.t.Helper()
	return n.Exec("ip", args...)
}

// Sysctl sets a sysctl of the namespace; key is dotted
// ("net.ipv4.ip_forward") or a path under /proc/sys ("net/ipv4/ip_forward").
func (n *NS) Sysctl(key, value string) {
	n.t.Helper()
	n.Run(func() error {
		return os.WriteFile(sysctlPath(key), []byte(value), 0o644)
	})
}

// ReadSysctl reads a sysctl of the namespace, without its trailing newline.
func (n *NS) ReadSysctl(key string) string {
	n.t.Helper()
	var value string
	n.Run(func() error {
		b, err := os.ReadFile(sysctlPath(key))
		value = strings.TrimSpace(string(b))
		return err
	})
	return value
}

func sysctlPath(key string) string {
	if !strings.Contains(key, "/") {
		key = strings.ReplaceAll(key, ".", "/")
	}
	return filepath.Join("/proc/sys", key)
}

// AddAddr puts an address with its prefix length ("198.18.0.2/24",
// "2001:db8:18::2/64") on a link and sets the link up. IPv6 addresses skip
// duplicate address detection so that they are usable at once.
func (n *NS) AddAddr(ifname, prefix string) {
	n.t.Helper()
	p, err := netip.ParsePrefix(prefix)
	if err != nil {
		n.t.Fatalf("netnstest: address %q: %v", prefix, err)
	}
	h := n.Netlink()
	link, err := h.LinkByName(ifname)
	if err != nil {
		n.t.Fatalf("netnstest: link %s in %s: %v", ifname, n, err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
	if p.Addr().Is6() {
		addr.Flags = unix.IFA_F_NODAD
	}
	if err := h.AddrAdd(link, addr); err != nil {
		n.t.Fatalf("netnstest: add %s to %s in %s: %v", prefix, ifname, n, err)
	}
	if err := h.LinkSetUp(link); err != nil {
		n.t.Fatalf("netnstest: set %s up in %s: %v", ifname, n, err)
	}
}

// Ping sends one echo request from inside the namespace and waits up to a
// second for the reply; addr may carry a zone ("fe80::1%eth0").
func (n *NS) Ping(ctx context.Context, addr string) error {
	_, err := n.TryExec(ctx, "ping", "-n", "-c", "1", "-W", "1", addr)
	return err
}

// Listen opens a listener inside the namespace (network "tcp", "tcp4",
// "tcp6", "udp"…); it is closed when the test ends.
func (n *NS) Listen(network, address string) net.Listener {
	n.t.Helper()
	var l net.Listener
	n.Run(func() error {
		var err error
		l, err = net.Listen(network, address)
		return err
	})
	n.t.Cleanup(func() { _ = l.Close() })
	return l
}

// ServeTCPEcho echoes, until the test ends, every TCP connection made to
// address inside the namespace ("tcp"; ":0" for a port of the system's
// choice) and returns the address it listens on.
func (n *NS) ServeTCPEcho(address string) *net.TCPAddr {
	n.t.Helper()
	l := n.Listen("tcp", address)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr)
}

// Dial connects from inside the namespace; the connection may then be used
// from any goroutine.
func (n *NS) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := n.Do(func() error {
		var err error
		var d net.Dialer
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// Veth creates a veth pair with end aName in a and end bName in b, both up.
// a and b may be the same namespace.
func Veth(t testing.TB, a *NS, aName string, b *NS, bName string) {
	t.Helper()
	la := netlink.NewLinkAttrs()
	la.Name = aName
	veth := &netlink.Veth{
		LinkAttrs:     la,
		PeerName:      bName,
		PeerTxQLen:    -1,
		PeerNamespace: netlink.NsFd(int(b.netNS.Fd())),
	}
	if err := a.Netlink().LinkAdd(veth); err != nil {
		t.Fatalf("netnstest: veth %s (%s) - %s (%s): %v", aName, a, bName, b, err)
	}
	for _, end := range []struct {
		n    *NS
		name string
	}{{a, aName}, {b, bName}} {
		h := end.n.Netlink()
		link, err := h.LinkByName(end.name)
		if err != nil {
			t.Fatalf("netnstest: veth end %s in %s: %v", end.name, end.n, err)
		}
		if err := h.LinkSetUp(link); err != nil {
			t.Fatalf("netnstest: set %s up in %s: %v", end.name, end.n, err)
		}
	}
}
