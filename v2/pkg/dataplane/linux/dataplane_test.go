package linux_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vcoil/vcoil/v2/internal/netnstest"
	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/linux"
)

func TestSetupPodGivesThePodItsAddressesAndRoutesOnly(t *testing.T) {
	for _, tc := range []struct {
		name           string
		v4, v6         string
		podRoutes4     []string
		podRoutes6     []string
		nodeRoutes4    func(host string) []string
		nodeRoutes6    func(host string) []string
		podAddrs       []string
		gatewayAddrsOf func(host string) []string
	}{
		{
			name: "a dual-stack pod", v4: "198.19.0.5", v6: "2001:db8:19::5",
			podRoutes4:  []string{"169.254.1.1 dev eth0 scope link", "default via 169.254.1.1 dev eth0"},
			podRoutes6:  []string{"default via fe80::1 dev eth0", "fe80::/64 dev eth0 proto kernel"},
			nodeRoutes4: func(h string) []string { return []string{"198.19.0.5 dev " + h + " scope link proto 31"} },
			nodeRoutes6: func(h string) []string { return []string{"2001:db8:19::5 dev " + h + " proto 31"} },
			podAddrs:    []string{"198.19.0.5/32 scope global", "2001:db8:19::5/128 scope global"},
			gatewayAddrsOf: func(string) []string {
				return []string{"169.254.1.1/32 scope host", "fe80::1/64 scope link"}
			},
		},
		{
			name: "an IPv4-only pod", v4: "198.19.0.6",
			podRoutes4:     []string{"169.254.1.1 dev eth0 scope link", "default via 169.254.1.1 dev eth0"},
			podRoutes6:     []string{"fe80::/64 dev eth0 proto kernel"},
			nodeRoutes4:    func(h string) []string { return []string{"198.19.0.6 dev " + h + " scope link proto 31"} },
			nodeRoutes6:    func(string) []string { return nil },
			podAddrs:       []string{"198.19.0.6/32 scope global"},
			gatewayAddrsOf: func(string) []string { return []string{"169.254.1.1/32 scope host"} },
		},
		{
			name: "an IPv6-only pod", v6: "2001:db8:19::7",
			podRoutes6:     []string{"default via fe80::1 dev eth0", "fe80::/64 dev eth0 proto kernel"},
			nodeRoutes4:    func(string) []string { return nil },
			nodeRoutes6:    func(h string) []string { return []string{"2001:db8:19::7 dev " + h + " proto 31"} },
			podAddrs:       []string{"2001:db8:19::7/128 scope global"},
			gatewayAddrsOf: func(string) []string { return []string{"fe80::1/64 scope link"} },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := newLab(t, labOptions{})
			podNS := netnstest.New(t, "pod")
			pod := podFor(podNS, "c1", tc.v4, tc.v6)
			ifs, err := l.dp.SetupPod(t.Context(), pod)
			if err != nil {
				t.Fatalf("SetupPod: %v", err)
			}
			host := linux.HostIfName(pod.PodKey)
			if ifs.HostIfName != host || ifs.MTU != 1500 || ifs.HostMAC == "" || ifs.PodMAC == "" {
				t.Fatalf("SetupPod returned %+v, want host %s, MTU 1500 and both MACs", ifs, host)
			}

			// The pod: its addresses and the routes to the gateway, nothing else.
			got := slices.DeleteFunc(addrs(t, podNS, "dev", "eth0"), func(a string) bool { return strings.HasPrefix(a, "fe80:") })
			if diff := diffLines(tc.podAddrs, got); diff != "" {
				t.Errorf("pod addresses, link-local left out:\n%s", diff)
			}
			if diff := diffLines(tc.podRoutes4, routes(t, podNS, "-4", "route")); diff != "" {
				t.Errorf("pod IPv4 routes:\n%s", diff)
			}
			if diff := diffLines(tc.podRoutes6, routes(t, podNS, "-6", "route")); diff != "" {
				t.Errorf("pod IPv6 routes:\n%s", diff)
			}
			var link []struct {
				MTU     int    `json:"mtu"`
				Address string `json:"address"`
				Ifalias string `json:"ifalias"`
			}
			if err := json.Unmarshal([]byte(podNS.IP("-j", "link", "show", "eth0")), &link); err != nil || len(link) != 1 {
				t.Fatalf("pod eth0: %v", err)
			}
			if link[0].MTU != 1500 || link[0].Address != ifs.PodMAC {
				t.Errorf("pod eth0 has MTU %d and MAC %s, want 1500 and %s", link[0].MTU, link[0].Address, ifs.PodMAC)
			}

			// The node: the veth with its alias and gateway addresses, a route per address in table 116.
			if err := json.Unmarshal([]byte(l.node.IP("-j", "link", "show", host)), &link); err != nil || len(link) != 1 {
				t.Fatalf("node veth: %v", err)
			}
			if want := "vcoil@2 c1 eth0"; link[0].Ifalias != want || link[0].Address != ifs.HostMAC {
				t.Errorf("node veth has alias %q and MAC %s, want %q and %s", link[0].Ifalias, link[0].Address, want, ifs.HostMAC)
			}
			got = slices.DeleteFunc(addrs(t, l.node, "dev", host), func(a string) bool {
				return strings.HasPrefix(a, "fe80:") && !strings.HasPrefix(a, "fe80::1/")
			})
			if diff := diffLines(tc.gatewayAddrsOf(host), got); diff != "" {
				t.Errorf("node veth addresses, its own link-local left out:\n%s", diff)
			}
			if diff := diffLines(tc.nodeRoutes4(host), routes(t, l.node, "-4", "route", "table", "116")); diff != "" {
				t.Errorf("node IPv4 table 116:\n%s", diff)
			}
			if diff := diffLines(tc.nodeRoutes6(host), routes(t, l.node, "-6", "route", "table", "116")); diff != "" {
				t.Errorf("node IPv6 table 116:\n%s", diff)
			}
			for key, want := range map[string]string{
				"net.ipv4.ip_forward":                   "1",
				"net.ipv6.conf.all.forwarding":          "1",
				"net/ipv4/conf/" + host + "/forwarding": "1",
			} {
				if got := l.node.ReadSysctl(key); got != want {
					t.Errorf("node sysctl %s = %s, want %s", key, got, want)
				}
			}
			if tc.v6 != "" {
				if got := l.node.ReadSysctl("net/ipv6/conf/" + host + "/accept_ra"); got != "0" {
					t.Errorf("node veth accepts router advertisements from the pod (accept_ra=%s)", got)
				}
			}
			if err := l.dp.CheckPod(t.Context(), pod); err != nil {
				t.Errorf("CheckPod right after SetupPod: %v", err)
			}
		})
	}
}

