package vpp

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.fd.io/govpp/binapi/interface_types"
	"go.fd.io/govpp/binapi/ip_types"
	"go.fd.io/govpp/binapi/nat44_ed"

	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
)

// hostPortConfig: a TAP node whose uplink host-up0 (interface 1,
// withAddressedUplink) holds 198.18.0.11/24 and 198.18.0.12/24, given by
// someone else; loopback 2, interconnect 3, pods from 4.
func hostPortConfig() Config {
	cfg := testConfig()
	cfg.Uplink = "host-up0"
	return cfg
}

func withAddressedUplink(f *fakeVPP) {
	f.add(&fakeIf{name: "host-up0", mtu: 1500, addrs: []netip.Prefix{
		netip.MustParsePrefix("198.18.0.11/24"), netip.MustParsePrefix("198.18.0.12/24"), netip.MustParsePrefix("fd00:18::11/64")}})
}

var (
	hpWeb = dataplane.PortMapping{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}
	hpDNS = dataplane.PortMapping{HostIP: netip.MustParseAddr("198.18.0.12"), HostPort: 5353, ContainerPort: 53, Protocol: "udp"}
)

// podHP is podA with a web hostPort on every uplink address, a DNS one on
// 198.18.0.12, and three VPP does not serve.
var podHP = func() dataplane.Pod {
	p := podA
	p.PortMappings = []dataplane.PortMapping{hpWeb, hpDNS,
		{HostPort: 9000, ContainerPort: 9000, Protocol: "sctp"},
		{HostIP: netip.MustParseAddr("fd00::1"), HostPort: 8080, ContainerPort: 80, Protocol: "tcp"},
		{HostIP: netip.MustParseAddr("203.0.113.9"), HostPort: 8081, ContainerPort: 80, Protocol: "tcp"},
	}
	return p
}()

// natLines keeps the NAT44 messages and the uplink's address dump: what
// hostPorts send, in order.
func natLines(msgs []string) []string {
	var out []string
	for _, m := range msgs {
		if strings.HasPrefix(m, "nat44") || m == "ip_address_dump 1 ip6=false" {
			out = append(out, m)
		}
	}
	return out
}

const (
	hpTagA = `"vcoil-hp@2 c0ffee eth0"`
	// hpFlags: NAT_IS_SELF_TWICE_NAT (2) | NAT_IS_OUT2IN_ONLY (4).
	hpFlags = "flags=6 ext_if=-1 vrf=0"
)

func hpAdd(rest string) string {
	return "nat44_add_del_static_mapping_v2 add=true " + rest + " " + hpFlags + " tag=" + hpTagA
}

func hpDel(rest string) string {
	return "nat44_add_del_static_mapping_v2 add=false " + rest + " " + hpFlags + ` tag=""`
}

// What podHP's ADD makes, after its interface: NAT44-ED on, the pod inside
// and outside, the uplink's addresses read, NAT forwarding, the uplink
// outside, then a mapping per served hostPort and uplink address.
var podHPAdd = []string{
	"nat44_ed_plugin_enable_disable enable=true sessions=0",
	"nat44_interface_add_del_feature add=true 4 flags=32",
	"nat44_interface_add_del_feature add=true 4 flags=0",
	"ip_address_dump 1 ip6=false",
	"nat44_forwarding_enable_disable enable=true",
	"nat44_interface_add_del_feature add=true 1 flags=0",
	hpAdd("proto=6 198.18.0.11:8080 -> 10.100.0.2:80"),
	hpAdd("proto=17 198.18.0.12:5353 -> 10.100.0.2:53"),
	hpAdd("proto=6 198.18.0.12:8080 -> 10.100.0.2:80"),
}

var podHPStatics = []string{
	hpAdd("proto=17 198.18.0.12:5353 -> 10.100.0.2:53"),
	hpAdd("proto=6 198.18.0.11:8080 -> 10.100.0.2:80"),
	hpAdd("proto=6 198.18.0.12:8080 -> 10.100.0.2:80"),
}

