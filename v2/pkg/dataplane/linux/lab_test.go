package linux_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/linux"
)

// The lab: a node namespace whose uplink is a veth to a router namespace on
// 198.18.0.0/24 (2001:db8:18::/64). The router also holds an "external"
// host address, 203.0.113.10 (2001:db8:113::10), and routes the pod block
// 198.19.0.0/24 (2001:db8:19::/64) back to the node. Pods are namespaces of
// their own. Nothing touches the test process's namespace.
const (
	routerIPv4   = "198.18.0.1"
	nodeIPv4     = "198.18.0.2"
	routerIPv6   = "2001:db8:18::1"
	nodeIPv6     = "2001:db8:18::2"
	externalIPv4 = "203.0.113.10"
	externalIPv6 = "2001:db8:113::10"
)

type lab struct {
	t      *testing.T
	node   *netnstest.NS
	router *netnstest.NS
	dp     dataplane.Dataplane
	opts   labOptions
}

type labOptions struct {
	uplinkMTU      int  // 0: the kernel's 1500
	noDefaultRoute bool // the node has no default route
	cfg            linux.Config
	podMTU         int // the pods' MTU from the network configuration
}

func newLab(t *testing.T, opts labOptions) *lab {
	t.Helper()
	netnstest.RequireRoot(t)
	l := &lab{t: t, opts: opts, node: netnstest.New(t, "node"), router: netnstest.New(t, "router")}
	netnstest.Veth(t, l.node, "uplink", l.router, "to-node")
	if opts.uplinkMTU != 0 {
		mtu := fmt.Sprint(opts.uplinkMTU)
		l.node.IP("link", "set", "uplink", "mtu", mtu)
		l.router.IP("link", "set", "to-node", "mtu", mtu)
	}
	l.node.AddAddr("uplink", nodeIPv4+"/24")
	l.node.AddAddr("uplink", nodeIPv6+"/64")
	l.router.AddAddr("to-node", routerIPv4+"/24")
	l.router.AddAddr("to-node", routerIPv6+"/64")
	l.router.AddAddr("to-node", externalIPv4+"/32")
	l.router.AddAddr("to-node", externalIPv6+"/128")
	l.router.IP("route", "add", "198.19.0.0/24", "via", nodeIPv4)
	l.router.IP("-6", "route", "add", "2001:db8:19::/64", "via", nodeIPv6)
	if !opts.noDefaultRoute {
		l.node.IP("route", "add", "default", "via", routerIPv4)
		l.node.IP("-6", "route", "add", "default", "via", routerIPv6)
	}
	// The node starts as a host that routes nothing and whose new
	// interfaces accept router advertisements: what the tests read of
	// forwarding and of the pod veths' accept_ra is then vcoil's doing.
	l.node.Sysctl("net.ipv4.ip_forward", "0")
	l.node.Sysctl("net.ipv6.conf.all.forwarding", "0")
	l.node.Sysctl("net.ipv6.conf.default.accept_ra", "1")
	l.dp = l.newDataplane(opts.cfg)
	if err := l.dp.Init(t.Context()); err != nil {
		t.Fatalf("Init: %v", err)
	}
	return l
}

// newDataplane constructs a Dataplane for the lab's node, as a restarted
// vcoild would. It always names the node namespace: an empty NodeNetns
// would be the test process's own.
func (l *lab) newDataplane(cfg linux.Config) dataplane.Dataplane {
	l.t.Helper()
	cfg.NodeNetns = l.node.Path()
	dp, err := linux.New(cfg, testr.New(l.t))
	if err != nil {
		l.t.Fatalf("New: %v", err)
	}
	return dp
}

// addPod creates a pod namespace and wires it; v4 and v6 may be empty.
func (l *lab) addPod(label, v4, v6 string) (dataplane.Pod, *netnstest.NS) {
	l.t.Helper()
	n := netnstest.New(l.t, label)
	pod := podFor(n, "c-"+label, v4, v6)
	pod.MTU = l.opts.podMTU
	if _, err := l.dp.SetupPod(l.t.Context(), pod); err != nil {
		l.t.Fatalf("SetupPod %s: %v", label, err)
	}
	return pod, n
}

func podFor(n *netnstest.NS, containerID, v4, v6 string) dataplane.Pod {
	pod := dataplane.Pod{PodKey: dataplane.PodKey{ContainerID: containerID, IfName: "eth0"}, Netns: n.Path()}
	if v4 != "" {
		pod.IPv4 = netip.MustParseAddr(v4)
	}
	if v6 != "" {
		pod.IPv6 = netip.MustParseAddr(v6)
	}
	return pod
}