func TestInitInstallsOneRulePerFamilyAndHealthyReportsWhatIsMissing(t *testing.T) {
	t.Parallel()
	l := newLab(t, labOptions{})
	if err := l.dp.Init(t.Context()); err != nil {
		t.Fatalf("second Init: %v", err)
	}
	for _, family := range []string{"-4", "-6"} {
		out := l.node.IP(family, "rule", "show")
		if n := strings.Count(out, "2000:\tfrom all lookup 116"); n != 1 {
			t.Errorf("ip %s rule show has %d pod table rules after two Inits, want 1:\n%s", family, n, out)
		}
	}
	if err := l.dp.Healthy(t.Context()); err != nil {
		t.Fatalf("Healthy after Init: %v", err)
	}

	l.node.IP("-6", "rule", "del", "priority", "2000")
	l.node.Sysctl("net.ipv4.ip_forward", "0")
	err := l.dp.Healthy(t.Context())
	if err == nil || !strings.Contains(err.Error(), "IPv6 rule from all lookup 116 priority 2000 is missing") ||
		!strings.Contains(err.Error(), "net/ipv4/ip_forward is 0") || strings.Contains(err.Error(), "IPv4 rule") {
		t.Fatalf("Healthy = %v, want the missing IPv6 rule and ip_forward named, and nothing about IPv4's rule", err)
	}
	if err := l.dp.Init(t.Context()); err != nil {
		t.Fatalf("Init to repair: %v", err)
	}
	if err := l.dp.Healthy(t.Context()); err != nil {
		t.Fatalf("Healthy after the repair: %v", err)
	}
}