func TestHostPortsAreStaticMappingsMadeAtADDAndRemovedAtDEL(t *testing.T) {
	h := start(t, hostPortConfig(), func(h *harness) { withAddressedUplink(h.vpp) })
	h.vpp.take()
	// The first sync removes what an earlier vcoild left.
	wantLines(t, "kernel calls of the first sync", kernelLines(h.kernel.take(), "SyncHostPorts"), []string{"SyncHostPorts []"})
	if _, err := h.d.SetupPod(ctx(t), podHP); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "NAT messages of the ADD", natLines(h.vpp.take()), podHPAdd)
	wantLines(t, "VPP's static mappings", h.vpp.statics(), podHPStatics)
	// The node's own connections to them are DNATed in its kernel.
	wantLines(t, "kernel calls of the ADD", kernelLines(h.kernel.take(), "SyncHostPorts"), []string{
		"SyncHostPorts [198.18.0.11/6/8080->10.100.0.2:80 198.18.0.12/6/8080->10.100.0.2:80 198.18.0.12/17/5353->10.100.0.2:53]",
	})

	// A repeated ADD with the same hostPorts changes nothing; one with
	// other hostPorts sends only the difference.
	if _, err := h.d.SetupPod(ctx(t), podHP); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "NAT messages of a repeat", natLines(h.vpp.take()), nil)
	wantLines(t, "kernel calls of a repeat", kernelLines(h.kernel.take(), "SyncHostPorts"), nil)
	// A hostPort on 127.0.0.1 is the node's own: its kernel only, no
	// static mapping in VPP.
	changed := podHP
	changed.PortMappings = []dataplane.PortMapping{hpDNS, {HostPort: 8443, ContainerPort: 443, Protocol: "tcp", HostIP: netip.MustParseAddr("0.0.0.0")},
		{HostPort: 9443, ContainerPort: 443, Protocol: "tcp", HostIP: netip.MustParseAddr("127.0.0.1")}}
	if _, err := h.d.SetupPod(ctx(t), changed); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "NAT messages of an ADD with other hostPorts", natLines(h.vpp.take()), []string{
		hpDel("proto=6 198.18.0.11:8080 -> 10.100.0.2:80"),
		hpDel("proto=6 198.18.0.12:8080 -> 10.100.0.2:80"),
		hpAdd("proto=6 198.18.0.11:8443 -> 10.100.0.2:443"),
		hpAdd("proto=6 198.18.0.12:8443 -> 10.100.0.2:443"),
	})
	wantLines(t, "kernel calls of an ADD with other hostPorts", kernelLines(h.kernel.take(), "SyncHostPorts"), []string{
		"SyncHostPorts [127.0.0.1/6/9443->10.100.0.2:443 198.18.0.11/6/8443->10.100.0.2:443 198.18.0.12/6/8443->10.100.0.2:443 198.18.0.12/17/5353->10.100.0.2:53]",
	})

	if err := h.d.TeardownPod(ctx(t), dataplane.Pod{PodKey: podHP.PodKey}); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "kernel calls of the DEL", kernelLines(h.kernel.take(), "SyncHostPorts"), []string{"SyncHostPorts []"})
	wantLines(t, "NAT messages of the DEL", natLines(h.vpp.take()), []string{
		hpDel("proto=17 198.18.0.12:5353 -> 10.100.0.2:53"),
		hpDel("proto=6 198.18.0.11:8443 -> 10.100.0.2:443"),
		hpDel("proto=6 198.18.0.12:8443 -> 10.100.0.2:443"),
		"nat44_interface_add_del_feature add=false 4 flags=32",
		"nat44_interface_add_del_feature add=false 4 flags=0",
	})
	wantLines(t, "VPP's static mappings after the DEL", h.vpp.statics(), nil)
	// The uplink stays outside, for the hostPorts to come.
	h.vpp.mu.Lock()
	outside := h.vpp.natFeat[1][0]
	h.vpp.mu.Unlock()
	if !outside {
		t.Error("the DEL took the uplink's outside feature away")
	}
}