// routes lists routes as `ip -j` reports them, one compact line each
// ("198.19.0.5 dev vcoil… scope link proto 31"), sorted, without the
// kernel's metric and preference.
func routes(t *testing.T, n *netnstest.NS, args ...string) []string {
	t.Helper()
	var rs []struct {
		Type     string `json:"type"`
		Dst      string `json:"dst"`
		Gateway  string `json:"gateway"`
		Dev      string `json:"dev"`
		Scope    string `json:"scope"`
		Protocol string `json:"protocol"`
	}
	i := slices.Index(args, "route")
	full := append([]string{"-j"}, args[:i+1]...)
	full = append(full, "show")
	full = append(full, args[i+1:]...)
	out, err := n.TryExec(t.Context(), "ip", full...)
	if err != nil && strings.Contains(err.Error(), "FIB table does not exist") {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		t.Fatalf("ip -j %v: %v: %s", args, err, out)
	}
	var lines []string
	for _, r := range rs {
		s := r.Dst
		if r.Type != "" && r.Type != "unicast" {
			s = r.Type + " " + s
		}
		if r.Gateway != "" {
			s += " via " + r.Gateway
		}
		if r.Dev != "" {
			s += " dev " + r.Dev
		}
		if r.Scope != "" && r.Scope != "global" {
			s += " scope " + r.Scope
		}
		if r.Protocol != "" && r.Protocol != "boot" {
			s += " proto " + r.Protocol
		}
		lines = append(lines, s)
	}
	slices.Sort(lines)
	return lines
}

// addrs lists the addresses of a link ("198.19.0.5/32 scope global").
func addrs(t *testing.T, n *netnstest.NS, args ...string) []string {
	t.Helper()
	var links []struct {
		AddrInfo []struct {
			Local     string `json:"local"`
			Prefixlen int    `json:"prefixlen"`
			Scope     string `json:"scope"`
		} `json:"addr_info"`
	}
	out := n.IP(append([]string{"-j"}, append([]string{"addr", "show"}, args...)...)...)
	if err := json.Unmarshal([]byte(out), &links); err != nil {
		t.Fatalf("ip -j addr show %v: %v: %s", args, err, out)
	}
	var lines []string
	for _, l := range links {
		for _, a := range l.AddrInfo {
			lines = append(lines, fmt.Sprintf("%s/%d scope %s", a.Local, a.Prefixlen, a.Scope))
		}
	}
	slices.Sort(lines)
	return lines
}

// vcoilLinks lists the node's links whose name starts with vcoil.
func vcoilLinks(t *testing.T, n *netnstest.NS) []string {
	t.Helper()
	var links []struct {
		Ifname string `json:"ifname"`
	}
	out := n.IP("-j", "link", "show")
	if err := json.Unmarshal([]byte(out), &links); err != nil {
		t.Fatalf("ip -j link show: %v: %s", err, out)
	}
	var names []string
	for _, l := range links {
		if strings.HasPrefix(l.Ifname, linux.HostIfPrefix) {
			names = append(names, l.Ifname)
		}
	}
	return names
}

// exchange opens a TCP listener in server on addr, dials it from client,
// and returns the client address the server saw. It retries the dial for a
// few seconds: neighbour resolution may need a moment on a fresh link.
func exchange(t *testing.T, client, server *netnstest.NS, addr string) string {
	t.Helper()
	l := server.Listen("tcp", addr)
	seen := make(chan string, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("vcoil"))
			select {
			case seen <- c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap().String():
			default:
			}
			_ = c.Close()
		}
	}()
	poll.Eventually(t, 10*time.Second, func() error {
		c, err := client.Dial(t.Context(), "tcp", l.Addr().String())
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		b, err := io.ReadAll(c)
		if err != nil {
			return err
		}
		if string(b) != "vcoil" {
			return fmt.Errorf("read %q from %s", b, addr)
		}
		return nil
	})
	select {
	case s := <-seen:
		return s
	case <-time.After(5 * time.Second):
		t.Fatalf("the server at %s saw no connection", addr)
		return ""
	}
}

func ping(t *testing.T, from *netnstest.NS, addr string) {
	t.Helper()
	poll.Eventually(t, 10*time.Second, func() error { return from.Ping(t.Context(), addr) })
}

// diffLines returns "" when want and got hold the same lines in the same
// order, and both, one line each, otherwise.
func diffLines(want, got []string) string {
	if slices.Equal(want, got) {
		return ""
	}
	return fmt.Sprintf("want:\n\t%s\ngot:\n\t%s", strings.Join(want, "\n\t"), strings.Join(got, "\n\t"))
}

// matchWildcard reports whether s contains pattern, where * in pattern
// stands for any run of characters without a space.
func matchWildcard(s, pattern string) bool {
	re := regexp.MustCompile(strings.ReplaceAll(regexp.QuoteMeta(pattern), `\*`, `\S*`))
	return re.MatchString(s)
}

func logrFor(t *testing.T) logr.Logger { return testr.New(t) }

func itoa(i int) string { return strconv.Itoa(i) }

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

func netip4(s string) netip.Addr { return netip.MustParseAddr(s) }
