package linux_test

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/linux"
)

// drops reads vcoil_source_validation_drops_total by family from reg.
func drops(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "vcoil_source_validation_drops_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	return out
}

// waitDrops waits until the family's drops reach at least want.
func waitDrops(t *testing.T, reg *prometheus.Registry, family string, want float64) {
	t.Helper()
	poll.Eventually(t, 10*time.Second, func() error {
		if got := drops(t, reg)[family]; got < want {
			return fmt.Errorf("%s drops %v, want at least %v", family, got, want)
		}
		return nil
	})
}

// probe sends forged from a, then control (a's own source, on the same
// path); once the capture on the receiving link saw control, every forged
// packet sent before it would have arrived before it. It returns the
// forged flows the receiver saw.
func probe(t *testing.T, a *netnstest.NS, recv *capture, forged []flow, control flow) []flow {
	t.Helper()
	sendRaw(t, a, append(slices.Clone(forged), control)...)
	seen, err := recv.until(t, 10*time.Second, func(f flow) bool { return f == control })
	if err != nil {
		t.Fatalf("the control packet %s did not arrive (%v): the probe proves nothing", control, err)
	}
	var got []flow
	for _, f := range seen {
		if slices.Contains(forged, f) {
			got = append(got, f)
		}
	}
	return got
}

// forgedFlows are UDP datagrams and TCP SYNs from each source to dst.
func forgedFlows(dst netip.Addr, sources ...string) []flow {
	var out []flow
	for i, s := range sources {
		for _, proto := range []byte{unix.IPPROTO_UDP, unix.IPPROTO_TCP} {
			out = append(out, flow{src: netip.MustParseAddr(s), dst: dst, proto: proto, sport: 40000, dport: uint16(41000 + i)})
		}
	}
	return out
}

func podInterface(pod dataplane.Pod) string { return linux.HostIfName(pod.PodKey) }