func TestHealthyBeforeInitNamesTheMissingRules(t *testing.T) {
	t.Parallel()
	netnstest.RequireRoot(t)
	node := netnstest.New(t, "node")
	dp, err := linux.New(linux.Config{NodeNetns: node.Path(), PodTable: 200, PodRulePriority: 1500}, logrFor(t))
	if err != nil {
		t.Fatal(err)
	}
	err = dp.Healthy(t.Context())
	if err == nil || !strings.Contains(err.Error(), "IPv4 rule from all lookup 200 priority 1500 is missing") {
		t.Fatalf("Healthy before Init = %v, want the missing rule of table 200 named", err)
	}
	if err := dp.Init(t.Context()); err != nil {
		t.Fatal(err)
	}
	if out := node.IP("-6", "rule", "show"); !strings.Contains(out, "1500:\tfrom all lookup 200") {
		t.Fatalf("configured table and priority not used:\n%s", out)
	}
}

func TestPodReachesItsGateway(t *testing.T) {
	t.Parallel()
	l := newLab(t, labOptions{})
	_, pod := l.addPod("pod", "198.19.0.5", "2001:db8:19::5")
	ping(t, pod, "169.254.1.1")
	ping(t, pod, "fe80::1%eth0")
}

func TestTCPBetweenTwoPodsOfOneNode(t *testing.T) {
	t.Parallel()
	l := newLab(t, labOptions{})
	_, a := l.addPod("pod-a", "198.19.0.5", "2001:db8:19::5")
	_, b := l.addPod("pod-b", "198.19.0.6", "2001:db8:19::6")
	if got := exchange(t, a, b, "198.19.0.6:8080"); got != "198.19.0.5" {
		t.Errorf("pod b saw IPv4 client %s, want pod a's address", got)
	}
	if got := exchange(t, b, a, "[2001:db8:19::5]:8080"); got != "2001:db8:19::6" {
		t.Errorf("pod a saw IPv6 client %s, want pod b's address", got)
	}
}

func TestTCPBetweenPodAndNodeUsesTheNodeAddress(t *testing.T) {
	t.Parallel()
	l := newLab(t, labOptions{})
	_, pod := l.addPod("pod", "198.19.0.5", "2001:db8:19::5")
	if got := exchange(t, pod, l.node, nodeIPv4+":9000"); got != "198.19.0.5" {
		t.Errorf("node saw client %s, want the pod's IPv4 address", got)
	}
	if got := exchange(t, pod, l.node, "["+nodeIPv6+"]:9000"); got != "2001:db8:19::5" {
		t.Errorf("node saw client %s, want the pod's IPv6 address", got)
	}
	// The node's own packets to a pod come from the node's address, not from
	// the gateway address the node-side veth holds.
	if got := exchange(t, l.node, pod, "198.19.0.5:9001"); got != nodeIPv4 {
		t.Errorf("pod saw the node as %s, want %s", got, nodeIPv4)
	}
	if got := exchange(t, l.node, pod, "[2001:db8:19::5]:9001"); got != nodeIPv6 {
		t.Errorf("pod saw the node as %s, want %s", got, nodeIPv6)
	}
}

func TestPodReachesAHostBeyondTheUplink(t *testing.T) {
	t.Parallel()
	l := newLab(t, labOptions{})
	_, pod := l.addPod("pod", "198.19.0.5", "2001:db8:19::5")
	if got := exchange(t, pod, l.router, externalIPv4+":443"); got != "198.19.0.5" {
		t.Errorf("external host saw %s, want the pod's address", got)
	}
	if got := exchange(t, pod, l.router, "["+externalIPv6+"]:443"); got != "2001:db8:19::5" {
		t.Errorf("external host saw %s, want the pod's address", got)
	}
}