func TestHostPortsNeedAnUplinkAndIPv4(t *testing.T) {
	h := start(t, testConfig())
	h.vpp.take()
	if _, err := h.d.SetupPod(ctx(t), podHP); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "NAT messages of an ADD on a node without an uplink", natLines(h.vpp.take()), nil)

	h = start(t, hostPortConfig(), func(h *harness) { withAddressedUplink(h.vpp) })
	h.vpp.take()
	v6 := podHP
	v6.IPv4 = netip.Addr{}
	if _, err := h.d.SetupPod(ctx(t), v6); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "NAT messages of an IPv6-only pod's ADD", natLines(h.vpp.take()), nil)
}

// A hostPort another mapping holds (a Service's NodePort here) fails the
// ADD, naming it, and leaves nothing of the pod.
func TestAHostPortVPPMapsAlreadyFailsTheADDAndLeavesNothing(t *testing.T) {
	h := start(t, hostPortConfig(), func(h *harness) { withAddressedUplink(h.vpp) })
	svc := nat44_ed.Nat44AddDelStaticMappingV2{
		Flags: 8, LocalIPAddress: ip_types.IP4Address{10, 100, 0, 9}, LocalPort: 80,
		ExternalIPAddress: ip_types.IP4Address{198, 18, 0, 12}, ExternalPort: 8080, Protocol: 6,
		ExternalSwIfIndex: interface_types.InterfaceIndex(^uint32(0)), Tag: "vcoil-svc default/web",
	}
	h.vpp.mu.Lock()
	h.vpp.nat = true
	h.vpp.mu.Unlock()
	h.vpp.addStatic(svc)
	h.vpp.take()
	_, err := h.d.SetupPod(ctx(t), podHP)
	if err == nil || !strings.Contains(err.Error(), "VPP maps 198.18.0.12:8080/tcp already") {
		t.Fatalf("ADD of a hostPort VPP maps already: %v", err)
	}
	got := natLines(h.vpp.take())
	wantLines(t, "the last NAT messages", got[len(got)-5:], []string{
		hpAdd("proto=6 198.18.0.12:8080 -> 10.100.0.2:80"),
		hpDel("proto=6 198.18.0.11:8080 -> 10.100.0.2:80"),
		hpDel("proto=17 198.18.0.12:5353 -> 10.100.0.2:53"),
		"nat44_interface_add_del_feature add=false 4 flags=32",
		"nat44_interface_add_del_feature add=false 4 flags=0",
	})
	wantLines(t, "VPP's static mappings", h.vpp.statics(), []string{
		"nat44_add_del_static_mapping_v2 add=true proto=6 198.18.0.12:8080 -> 10.100.0.9:80 flags=8 ext_if=-1 vrf=0 tag=\"vcoil-svc default/web\"",
	})
	if pods, _ := h.d.ListPods(ctx(t)); len(pods) != 0 {
		t.Errorf("the failed pod is still held: %+v", pods)
	}
}

// After a VPP restart the mappings are made again with the pod, and the
// uplink is outside again with NAT forwarding.
func TestRestartedVPPGetsTheHostPortsBack(t *testing.T) {
	h := start(t, hostPortConfig(), func(h *harness) { withAddressedUplink(h.vpp) })
	if _, err := h.d.SetupPod(ctx(t), podHP); err != nil {
		t.Fatal(err)
	}
	h.vpp.take()
	h.vpp.restart(withAddressedUplink)
	poll.Eventually(t, 5*time.Second, func() error {
		h.d.mu.Lock()
		defer h.d.mu.Unlock()
		if !h.d.synced || h.d.pid != 101 {
			return fmt.Errorf("not synced with the new VPP: %v", h.d.why)
		}
		return nil
	})
	wantLines(t, "NAT messages of the replay", natLines(h.vpp.take()), []string{
		// The pod is wired again with its roles...
		"nat44_ed_plugin_enable_disable enable=true sessions=0",
		"nat44_interface_add_del_feature add=true 4 flags=32",
		"nat44_interface_add_del_feature add=true 4 flags=0",
		// ...then its hostPorts.
		"nat44_forwarding_enable_disable enable=true",
		"ip_address_dump 1 ip6=false",
		"nat44_static_mapping_dump",
		hpAdd("proto=6 198.18.0.11:8080 -> 10.100.0.2:80"),
		hpAdd("proto=17 198.18.0.12:5353 -> 10.100.0.2:53"),
		hpAdd("proto=6 198.18.0.12:8080 -> 10.100.0.2:80"),
		// The node's roles.
		"nat44_interface_add_del_feature add=true 1 flags=0",
	})
	wantLines(t, "VPP's static mappings after the restart", h.vpp.statics(), podHPStatics)
}