// A pod sends from its own addresses only: forged sources (another pod's,
// an outside host's, the node's) are dropped on the way to a pod of the
// node and to a host beyond the uplink, and counted; its own go through.
// Without the table they would arrive; Init (a restarted vcoild) makes it
// again with the pods' elements.
func TestSourceValidationDropsForgedSources(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	l := newLab(t, labOptions{cfg: linux.Config{Registry: reg}})
	podA, a := l.addPod("pod-a", "198.19.0.5", "2001:db8:19::5")
	_, b := l.addPod("pod-b", "198.19.0.6", "2001:db8:19::6")
	if err := l.dp.CheckPod(t.Context(), podA); err != nil {
		t.Fatal(err)
	}
	atB, atRouter := newCapture(t, b, "eth0"), newCapture(t, l.router, "to-node")

	type target struct {
		name     string
		recv     *capture
		dst      string
		forged   []string
		family   string
		ownSrc   string
		ctrlPort uint16
	}
	targets := []target{
		{"pod b, IPv4", atB, "198.19.0.6", []string{"198.19.0.6", "198.51.100.77", nodeIPv4, "10.96.0.10"}, "ipv4", "198.19.0.5", 42001},
		{"external, IPv4", atRouter, externalIPv4, []string{"198.19.0.6", "198.51.100.77", nodeIPv4, "10.96.0.10"}, "ipv4", "198.19.0.5", 42002},
		{"pod b, IPv6", atB, "2001:db8:19::6", []string{"2001:db8:19::6", "2001:db8:51::77", nodeIPv6, "fd00:96::10"}, "ipv6", "2001:db8:19::5", 42003},
		{"external, IPv6", atRouter, externalIPv6, []string{"2001:db8:19::6", "2001:db8:51::77", nodeIPv6, "fd00:96::10"}, "ipv6", "2001:db8:19::5", 42004},
	}
	for _, tg := range targets {
		dst := netip.MustParseAddr(tg.dst)
		forged := forgedFlows(dst, tg.forged...)
		control := flow{src: netip.MustParseAddr(tg.ownSrc), dst: dst, proto: unix.IPPROTO_UDP, sport: 40000, dport: tg.ctrlPort}
		before := drops(t, reg)[tg.family]
		if got := probe(t, a, tg.recv, forged, control); len(got) > 0 {
			t.Errorf("%s: forged packets arrived: %v", tg.name, got)
		}
		waitDrops(t, reg, tg.family, before+float64(len(forged)))
	}

	// Without the table, a forged packet arrives: the probes above see
	// what they claim to.
	forged := forgedFlows(netip.MustParseAddr(externalIPv4), "198.51.100.77")
	control := flow{src: netip.MustParseAddr("198.19.0.5"), dst: netip.MustParseAddr(externalIPv4), proto: unix.IPPROTO_UDP, sport: 40000, dport: 42010}
	l.node.Exec("nft", "delete", "table", "inet", "vcoil-source")
	if err := l.dp.Healthy(t.Context()); err == nil || !strings.Contains(err.Error(), "vcoil-source is missing") {
		t.Errorf("Healthy without the table: %v", err)
	}
	if got := probe(t, a, atRouter, forged, control); len(got) != len(forged) {
		t.Fatalf("without the table, forged packets seen %v, want %v", got, forged)
	}
	// A restarted vcoild's Init makes the table with the pods' elements.
	if err := l.newDataplane(linux.Config{}).Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := l.dp.Healthy(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := l.dp.CheckPod(t.Context(), podA); err != nil {
		t.Fatal(err)
	}
	control.dport++
	if got := probe(t, a, atRouter, forged, control); len(got) > 0 {
		t.Errorf("after Init, forged packets arrived: %v", got)
	}
	exchange(t, a, b, "198.19.0.6:8080")
	exchange(t, a, b, "[2001:db8:19::6]:8080")
}

// elementsOf lists the elements of the table's sets that name link.
func elementsOf(t *testing.T, node *netnstest.NS, link string) []string {
	t.Helper()
	var out []string
	for _, set := range []string{"allow4", "allow6"} {
		text := node.Exec("nft", "list", "set", "inet", "vcoil-source", set)
		_, elems, _ := strings.Cut(text, "elements = {")
		elems, _, _ = strings.Cut(elems, "}")
		for _, e := range strings.Split(elems, ",") {
			if e = strings.TrimSpace(e); strings.Contains(e, `"`+link+`"`) {
				out = append(out, e)
			}
		}
	}
	slices.Sort(out)
	return out
}

// A pod with SourcePrefixes sends from inside them, not from beside them;
// CheckPod reports missing elements, SetupPod writes them again; after
// TeardownPod (also of a pod whose namespace is gone) its elements are
// gone, and Init removes those of veths that no longer exist.
func TestSourcePrefixesAndTheElementsLifecycle(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	l := newLab(t, labOptions{cfg: linux.Config{Registry: reg}})
	pn := netnstest.New(t, "pod-p")
	pod := podFor(pn, "c-pod-p", "198.19.0.7", "2001:db8:19::7")
	pod.SourcePrefixes = []netip.Prefix{netip.MustParsePrefix("100.64.77.0/24"), netip.MustParsePrefix("2001:db8:77::/64")}
	if _, err := l.dp.SetupPod(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	host := podInterface(pod)
	want := []string{`"` + host + `" . 100.64.77.0/24`, `"` + host + `" . 198.19.0.7`, `"` + host + `" . 2001:db8:19::7`, `"` + host + `" . 2001:db8:77::/64`}
	if got := elementsOf(t, l.node, host); !slices.Equal(got, want) {
		t.Fatalf("elements %q, want %q", got, want)
	}
	atRouter := newCapture(t, l.router, "to-node")
	ext4, ext6 := netip.MustParseAddr(externalIPv4), netip.MustParseAddr(externalIPv6)
	inside := []flow{
		{src: netip.MustParseAddr("100.64.77.9"), dst: ext4, proto: unix.IPPROTO_UDP, sport: 40000, dport: 43001},
		{src: netip.MustParseAddr("2001:db8:77::9"), dst: ext6, proto: unix.IPPROTO_TCP, sport: 40000, dport: 43002},
	}
	beside := forgedFlows(ext4, "100.64.78.9")
	// A control per family: each family's packets keep their order, not
	// one family's against the other's (neighbour resolution holds some).
	control4 := flow{src: pod.IPv4, dst: ext4, proto: unix.IPPROTO_UDP, sport: 40000, dport: 43003}
	control6 := flow{src: pod.IPv6, dst: ext6, proto: unix.IPPROTO_UDP, sport: 40000, dport: 43004}
	sendRaw(t, pn, append(slices.Clone(inside), beside...)...)
	sendRaw(t, pn, control4, control6)
	var seen []flow
	for _, control := range []flow{control4, control6} {
		if slices.Contains(seen, control) {
			continue
		}
		more, err := atRouter.until(t, 10*time.Second, func(f flow) bool { return f == control })
		if err != nil {
			t.Fatalf("control %s: %v", control, err)
		}
		seen = append(seen, more...)
	}
	for _, f := range inside {
		if !slices.Contains(seen, f) {
			t.Errorf("%s from inside the pod's prefixes did not arrive", f)
		}
	}
	for _, f := range beside {
		if slices.Contains(seen, f) {
			t.Errorf("%s from outside the pod's prefixes arrived", f)
		}
	}

	// CheckPod names a missing element; SetupPod writes it again.
	l.node.Exec("nft", "delete", "element", "inet", "vcoil-source", "allow4", "{ "+host+" . 100.64.77.0/24 }")
	if err := l.dp.CheckPod(t.Context(), pod); err == nil || !strings.Contains(err.Error(), host+" . 100.64.77.0/24 of set allow4 is missing") {
		t.Errorf("CheckPod without an element: %v", err)
	}
	if _, err := l.dp.SetupPod(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	if err := l.dp.CheckPod(t.Context(), pod); err != nil {
		t.Fatal(err)
	}

	// A restart keeps the prefixes of a pod whose veth exists and removes
	// the elements of a veth that is gone.
	l.node.Exec("nft", "add", "element", "inet", "vcoil-source", "allow4", "{ vcoil00deadbeef . 198.19.0.99 }")
	if err := l.newDataplane(linux.Config{}).Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := elementsOf(t, l.node, "vcoil00deadbeef"); len(got) != 0 {
		t.Errorf("Init kept the elements of a gone veth: %q", got)
	}
	if got := elementsOf(t, l.node, host); !slices.Equal(got, want) {
		t.Errorf("after Init, elements %q, want %q", got, want)
	}

	// TeardownPod removes them, also when the namespace is gone first.
	if err := l.dp.TeardownPod(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	if got := elementsOf(t, l.node, host); len(got) != 0 {
		t.Errorf("after TeardownPod, elements %q", got)
	}
	pod2, n2 := l.addPod("pod-q", "198.19.0.8", "")
	n2.Remove()
	if err := l.dp.TeardownPod(t.Context(), dataplane.Pod{PodKey: pod2.PodKey}); err != nil {
		t.Fatal(err)
	}
	if got := elementsOf(t, l.node, podInterface(pod2)); len(got) != 0 {
		t.Errorf("after TeardownPod of a gone namespace, elements %q", got)
	}
}

// IPv6 neighbour discovery works through the guard: from the pods'
// link-local addresses, after the entries were flushed and when they are
// stale; a router advertisement from a pod is dropped even from the pod's
// own address.
func TestSourceValidationKeepsNeighbourDiscovery(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	l := newLab(t, labOptions{cfg: linux.Config{Registry: reg}})
	podA, a := l.addPod("pod-a", "198.19.0.5", "2001:db8:19::5")
	podB, b := l.addPod("pod-b", "198.19.0.6", "2001:db8:19::6")
	exchange(t, a, b, "[2001:db8:19::6]:8080")

	// Resolved again from nothing: the pods resolve fe80::1, the node
	// resolves the pods.
	for _, n := range []*netnstest.NS{a, b} {
		n.IP("-6", "neigh", "flush", "dev", "eth0")
	}
	for _, p := range []dataplane.Pod{podA, podB} {
		l.node.IP("-6", "neigh", "flush", "dev", podInterface(p))
	}
	exchange(t, a, b, "[2001:db8:19::6]:8081")
	neighbourReachable(t, a, "fe80::1", "eth0")

	// Stale entries are probed (unicast solicitations) and confirmed.
	a.IP("-6", "neigh", "change", "fe80::1", "dev", "eth0", "nud", "stale")
	l.node.IP("-6", "neigh", "change", "2001:db8:19::5", "dev", podInterface(podA), "nud", "stale")
	exchange(t, a, b, "[2001:db8:19::6]:8082")
	exchange(t, b, a, "[2001:db8:19::5]:8083")

	before := drops(t, reg)["ipv6"]
	sendRA(t, a, "eth0", podA.IPv6)
	waitDrops(t, reg, "ipv6", before+1)
}

// neighbourReachable waits until n's entry for addr on link is REACHABLE.
func neighbourReachable(t *testing.T, n *netnstest.NS, addr, link string) {
	t.Helper()
	poll.Eventually(t, 10*time.Second, func() error {
		out := n.IP("-6", "neigh", "show", addr, "dev", link)
		if !strings.Contains(out, "REACHABLE") {
			return fmt.Errorf("neighbour %s on %s: %q", addr, link, out)
		}
		return nil
	})
}

// A pod cannot reach what listens on the node's 127.0.0.1, even where its
// veth has route_localnet=1 (portmap sets it for hostPorts): its SYN to
// 127.0.0.1 is dropped. Without the table the node would answer. A hostPort
// as portmap makes it, reached from the node's 127.0.0.1, still works:
// the pod's replies go to the masqueraded address until conntrack, after
// the guard, turns them back.
func TestPodCannotReachTheNodesLoopback(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	l := newLab(t, labOptions{cfg: linux.Config{Registry: reg}})
	podA, a := l.addPod("pod-a", "198.19.0.5", "")
	host := podInterface(podA)
	l.node.Sysctl("net.ipv4.conf."+host+".route_localnet", "1")
	l.node.Listen("tcp", "127.0.0.1:7070")
	link, err := l.node.Netlink().LinkByName(host)
	if err != nil {
		t.Fatal(err)
	}
	mac := link.Attrs().HardwareAddr
	atPod := newCapture(t, a, "eth0")
	loopback := netip.MustParseAddr("127.0.0.1")
	syn := flow{src: podA.IPv4, dst: loopback, proto: unix.IPPROTO_TCP, sport: 40001, dport: 7070}
	isAnswer := func(f flow) bool { return f.src == loopback && f.sport == 7070 && f.dport == syn.sport }

	before := drops(t, reg)["ipv4"]
	injectFrame(t, a, "eth0", mac, syn)
	waitDrops(t, reg, "ipv4", before+1)
	// The drop was counted at prerouting: no answer can follow. A ping
	// of the gateway orders what the capture reads after it.
	ping(t, a, "169.254.1.1")
	if seen := atPod.drain(t); slices.ContainsFunc(seen, isAnswer) {
		t.Errorf("the node answered a SYN to its 127.0.0.1: %v", seen)
	}

	// Control: without the table the node answers.
	l.node.Exec("nft", "delete", "table", "inet", "vcoil-source")
	syn.sport++
	injectFrame(t, a, "eth0", mac, syn)
	if _, err := atPod.until(t, 10*time.Second, isAnswer); err != nil {
		t.Fatalf("without the table, no answer to a SYN to 127.0.0.1 (%v): the test proves nothing", err)
	}
	if err := l.dp.Init(t.Context()); err != nil {
		t.Fatal(err)
	}

	// A hostPort as portmap writes it: DNAT of the node's 127.0.0.1:8080
	// to the pod, masquerade of what leaves 127.0.0.1 for a pod.
	portmap := strings.Join([]string{
		"add table ip hostport",
		"add chain ip hostport output { type nat hook output priority -100 ; }",
		"add chain ip hostport postrouting { type nat hook postrouting priority 100 ; }",
		"add rule ip hostport output ip daddr 127.0.0.1 tcp dport 8080 dnat to 198.19.0.5:80",
		`add rule ip hostport postrouting ip saddr 127.0.0.0/8 oifname "vcoil*" masquerade`,
	}, "\n")
	if _, err := l.node.TryExec(t.Context(), "sh", "-c", "echo '"+portmap+"' | nft -f -"); err != nil {
		t.Fatal(err)
	}
	a.ServeTCPEcho("198.19.0.5:80")
	poll.Eventually(t, 10*time.Second, func() error {
		c, err := l.node.Dial(t.Context(), "tcp", "127.0.0.1:8080")
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Write([]byte("vcoil")); err != nil {
			return err
		}
		buf := make([]byte, 5)
		if _, err := c.Read(buf); err != nil || string(buf) != "vcoil" {
			return fmt.Errorf("echo %q %v", buf, err)
		}
		return nil
	})
}