func TestMTU(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts labOptions
		want int
	}{
		{"comes from the uplink of the default route", labOptions{uplinkMTU: 1400}, 1400},
		{"comes from the config over the uplink", labOptions{uplinkMTU: 1400, cfg: linux.Config{MTU: 1300}}, 1300},
		{"comes from the network configuration over both", labOptions{uplinkMTU: 1400, cfg: linux.Config{MTU: 1300}, podMTU: 1280}, 1280},
		{"is 1500 without a default route", labOptions{uplinkMTU: 9000, noDefaultRoute: true}, 1500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := newLab(t, tc.opts)
			pod, podNS := l.addPod("pod", "198.19.0.5", "2001:db8:19::5")
			for _, n := range []*netnstest.NS{podNS, l.node} {
				dev := "eth0"
				if n == l.node {
					dev = linux.HostIfName(pod.PodKey)
				}
				var link []struct {
					MTU int `json:"mtu"`
				}
				if err := json.Unmarshal([]byte(n.IP("-j", "link", "show", dev)), &link); err != nil || len(link) != 1 {
					t.Fatalf("link %s: %v", dev, err)
				}
				if link[0].MTU != tc.want {
					t.Errorf("MTU of %s is %d, want %d", dev, link[0].MTU, tc.want)
				}
			}
			// The MTU holds for real traffic: a full-size packet that must not
			// be fragmented reaches the gateway, a byte more does not leave.
			size := tc.want - 28
			poll.Eventually(t, 10*time.Second, func() error {
				_, err := podNS.TryExec(t.Context(), "ping", "-n", "-c1", "-W1", "-M", "do", "-s", itoa(size), "169.254.1.1")
				return err
			})
			if _, err := podNS.TryExec(t.Context(), "ping", "-n", "-c1", "-W1", "-M", "do", "-s", itoa(size+1), "169.254.1.1"); err == nil {
				t.Errorf("a %d-byte packet left a pod whose MTU is %d", size+29, tc.want)
			}
		})
	}
}

func TestMTUIsDetectedOnceTheNodeHasADefaultRouteAndThenKept(t *testing.T) {
	t.Parallel()
	l := newLab(t, labOptions{uplinkMTU: 1400, noDefaultRoute: true})
	mtuOf := func(n *netnstest.NS) int {
		var link []struct {
			MTU int `json:"mtu"`
		}
		if err := json.Unmarshal([]byte(n.IP("-j", "link", "show", "eth0")), &link); err != nil || len(link) != 1 {
			t.Fatalf("eth0 of %s: %v", n, err)
		}
		return link[0].MTU
	}
	_, early := l.addPod("early", "198.19.0.5", "")
	l.node.IP("route", "add", "default", "via", routerIPv4)
	_, later := l.addPod("later", "198.19.0.6", "")
	l.node.IP("link", "set", "uplink", "mtu", "1300")
	_, last := l.addPod("last", "198.19.0.7", "")
	if got := []int{mtuOf(early), mtuOf(later), mtuOf(last)}; !slices.Equal(got, []int{1500, 1400, 1400}) {
		t.Errorf("pod MTUs = %v, want 1500 before the default route, then the uplink's 1400 detected once", got)
	}
}

func TestSetupPodTwiceKeepsTheWiring(t *testing.T) {
	t.Parallel()
	l := newLab(t, labOptions{})
	pod, podNS := l.addPod("pod", "198.19.0.5", "2001:db8:19::5")
	eth0 := func() string {
		l, err := podNS.Netlink().LinkByName("eth0")
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("index %d, MAC %s", l.Attrs().Index, l.Attrs().HardwareAddr)
	}
	before := eth0()
	routesBefore := routes(t, l.node, "route", "table", "116")
	first, err := l.dp.SetupPod(t.Context(), pod)
	if err != nil {
		t.Fatal(err)
	}
	second, err := l.newDataplane(linux.Config{}).SetupPod(t.Context(), pod)
	if err != nil {
		t.Fatal(err)
	}
	if first != second {
		t.Errorf("SetupPod again returned %+v, then %+v", first, second)
	}
	if after := eth0(); after != before {
		t.Errorf("pod eth0 changed (recreated?):\nbefore %s\nafter  %s", before, after)
	}
	if diff := diffLines(routesBefore, routes(t, l.node, "route", "table", "116")); diff != "" {
		t.Errorf("table 116 changed:\n%s", diff)
	}
}