// A vcoild that restarts on a VPP that kept everything gets the pods'
// hostPorts from its checkpoint, keeps the mappings VPP holds, adds the
// missing ones and deletes the hostPort mappings no pod wants; the
// services renderer's are not touched.
func TestRestartedVcoildKeepsTheHostPortsItsCheckpointNames(t *testing.T) {
	cfg := hostPortConfig()
	h := start(t, cfg, func(h *harness) { withAddressedUplink(h.vpp) })
	if _, err := h.d.SetupPod(ctx(t), podHP); err != nil {
		t.Fatal(err)
	}
	stale := nat44_ed.Nat44AddDelStaticMappingV2{
		Flags: 6, LocalIPAddress: ip_types.IP4Address{10, 100, 0, 7}, LocalPort: 22,
		ExternalIPAddress: ip_types.IP4Address{198, 18, 0, 11}, ExternalPort: 2222, Protocol: 6,
		ExternalSwIfIndex: interface_types.InterfaceIndex(^uint32(0)), Tag: "vcoil-hp gone eth0",
	}
	svc := stale
	svc.ExternalPort, svc.Flags, svc.Tag = 30080, 8, "vcoil-svc default/web"
	h.vpp.addStatic(stale)
	h.vpp.addStatic(svc)
	h.d.Close()

	// The checkpoint: podHP with one more hostPort than VPP holds, and
	// podB (in VPP without hostPorts) with one.
	more := podHP
	more.PortMappings = append([]dataplane.PortMapping{{HostPort: 8081, ContainerPort: 81, Protocol: "tcp", HostIP: netip.MustParseAddr("198.18.0.11")}}, podHP.PortMappings...)
	withHP := podB
	withHP.PortMappings = []dataplane.PortMapping{{HostPort: 9090, ContainerPort: 90, Protocol: "udp"}}
	cfg.Allocations = allocations{more, withHP}
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	h.vpp.take()
	d := newDriver(cfg, logr.Discard(), h.vpp.dialer(), h.kernel)
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.Init(c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	wantLines(t, "NAT messages of the first sync", natLines(h.vpp.take()), []string{
		// podA is kept with its hostPorts' roles (VPP has them already,
		// which is no error), podB wired (it was not in VPP) with its own.
		"nat44_ed_plugin_enable_disable enable=true sessions=0",
		"nat44_interface_add_del_feature add=true 4 flags=32",
		"nat44_interface_add_del_feature add=true 4 flags=0",
		"nat44_interface_add_del_feature add=true 5 flags=32",
		"nat44_interface_add_del_feature add=true 5 flags=0",
		"nat44_forwarding_enable_disable enable=true",
		"nat44_interface_add_del_feature add=true 1 flags=0",
		"ip_address_dump 1 ip6=false",
		"nat44_static_mapping_dump",
		`nat44_add_del_static_mapping_v2 add=false proto=6 198.18.0.11:2222 -> 10.100.0.7:22 flags=6 ext_if=-1 vrf=0 tag=""`,
		`nat44_add_del_static_mapping_v2 add=true proto=17 198.18.0.11:9090 -> 10.100.0.3:90 flags=6 ext_if=-1 vrf=0 tag="vcoil-hp@2 beef eth0"`,
		`nat44_add_del_static_mapping_v2 add=true proto=17 198.18.0.12:9090 -> 10.100.0.3:90 flags=6 ext_if=-1 vrf=0 tag="vcoil-hp@2 beef eth0"`,
		hpAdd("proto=6 198.18.0.11:8081 -> 10.100.0.2:81"),
		"nat44_interface_add_del_feature add=true 1 flags=0",
	})
	// In the fake's key order: protocol, external address and port.
	want := []string{
		`nat44_add_del_static_mapping_v2 add=true proto=17 198.18.0.11:9090 -> 10.100.0.3:90 flags=6 ext_if=-1 vrf=0 tag="vcoil-hp@2 beef eth0"`,
		hpAdd("proto=17 198.18.0.12:5353 -> 10.100.0.2:53"),
		`nat44_add_del_static_mapping_v2 add=true proto=17 198.18.0.12:9090 -> 10.100.0.3:90 flags=6 ext_if=-1 vrf=0 tag="vcoil-hp@2 beef eth0"`,
		`nat44_add_del_static_mapping_v2 add=true proto=6 198.18.0.11:30080 -> 10.100.0.7:22 flags=8 ext_if=-1 vrf=0 tag="vcoil-svc default/web"`,
		hpAdd("proto=6 198.18.0.11:8080 -> 10.100.0.2:80"),
		hpAdd("proto=6 198.18.0.11:8081 -> 10.100.0.2:81"),
		hpAdd("proto=6 198.18.0.12:8080 -> 10.100.0.2:80"),
	}
	wantLines(t, "VPP's static mappings", h.vpp.statics(), want)
}

func TestHostPortTagsFitVPP(t *testing.T) {
	long := strings.Repeat("0123456789abcdef", 4)
	for _, tc := range []struct {
		key  dataplane.PodKey
		want string
	}{
		{dataplane.PodKey{ContainerID: "c0ffee", IfName: "eth0"}, "vcoil-hp@2 c0ffee eth0"},
		{dataplane.PodKey{ContainerID: long, IfName: "eth0"}, "vcoil-hp64@2 ASNFZ4mrze8BI0VniavN7wEjRWeJq83vASNFZ4mrze8 eth0"},
		{dataplane.PodKey{ContainerID: long, IfName: "net1234567"}, "vcoil-hp#@2 " + strings.TrimPrefix(hashedTag(dataplane.PodKey{ContainerID: long, IfName: "net1234567"}), "vcoil#@2 ")},
	} {
		got := hostPortTag(tc.key)
		if got != tc.want || len(got) > maxTag || !strings.HasPrefix(got, hostPortTagPrefix) || strings.HasPrefix(got, "vcoil-svc") {
			t.Errorf("hostPortTag(%v) = %q (%d bytes), want %q", tc.key, got, len(got), tc.want)
		}
	}
}

func TestCheckPodComparesTheHostPorts(t *testing.T) {
	h := start(t, hostPortConfig(), func(h *harness) { withAddressedUplink(h.vpp) })
	if _, err := h.d.SetupPod(ctx(t), podHP); err != nil {
		t.Fatal(err)
	}
	if err := h.d.CheckPod(ctx(t), podHP); err != nil {
		t.Errorf("CHECK of the pod as it was added: %v", err)
	}
	other := podHP
	other.PortMappings = []dataplane.PortMapping{hpWeb}
	if err := h.d.CheckPod(ctx(t), other); err == nil || !strings.Contains(err.Error(), "hostPorts [") {
		t.Errorf("CHECK with other hostPorts: %v", err)
	}
}

// kernelLines keeps the kernel calls that start with prefix.
func kernelLines(calls []string, prefix string) []string {
	var out []string
	for _, c := range calls {
		if strings.HasPrefix(c, prefix) {
			out = append(out, c)
		}
	}
	return out
}