func TestSetupPodWithOtherAddressesRewiresThePod(t *testing.T) {
	t.Parallel()
	l := newLab(t, labOptions{})
	pod, podNS := l.addPod("pod", "198.19.0.5", "2001:db8:19::5")
	ping(t, l.node, "198.19.0.5")

	moved := podFor(podNS, pod.ContainerID, "198.19.0.9", "")
	if _, err := l.dp.SetupPod(t.Context(), moved); err != nil {
		t.Fatalf("SetupPod with other addresses: %v", err)
	}
	host := linux.HostIfName(pod.PodKey)
	if diff := diffLines([]string{"198.19.0.9 dev " + host + " scope link proto 31"}, routes(t, l.node, "route", "table", "116")); diff != "" {
		t.Errorf("table 116 after rewiring:\n%s", diff)
	}
	if got := routes(t, l.node, "-6", "route", "table", "116"); len(got) != 0 {
		t.Errorf("the old IPv6 route stayed: %v", got)
	}
	got := slices.DeleteFunc(addrs(t, podNS, "dev", "eth0"), func(a string) bool { return strings.HasPrefix(a, "fe80:") })
	if diff := diffLines([]string{"198.19.0.9/32 scope global"}, got); diff != "" {
		t.Errorf("pod addresses after rewiring:\n%s", diff)
	}
	ping(t, l.node, "198.19.0.9")
	if err := l.dp.CheckPod(t.Context(), moved); err != nil {
		t.Errorf("CheckPod of the new wiring: %v", err)
	}
	if err := l.dp.CheckPod(t.Context(), pod); err == nil {
		t.Error("CheckPod of the old addresses passed")
	}
}

func TestTeardownPodLeavesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		// teardown does what the runtime does around DEL; it returns the
		// pod to pass.
		teardown func(t *testing.T, pod dataplane.Pod, podNS *netnstest.NS) dataplane.Pod
	}{
		{"when called twice", func(t *testing.T, pod dataplane.Pod, _ *netnstest.NS) dataplane.Pod {
			return pod
		}},
		{"after the pod's namespace was deleted", func(t *testing.T, pod dataplane.Pod, podNS *netnstest.NS) dataplane.Pod {
			podNS.Remove()
			return pod
		}},
		{"with only the key known", func(t *testing.T, pod dataplane.Pod, _ *netnstest.NS) dataplane.Pod {
			return dataplane.Pod{PodKey: pod.PodKey}
		}},
		{"with a netns path that no longer exists", func(t *testing.T, pod dataplane.Pod, _ *netnstest.NS) dataplane.Pod {
			pod.Netns = "/run/netns/vcoiltest-does-not-exist"
			return pod
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := newLab(t, labOptions{})
			pod, podNS := l.addPod("pod", "198.19.0.5", "2001:db8:19::5")
			_, keep := l.addPod("other", "198.19.0.6", "2001:db8:19::6")
			arg := tc.teardown(t, pod, podNS)
			for i := range 2 {
				if err := l.dp.TeardownPod(t.Context(), arg); err != nil {
					t.Fatalf("TeardownPod #%d: %v", i+1, err)
				}
			}
			host := linux.HostIfName(pod.PodKey)
			poll.Eventually(t, 5*time.Second, func() error {
				for _, args := range [][]string{{"-4", "route", "table", "116"}, {"-6", "route", "table", "116"}} {
					for _, r := range routes(t, l.node, args...) {
						if strings.Contains(r, host) || strings.Contains(r, "::5 ") || strings.HasPrefix(r, "198.19.0.5 ") {
							return errorf("route %s is still in table 116", r)
						}
					}
				}
				if slices.Contains(vcoilLinks(t, l.node), host) {
					return errorf("veth %s is still on the node", host)
				}
				return nil
			})
			if !podNS.Removed() {
				if out := podNS.IP("-o", "link", "show"); strings.Contains(out, "eth0") {
					t.Errorf("eth0 is still in the pod:\n%s", out)
				}
			}
			pods, err := l.dp.ListPods(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if len(pods) != 1 || pods[0].ContainerID != "c-other" {
				t.Errorf("ListPods after teardown = %+v, want only the other pod", pods)
			}
			// The other pod keeps its gateway, which every node-side veth holds.
			ping(t, keep, "169.254.1.1")
			ping(t, keep, "fe80::1%eth0")
			ping(t, l.node, "198.19.0.6")
		})
	}
}

func TestTeardownPodOfAPodNeverSetUpSucceeds(t *testing.T) {
	t.Parallel()
	l := newLab(t, labOptions{})
	if err := l.dp.TeardownPod(t.Context(), dataplane.Pod{PodKey: dataplane.PodKey{ContainerID: "never", IfName: "eth0"}}); err != nil {
		t.Fatalf("TeardownPod: %v", err)
	}
}

func TestTeardownPodLeavesAForeignLinkWithTheSameName(t *testing.T) {
	t.Parallel()
	l := newLab(t, labOptions{})
	key := dataplane.PodKey{ContainerID: "c1", IfName: "eth0"}
	host := linux.HostIfName(key)
	l.node.IP("link", "add", host, "type", "veth", "peer", "name", "foreign-peer")
	l.node.IP("link", "set", host, "alias", "someone else's")
	err := l.dp.TeardownPod(t.Context(), dataplane.Pod{PodKey: key})
	if err == nil || !strings.Contains(err.Error(), "leaving it alone") {
		t.Fatalf("TeardownPod = %v, want a refusal", err)
	}
	if !slices.Contains(vcoilLinks(t, l.node), host) {
		t.Fatal("the foreign link was deleted")
	}
}

func TestSetupPodReplacesAVethLeftWithoutItsAlias(t *testing.T) {
	t.Parallel()
	l := newLab(t, labOptions{})
	podNS := netnstest.New(t, "pod")
	pod := podFor(podNS, "c1", "198.19.0.5", "")
	// What a vcoild killed between creating the veth and labelling it leaves.
	l.node.IP("link", "add", linux.HostIfName(pod.PodKey), "type", "veth", "peer", "name", "eth0", "netns", podNS.Path())
	if _, err := l.dp.SetupPod(t.Context(), pod); err != nil {
		t.Fatalf("SetupPod over the half-made veth: %v", err)
	}
	ping(t, podNS, "169.254.1.1")
	if err := l.dp.TeardownPod(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	if links := vcoilLinks(t, l.node); len(links) != 0 {
		t.Errorf("veths left: %v", links)
	}
}

func TestListPodsAfterARestartFindsEveryPod(t *testing.T) {
	t.Parallel()
	l := newLab(t, labOptions{})
	a, _ := l.addPod("a", "198.19.0.5", "2001:db8:19::5")
	b, _ := l.addPod("b", "198.19.0.6", "")
	c, _ := l.addPod("c", "", "2001:db8:19::7")
	// Links that are not vcoil's pods: no alias, and a vcoil alias on a
	// link whose name does not match it.
	l.node.IP("link", "add", "vcoil-noalias", "type", "veth", "peer", "name", "x0")
	l.node.IP("link", "add", "decoy", "alias", "vcoil c-a eth0", "type", "veth", "peer", "name", "x1")

	restarted := l.newDataplane(linux.Config{})
	got, err := restarted.ListPods(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var want []dataplane.Pod
	for _, p := range []dataplane.Pod{a, b, c} {
		p.Netns = ""
		want = append(want, p)
	}
	if !reflect.DeepEqual(want, got) {
		t.Errorf("ListPods:\n got %+v\nwant %+v", got, want)
	}
}

func TestFailedSetupPodLeavesNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prepare func(l *lab, podNS *netnstest.NS) dataplane.Pod
		want    string
		// foreign is a link of the pod namespace that must survive.
		foreign string
	}{
		{
			name: "when the pod namespace refuses IPv6 after the veth exists",
			prepare: func(l *lab, podNS *netnstest.NS) dataplane.Pod {
				podNS.Sysctl("net.ipv6.conf.all.disable_ipv6", "1")
				podNS.Sysctl("net.ipv6.conf.default.disable_ipv6", "1")
				return podFor(podNS, "c1", "198.19.0.5", "2001:db8:19::5")
			},
			want: "add address 2001:db8:19::5/128 to eth0",
		},
		{
			name: "when the pod namespace already has the interface",
			prepare: func(l *lab, podNS *netnstest.NS) dataplane.Pod {
				podNS.IP("link", "add", "eth0", "type", "veth", "peer", "name", "eth0-peer")
				return podFor(podNS, "c1", "198.19.0.5", "2001:db8:19::5")
			},
			want:    "already has an interface eth0",
			foreign: "eth0",
		},
		{
			name: "when the pod namespace does not exist",
			prepare: func(l *lab, podNS *netnstest.NS) dataplane.Pod {
				pod := podFor(podNS, "c1", "198.19.0.5", "")
				pod.Netns = "/run/netns/vcoiltest-does-not-exist"
				return pod
			},
			want: "open pod network namespace /run/netns/vcoiltest-does-not-exist",
		},
		{
			name: "when the pod namespace is the node's",
			prepare: func(l *lab, podNS *netnstest.NS) dataplane.Pod {
				pod := podFor(podNS, "c1", "198.19.0.5", "")
				pod.Netns = l.node.Path()
				return pod
			},
			want: "is the node's",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := newLab(t, labOptions{})
			podNS := netnstest.New(t, "pod")
			pod := tc.prepare(l, podNS)
			_, err := l.dp.SetupPod(t.Context(), pod)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "c1/eth0") {
				t.Fatalf("SetupPod = %v, want an error naming the pod and containing %q", err, tc.want)
			}
			if links := vcoilLinks(t, l.node); len(links) != 0 {
				t.Errorf("node keeps veths %v", links)
			}
			for _, family := range []string{"-4", "-6"} {
				if r := routes(t, l.node, family, "route", "table", "116"); len(r) != 0 {
					t.Errorf("node keeps routes %v in table 116", r)
				}
			}
			out := podNS.IP("-o", "link", "show")
			if hasEth0 := strings.Contains(out, " eth0"); hasEth0 != (tc.foreign != "") {
				t.Errorf("pod links after the failure:\n%s", out)
			}
			if pods, err := l.dp.ListPods(t.Context()); err != nil || len(pods) != 0 {
				t.Errorf("ListPods = %v, %v; want nothing", pods, err)
			}
		})
	}
}

func TestCheckPodNamesWhatDiffers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(l *lab, pod dataplane.Pod, podNS *netnstest.NS) dataplane.Pod
		want   []string
	}{
		{"a pod wired as asked passes", func(l *lab, pod dataplane.Pod, _ *netnstest.NS) dataplane.Pod { return pod }, nil},
		{"another address in the pod", func(l *lab, pod dataplane.Pod, podNS *netnstest.NS) dataplane.Pod {
			podNS.IP("addr", "add", "198.19.0.99/32", "dev", "eth0")
			return pod
		}, []string{"address on eth0 in " + "*" + " 198.19.0.99/32 is unexpected"}},
		{"the pod's default route removed", func(l *lab, pod dataplane.Pod, podNS *netnstest.NS) dataplane.Pod {
			podNS.IP("-6", "route", "del", "default")
			return pod
		}, []string{"route in * default via fe80::1 is missing"}},
		{"the node's route to the pod removed", func(l *lab, pod dataplane.Pod, _ *netnstest.NS) dataplane.Pod {
			l.node.IP("route", "del", "198.19.0.5/32", "table", "116")
			return pod
		}, []string{"route table 116 via * 198.19.0.5/32 scope link proto 31 is missing"}},
		{"the node-side veth down and its MTU changed", func(l *lab, pod dataplane.Pod, _ *netnstest.NS) dataplane.Pod {
			l.node.IP("link", "set", linux.HostIfName(pod.PodKey), "down", "mtu", "1400")
			return pod
		}, []string{"MTU of vcoil* is 1400, want 1500", "vcoil* is down"}},
		{"asked with other addresses", func(l *lab, pod dataplane.Pod, _ *netnstest.NS) dataplane.Pod {
			pod.IPv4 = netip4("198.19.0.8")
			return pod
		}, []string{"198.19.0.8/32 is missing", "198.19.0.5/32 is unexpected"}},
		{"the veth deleted", func(l *lab, pod dataplane.Pod, _ *netnstest.NS) dataplane.Pod {
			l.node.IP("link", "del", linux.HostIfName(pod.PodKey))
			return pod
		}, []string{"node-side veth vcoil* is missing"}},
		{"the pod namespace gone", func(l *lab, pod dataplane.Pod, podNS *netnstest.NS) dataplane.Pod {
			podNS.Remove()
			return pod
		}, []string{"open pod network namespace"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := newLab(t, labOptions{})
			pod, podNS := l.addPod("pod", "198.19.0.5", "2001:db8:19::5")
			asked := tc.break_(l, pod, podNS)
			err := l.dp.CheckPod(t.Context(), asked)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("CheckPod: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("CheckPod passed")
			}
			for _, w := range tc.want {
				if !matchWildcard(err.Error(), w) {
					t.Errorf("CheckPod = %v\nwant it to say %q", err, w)
				}
			}
			if !strings.HasPrefix(err.Error(), "check pod c-pod/eth0: ") {
				t.Errorf("CheckPod error does not name the pod: %v", err)
			}
		})
	}
}
