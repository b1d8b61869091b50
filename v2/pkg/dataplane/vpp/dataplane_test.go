package vpp

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.fd.io/govpp/api"
	interfaces "go.fd.io/govpp/binapi/interface"
	"go.fd.io/govpp/binapi/interface_types"
	"go.fd.io/govpp/binapi/ip"
	"go.fd.io/govpp/binapi/tapv2"

	"github.com/vcoil/vcoil/v2/internal/poll"
	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
)

// TestMain checks, after a full run, that the tests made the driver send
// every request of messages() and nothing else: the list VPP is checked
// against at connect is the list the driver uses.
func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if code == 0 && flag.Lookup("test.run").Value.String() == "" {
		var missing, extra []string
		want := map[string]bool{}
		// cnatMessages are checked when the cnat renderer first asks,
		// not at connect.
		for _, msg := range append(messages(), cnatMessages()...) {
			if msg.GetMessageType() == api.RequestMessage {
				want[msg.GetMessageName()] = true
			}
		}
		sentNames.Range(func(k, _ any) bool {
			if !want[k.(string)] {
				extra = append(extra, k.(string))
			}
			return true
		})
		for name := range want {
			if _, ok := sentNames.Load(name); !ok {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 || len(extra) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: the mock tests never send %v; the driver sends %v outside messages()\n", missing, extra)
			code = 1
		}
	}
	os.Exit(code)
}

type harness struct {
	t      *testing.T
	vpp    *fakeVPP
	kernel *fakeKernel
	d      *driver
}

func testConfig() Config {
	return Config{NodeNetns: "/run/netns/node", PingInterval: 5 * time.Millisecond, ReadyWait: 2 * time.Second, VhostNet: os.DevNull}
}

// start makes a driver on a fake VPP and kernel and runs Init.
func start(t *testing.T, cfg Config, prepare ...func(*harness)) *harness {
	t.Helper()
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, vpp: newFakeVPP(), kernel: newFakeKernel()}
	h.d = newDriver(cfg, logr.Discard(), h.vpp.dialer(), h.kernel)
	for _, p := range prepare {
		p(h)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.d.Init(ctx); err != nil {
		t.Fatalf("Init: %v", err)
	}
	t.Cleanup(h.d.Close)
	return h
}

// allocations are vcoild's pods as the daemon hands them to the driver.
type allocations []dataplane.Pod

func (a allocations) Pods() ([]dataplane.Pod, error) { return a, nil }

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return c
}

func wantLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s:\n got:\n  %s\nwant:\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

var podA = dataplane.Pod{
	PodKey: dataplane.PodKey{ContainerID: "c0ffee", IfName: "eth0"}, Netns: "/run/netns/pod-a",
	IPv4: netip.MustParseAddr("10.100.0.2"), IPv6: netip.MustParseAddr("fd00:100::2"),
}

// forwarding is p as a pod that forwards others' packets.
func forwarding(p dataplane.Pod) dataplane.Pod {
	p.NoChecksumOffload = true
	return p
}

var podB = dataplane.Pod{
	PodKey: dataplane.PodKey{ContainerID: "beef", IfName: "eth0"}, Netns: "/run/netns/pod-b",
	IPv4: netip.MustParseAddr("10.100.0.3"),
}

// The node set-up of a fresh VPP, for each interconnect type: the exact
// messages, in order.
func TestNodeSetUpSendsTheseMessages(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cfg        func(*Config)
		prepare    func(*harness)
		wantVPP    []string
		wantKernel []string
	}{
		{
			name: "a TAP interconnect without an uplink routes VPP's defaults through the host",
			cfg:  func(*Config) {},
			wantVPP: []string{
				"sw_interface_dump all",
				"create_loopback",
				`sw_interface_tag_add_del add=true 1 "vcoil-loopback@2"`,
				"ip_address_dump 1 ip6=false", "ip_address_dump 1 ip6=true",
				"sw_interface_add_del_address add=true 1 169.254.1.1/32",
				"sw_interface_ip6_enable_disable 1 enable=true",
				"sw_interface_set_flags 1 flags=1",
				`tap_create_v3 tag="vcoil-host@2" host_if="vcoilhost" ns="/run/netns/node"(true) mtu=1500(true) flags=16 random_mac=true queues=1/1 rings=256/256`,
				"ip_address_dump 2 ip6=false", "ip_address_dump 2 ip6=true",
				"sw_interface_add_del_address add=true 2 169.254.100.1/30",
				"sw_interface_ip6_enable_disable 2 enable=true",
				"sw_interface_ip6_set_link_local_address 2 fe80::1",
				"sw_interface_set_flags 2 flags=1",
				"ip_route_add_del add=true 0.0.0.0/0 via 169.254.100.2 2",
				"ip_route_add_del add=true ::/0 via fe80::2 2",
				"acl_dump", `acl_add_replace -1 "vcoil-guard@2 deny" 3 rules`, `acl_add_replace -1 "vcoil-guard@2 permit" 2 rules`, // the pod guard
				"fib_source_dump", "ip_route_v2_dump src=8 table=0 ip6=false", "fib_source_dump", "ip_route_v2_dump src=8 table=0 ip6=true",
				"sw_interface_tap_v2_dump",
				`ip_table_add_del add=true table=2000000000 ip6=false name="vcoil-source-check"`, `ip_table_add_del add=true table=2000000000 ip6=true name="vcoil-source-check"`,
				"fib_source_dump", "ip_route_v2_dump src=8 table=2000000000 ip6=false", "fib_source_dump", "ip_route_v2_dump src=8 table=2000000000 ip6=true", "urpf_interface_dump all", "ip_table_dump", // source validation that VPP holds
				"acl_interface_list_dump",
				"nat44_static_mapping_dump", // the first sync looks for an earlier vcoild's hostPorts
			},
			wantKernel: []string{"SetUpHost", "SyncHostPorts []"},
		},
		{
			name: "an af_packet interconnect with an addressed uplink routes VPP's defaults through the uplink's gateways",
			cfg: func(c *Config) {
				c.PodInterface, c.Uplink = AFPacket, "host-up0"
				c.UplinkAddresses = []netip.Prefix{netip.MustParsePrefix("198.18.0.10/24")}
				c.UplinkGatewayIPv4, c.UplinkGatewayIPv6 = netip.MustParseAddr("198.18.0.254"), netip.MustParseAddr("fd00:18::fe")
			},
			prepare: func(h *harness) { h.vpp.add(&fakeIf{name: "host-up0", mtu: 9000}) },
			wantVPP: []string{
				"sw_interface_dump all",
				"ip_address_dump 1 ip6=false", "ip_address_dump 1 ip6=true",
				"sw_interface_add_del_address add=true 1 198.18.0.10/24",
				"sw_interface_set_flags 1 flags=1",
				"create_loopback",
				`sw_interface_tag_add_del add=true 2 "vcoil-loopback@2"`,
				"ip_address_dump 2 ip6=false", "ip_address_dump 2 ip6=true",
				"sw_interface_add_del_address add=true 2 169.254.1.1/32",
				"sw_interface_ip6_enable_disable 2 enable=true",
				"sw_interface_set_flags 2 flags=1",
				`af_packet_create_v3 host_if="vcoilvpp" mode=1 mac=00:00:00:00:00:00 random=true frames=496x67584/496x67584 flags=11`,
				`sw_interface_tag_add_del add=true 3 "vcoil-host@2"`,
				"ip_address_dump 3 ip6=false", "ip_address_dump 3 ip6=true",
				"sw_interface_add_del_address add=true 3 169.254.100.1/30",
				"sw_interface_ip6_enable_disable 3 enable=true",
				"sw_interface_ip6_set_link_local_address 3 fe80::1",
				"sw_interface_set_flags 3 flags=1",
				"ip_route_add_del add=true 0.0.0.0/0 via 198.18.0.254 1",
				"ip_route_add_del add=true ::/0 via fd00:18::fe 1",
				"acl_dump", `acl_add_replace -1 "vcoil-guard@2 deny" 3 rules`, `acl_add_replace -1 "vcoil-guard@2 permit" 2 rules`, // the pod guard
				"fib_source_dump", "ip_route_v2_dump src=8 table=0 ip6=false", "fib_source_dump", "ip_route_v2_dump src=8 table=0 ip6=true",
				"sw_interface_tap_v2_dump",
				`ip_table_add_del add=true table=2000000000 ip6=false name="vcoil-source-check"`, `ip_table_add_del add=true table=2000000000 ip6=true name="vcoil-source-check"`,
				"fib_source_dump", "ip_route_v2_dump src=8 table=2000000000 ip6=false", "fib_source_dump", "ip_route_v2_dump src=8 table=2000000000 ip6=true", "urpf_interface_dump all", "ip_table_dump", // source validation that VPP holds
				"acl_interface_list_dump",
				"nat44_static_mapping_dump", // the first sync looks for an earlier vcoild's hostPorts
			},
			wantKernel: []string{"CreateHostVeth mtu=9000", "SetUpHost", "SyncHostPorts []"},
		},
		{
			name: "an af_packet interconnect that VPP's start-up configuration made is adopted, not made again",
			cfg: func(c *Config) {
				c.PodInterface, c.Uplink = AFPacket, "host-eth0"
				c.UplinkGatewayIPv4 = netip.MustParseAddr("198.18.0.1")
			},
			prepare: func(h *harness) {
				h.vpp.add(&fakeIf{name: "host-eth0", mtu: 1500, up: true, addrs: []netip.Prefix{netip.MustParsePrefix("198.18.0.11/24")}})
				h.vpp.add(&fakeIf{name: "host-vcoilvpp", mtu: 1500, up: true, addrs: []netip.Prefix{InterconnectVPPIPv4}})
			},
			wantVPP: []string{
				"sw_interface_dump all",
				"create_loopback",
				`sw_interface_tag_add_del add=true 3 "vcoil-loopback@2"`,
				"ip_address_dump 3 ip6=false", "ip_address_dump 3 ip6=true",
				"sw_interface_add_del_address add=true 3 169.254.1.1/32",
				"sw_interface_ip6_enable_disable 3 enable=true",
				"sw_interface_set_flags 3 flags=1",
				`sw_interface_tag_add_del add=true 2 "vcoil-host@2"`,
				"ip_address_dump 2 ip6=false", "ip_address_dump 2 ip6=true",
				"sw_interface_ip6_enable_disable 2 enable=true",
				"sw_interface_ip6_set_link_local_address 2 fe80::1",
				"sw_interface_set_flags 2 flags=1",
				"ip_route_add_del add=true 0.0.0.0/0 via 198.18.0.1 1",
				"ip_route_add_del add=true ::/0 via fe80::2 2",
				"acl_dump", `acl_add_replace -1 "vcoil-guard@2 deny" 3 rules`, `acl_add_replace -1 "vcoil-guard@2 permit" 2 rules`, // the pod guard
				"fib_source_dump", "ip_route_v2_dump src=8 table=0 ip6=false", "fib_source_dump", "ip_route_v2_dump src=8 table=0 ip6=true",
				"sw_interface_tap_v2_dump",
				`ip_table_add_del add=true table=2000000000 ip6=false name="vcoil-source-check"`, `ip_table_add_del add=true table=2000000000 ip6=true name="vcoil-source-check"`,
				"fib_source_dump", "ip_route_v2_dump src=8 table=2000000000 ip6=false", "fib_source_dump", "ip_route_v2_dump src=8 table=2000000000 ip6=true", "urpf_interface_dump all", "ip_table_dump", // source validation that VPP holds
				"acl_interface_list_dump",
				"nat44_static_mapping_dump", // the first sync looks for an earlier vcoild's hostPorts
			},
			wantKernel: []string{"SetUpHost", "SyncHostPorts []"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			tc.cfg(&cfg)
			prepare := []func(*harness){}
			if tc.prepare != nil {
				prepare = append(prepare, tc.prepare)
			}
			h := start(t, cfg, prepare...)
			wantLines(t, "VPP messages", h.vpp.take(), tc.wantVPP)
			wantLines(t, "kernel calls", h.kernel.take(), tc.wantKernel)
			if err := h.d.Healthy(ctx(t)); err != nil {
				t.Fatalf("Healthy after Init: %v", err)
			}
		})
	}
}

func TestSetupPodSendsTheseMessages(t *testing.T) {
	longNetns := "/var/run/netns/" + strings.Repeat("x", 60)
	for _, tc := range []struct {
		name       string
		typ        InterfaceType
		pod        dataplane.Pod
		wantVPP    []string
		wantKernel []string
		wantIfs    dataplane.Interfaces
	}{
		{
			name: "a TAP pod gets a tun in its namespace, unnumbered, source-validated, up, with host routes",
			typ:  TAP, pod: podA,
			wantVPP: slices.Concat([]string{
				`tap_create_v3 tag="vcoil@2 c0ffee eth0" host_if="eth0" ns="/run/netns/pod-a"(true) mtu=1500(true) flags=16 random_mac=true queues=1/1 rings=256/256`,
				"sw_interface_set_unnumbered add=true 3 uses 1",
			}, sourceSetUp(3, "10.100.0.2", "fd00:100::2"), []string{
				guardOnly(3),
				"sw_interface_set_flags 3 flags=1",
				"ip_route_add_del add=true 10.100.0.2/32 via 10.100.0.2 3",
				"ip_route_add_del add=true fd00:100::2/128 via fd00:100::2 3",
				"sw_interface_dump 3",
			}),
			wantKernel: []string{"ConfigurePod /run/netns/pod-a/eth0 10.100.0.2 fd00:100::2"},
			wantIfs:    dataplane.Interfaces{HostIfName: "tap3", MTU: 1500},
		},
		{
			name: "a TAP pod whose namespace path is too long for VPP gets its tun moved",
			typ:  TAP, pod: dataplane.Pod{PodKey: podB.PodKey, Netns: longNetns, IPv4: podB.IPv4, MTU: 1400},
			wantVPP: slices.Concat([]string{
				`tap_create_v3 tag="vcoil@2 beef eth0" host_if="vctap` + linkName(tapPrefix, podB.PodKey)[5:] + `" ns="/run/netns/node"(true) mtu=1400(true) flags=16 random_mac=true queues=1/1 rings=256/256`,
				"sw_interface_set_unnumbered add=true 3 uses 1",
			}, sourceSetUp(3, "10.100.0.3", ""), []string{
				guardOnly(3),
				"sw_interface_set_flags 3 flags=1",
				"ip_route_add_del add=true 10.100.0.3/32 via 10.100.0.3 3",
				"sw_interface_dump 3",
			}),
			wantKernel: []string{
				"MoveToPod " + linkName(tapPrefix, podB.PodKey) + " -> " + longNetns + "/eth0",
				"ConfigurePod " + longNetns + "/eth0 10.100.0.3 invalid IP",
			},
			wantIfs: dataplane.Interfaces{HostIfName: "tap3", MTU: 1400},
		},
		{
			name: "an af_packet pod gets a veth, VPP attached with the pod's MAC, static neighbors and host routes",
			typ:  AFPacket, pod: podA,
			wantVPP: slices.Concat([]string{
				`af_packet_create_v3 host_if="` + linkName(vethPrefix, podA.PodKey) + `" mode=1 mac=` + podMAC(podA.PodKey).String() + ` random=false frames=62x67584/62x67584 flags=11`,
				`sw_interface_tag_add_del add=true 3 "vcoil@2 c0ffee eth0"`,
				"sw_interface_set_unnumbered add=true 3 uses 1",
			}, sourceSetUp(3, "10.100.0.2", "fd00:100::2"), []string{
				guardOnly(3),
				"sw_interface_set_flags 3 flags=1",
				"ip_neighbor_add_del add=true 3 10.100.0.2 " + podMAC(podA.PodKey).String() + " flags=3",
				"ip_route_add_del add=true 10.100.0.2/32 via 10.100.0.2 3",
				"ip_neighbor_add_del add=true 3 fd00:100::2 " + podMAC(podA.PodKey).String() + " flags=3",
				"ip_route_add_del add=true fd00:100::2/128 via fd00:100::2 3",
				"sw_interface_dump 3",
			}),
			wantKernel: []string{
				"CreatePodVeth " + linkName(vethPrefix, podA.PodKey) + " /run/netns/pod-a/eth0 mac=" + podMAC(podA.PodKey).String() + " mtu=1500",
				"ConfigurePod /run/netns/pod-a/eth0 10.100.0.2 fd00:100::2",
			},
			wantIfs: dataplane.Interfaces{HostIfName: "host-" + linkName(vethPrefix, podA.PodKey), HostMAC: podMAC(podA.PodKey).String(), PodMAC: podMAC(podA.PodKey).String(), MTU: 1500},
		},
		{
			name: "a forwarding af_packet pod computes its own checksums",
			typ:  AFPacket, pod: forwarding(podA),
			wantVPP: slices.Concat([]string{
				`af_packet_create_v3 host_if="` + linkName(vethPrefix, podA.PodKey) + `" mode=1 mac=` + podMAC(podA.PodKey).String() + ` random=false frames=62x67584/62x67584 flags=11`,
				`sw_interface_tag_add_del add=true 3 "vcoil@2 c0ffee eth0"`,
				"sw_interface_set_unnumbered add=true 3 uses 1",
			}, sourceSetUp(3, "10.100.0.2", "fd00:100::2"), []string{
				guardOnly(3),
				"sw_interface_set_flags 3 flags=1",
				"ip_neighbor_add_del add=true 3 10.100.0.2 " + podMAC(podA.PodKey).String() + " flags=3",
				"ip_route_add_del add=true 10.100.0.2/32 via 10.100.0.2 3",
				"ip_neighbor_add_del add=true 3 fd00:100::2 " + podMAC(podA.PodKey).String() + " flags=3",
				"ip_route_add_del add=true fd00:100::2/128 via fd00:100::2 3",
				"sw_interface_dump 3",
			}),
			wantKernel: []string{
				"CreatePodVeth " + linkName(vethPrefix, podA.PodKey) + " /run/netns/pod-a/eth0 mac=" + podMAC(podA.PodKey).String() + " mtu=1500",
				"ConfigurePod /run/netns/pod-a/eth0 10.100.0.2 fd00:100::2 no-checksum-offload",
			},
			wantIfs: dataplane.Interfaces{HostIfName: "host-" + linkName(vethPrefix, podA.PodKey), HostMAC: podMAC(podA.PodKey).String(), PodMAC: podMAC(podA.PodKey).String(), MTU: 1500},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.PodInterface, cfg.HostInterconnect = tc.typ, TAP
			h := start(t, cfg)
			h.vpp.take()
			h.kernel.take()
			ifs, err := h.d.SetupPod(ctx(t), tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			wantLines(t, "VPP messages", h.vpp.take(), tc.wantVPP)
			wantLines(t, "kernel calls", h.kernel.take(), tc.wantKernel)
			if ifs != tc.wantIfs {
				t.Fatalf("interfaces = %+v, want %+v", ifs, tc.wantIfs)
			}
		})
	}
}

func TestSetupPodRepeatedChecksAndChangesNothing(t *testing.T) {
	h := start(t, testConfig())
	first, err := h.d.SetupPod(ctx(t), podA)
	if err != nil {
		t.Fatal(err)
	}
	h.vpp.take()
	h.kernel.take()
	again, err := h.d.SetupPod(ctx(t), podA)
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Fatalf("second SetupPod = %+v, first %+v", again, first)
	}
	wantLines(t, "VPP messages of a repeat", h.vpp.take(), []string{"sw_interface_dump 3"})
	wantLines(t, "kernel calls of a repeat", h.kernel.take(), []string{"CheckPod /run/netns/pod-a/eth0 tap mtu=1500"})
	if err := h.d.CheckPod(ctx(t), podA); err != nil {
		t.Fatalf("CheckPod: %v", err)
	}
}

func TestSetupPodWithOtherAddressesRewires(t *testing.T) {
	h := start(t, testConfig())
	if _, err := h.d.SetupPod(ctx(t), podA); err != nil {
		t.Fatal(err)
	}
	h.vpp.take()
	moved := podA
	moved.IPv4, moved.IPv6 = netip.MustParseAddr("10.100.0.9"), netip.Addr{}
	if _, err := h.d.SetupPod(ctx(t), moved); err != nil {
		t.Fatal(err)
	}
	got := h.vpp.take()
	unwire := slices.Concat([]string{
		"ip_route_add_del add=false 10.100.0.2/32 via 10.100.0.2 3",
		"ip_route_add_del add=false fd00:100::2/128 via fd00:100::2 3",
	}, sourceTearDown(3, "10.100.0.2", "fd00:100::2"), []string{"tap_delete_v2 3"})
	wantLines(t, "VPP messages of a rewiring", got[:len(unwire)], unwire)
	if err := h.d.CheckPod(ctx(t), podA); err == nil {
		t.Fatal("CheckPod with the old addresses passed")
	}
	if err := h.d.CheckPod(ctx(t), moved); err != nil {
		t.Fatal(err)
	}
}

func TestTeardownPodRemovesEverythingAndRepeatsQuietly(t *testing.T) {
	for _, typ := range []InterfaceType{TAP, AFPacket} {
		t.Run(string(typ), func(t *testing.T) {
			cfg := testConfig()
			cfg.PodInterface, cfg.HostInterconnect = typ, TAP
			h := start(t, cfg)
			if _, err := h.d.SetupPod(ctx(t), podA); err != nil {
				t.Fatal(err)
			}
			h.d.SetPodNATRole(ctx(t), podA.PodKey, NATFrontend)
			h.vpp.take()
			h.kernel.take()
			if err := h.d.TeardownPod(ctx(t), dataplane.Pod{PodKey: podA.PodKey}); err != nil {
				t.Fatal(err)
			}
			want := []string{"nat44_interface_add_del_feature add=false 3 flags=0"}
			var wantKernel []string
			veth := linkName(vethPrefix, podA.PodKey)
			if typ == TAP {
				want = append(want,
					"ip_route_add_del add=false 10.100.0.2/32 via 10.100.0.2 3",
					"ip_route_add_del add=false fd00:100::2/128 via fd00:100::2 3")
				want = append(want, sourceTearDown(3, "10.100.0.2", "fd00:100::2")...)
				want = append(want, "tap_delete_v2 3")
			} else {
				mac := podMAC(podA.PodKey).String()
				want = append(want,
					"ip_route_add_del add=false 10.100.0.2/32 via 10.100.0.2 3",
					"ip_neighbor_add_del add=false 3 10.100.0.2 "+mac+" flags=3",
					"ip_route_add_del add=false fd00:100::2/128 via fd00:100::2 3",
					"ip_neighbor_add_del add=false 3 fd00:100::2 "+mac+" flags=3")
				want = append(want, sourceTearDown(3, "10.100.0.2", "fd00:100::2")...)
				want = append(want, `af_packet_delete host_if="`+veth+`"`)
				wantKernel = []string{"DeleteNodeLink " + veth}
			}
			wantLines(t, "VPP messages of a teardown", h.vpp.take(), want)
			wantLines(t, "kernel calls of a teardown", h.kernel.take(), wantKernel)
			if n := len(h.vpp.ifs); n != 3 {
				t.Fatalf("VPP has %d interfaces after the teardown, want local0, loopback and interconnect", n)
			}
			if s := h.vpp.source; s.paths() != 0 || len(s.destroyedWithRoutes) != 0 || s.cfg[3][false].Mode != 0 || s.cfg[3][true].Mode != 0 {
				t.Fatalf("source validation left after the teardown: tables %v (destroyed with routes %v), uRPF %v", s.tables, s.destroyedWithRoutes, s.cfg)
			}
			if err := h.d.TeardownPod(ctx(t), dataplane.Pod{PodKey: podA.PodKey}); err != nil {
				t.Fatalf("second teardown: %v", err)
			}
			again := []string{"sw_interface_dump all"}
			if typ == AFPacket {
				wantKernel = []string{"DeleteNodeLink " + veth}
			}
			wantLines(t, "VPP messages of a second teardown", h.vpp.take(), again)
			wantLines(t, "kernel calls of a second teardown", h.kernel.take(), wantKernel)
			if pods, _ := h.d.ListPods(ctx(t)); len(pods) != 0 {
				t.Fatalf("ListPods after teardown = %v", pods)
			}
		})
	}
}

// A VPP error in the middle of a set-up undoes what was made, in reverse,
// and the error names the message and VPP's answer.
func TestVPPErrorDuringSetupLeavesNothing(t *testing.T) {
	for _, tc := range []struct {
		name     string
		typ      InterfaceType
		failMsg  string
		wantTail []string
	}{
		{
			name: "the unnumbered step of a TAP fails", typ: TAP, failMsg: "sw_interface_set_unnumbered",
			wantTail: []string{"sw_interface_set_unnumbered add=true 3 uses 1", "tap_delete_v2 3"},
		},
		{
			name: "the IPv6 route of a TAP fails", typ: TAP, failMsg: "ip_route_add_del",
			wantTail: slices.Concat([]string{
				"ip_route_add_del add=true 10.100.0.2/32 via 10.100.0.2 3",
				"ip_route_add_del add=true fd00:100::2/128 via fd00:100::2 3",
				"ip_route_add_del add=false 10.100.0.2/32 via 10.100.0.2 3",
			}, sourceTearDown(3, "10.100.0.2", "fd00:100::2"), []string{"tap_delete_v2 3"}),
		},
		{
			name: "the IPv6 source validation of a TAP fails", typ: TAP, failMsg: "urpf_update_v2",
			wantTail: slices.Concat([]string{
				"urpf_update_v2 3 ip6 input=true mode=URPF_API_MODE_STRICT table=2000000000",
			}, sourceTearDown(3, "10.100.0.2", "fd00:100::2"), []string{"tap_delete_v2 3"}),
		},
		{
			name: "the tag of an af_packet interface fails", typ: AFPacket, failMsg: "sw_interface_tag_add_del",
			wantTail: []string{`sw_interface_tag_add_del add=true 3 "vcoil@2 c0ffee eth0"`, `af_packet_delete host_if="` + linkName(vethPrefix, podA.PodKey) + `"`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.PodInterface, cfg.HostInterconnect = tc.typ, TAP
			h := start(t, cfg)
			h.vpp.take()
			h.kernel.take()
			n := 0
			h.vpp.mu.Lock()
			h.vpp.failWhen = func(m api.Message) int32 {
				if m.GetMessageName() != tc.failMsg {
					return 0
				}
				// The main table's routes, and the second uRPF check.
				if r, ok := m.(*ip.IPRouteAddDel); ok && r.Route.TableID != 0 {
					return 0
				}
				if n++; (tc.failMsg == "ip_route_add_del" || tc.failMsg == "urpf_update_v2") && n < 2 {
					return 0
				}
				return int32(api.INVALID_VALUE)
			}
			h.vpp.mu.Unlock()
			_, err := h.d.SetupPod(ctx(t), podA)
			if err == nil {
				t.Fatal("SetupPod succeeded")
			}
			if !strings.Contains(err.Error(), tc.failMsg) || !strings.Contains(err.Error(), "Invalid value") {
				t.Fatalf("error %q names neither the message %s nor VPP's answer", err, tc.failMsg)
			}
			got := h.vpp.take()
			if len(got) < len(tc.wantTail) {
				t.Fatalf("messages: %v", got)
			}
			wantLines(t, "the last messages", got[len(got)-len(tc.wantTail):], tc.wantTail)
			if len(h.vpp.ifs) != 3 || len(h.vpp.routes) != 2 || len(h.vpp.neigh) != 0 {
				t.Fatalf("VPP holds %d interfaces, %d routes, %d neighbors after the failure", len(h.vpp.ifs), len(h.vpp.routes), len(h.vpp.neigh))
			}
			if s := h.vpp.source; s.paths() != 0 || len(s.destroyedWithRoutes) != 0 {
				t.Fatalf("source paths left after the failure: %v (destroyed with routes %v)", s.tables, s.destroyedWithRoutes)
			}
			if tc.typ == AFPacket && len(h.kernel.veths) != 0 {
				t.Fatalf("veths left: %v", h.kernel.veths)
			}
			if pods, _ := h.d.ListPods(ctx(t)); len(pods) != 0 {
				t.Fatalf("ListPods after a failed SetupPod = %v", pods)
			}
		})
	}
}

func TestAKernelErrorDuringSetupLeavesNothingInVPP(t *testing.T) {
	h := start(t, testConfig())
	h.kernel.failOn = "ConfigurePod"
	h.vpp.take()
	if _, err := h.d.SetupPod(ctx(t), podA); err == nil || !strings.Contains(err.Error(), "configure the pod's interface") {
		t.Fatalf("SetupPod error = %v", err)
	}
	wantLines(t, "VPP messages", h.vpp.take(), slices.Concat([]string{
		`tap_create_v3 tag="vcoil@2 c0ffee eth0" host_if="eth0" ns="/run/netns/pod-a"(true) mtu=1500(true) flags=16 random_mac=true queues=1/1 rings=256/256`,
		"sw_interface_set_unnumbered add=true 3 uses 1",
	}, sourceSetUp(3, "10.100.0.2", "fd00:100::2"), []string{
		guardOnly(3),
		"sw_interface_set_flags 3 flags=1",
	}, sourceTearDown(3, "10.100.0.2", "fd00:100::2"), []string{
		"tap_delete_v2 3",
	}))
}

// After VPP restarts (a new PID, an empty VPP), the driver replays the
// node, the pods with their NAT roles and the blocks, and CNI calls made
// meanwhile wait for it.
func TestRestartedVPPGetsTheWholeStateBack(t *testing.T) {
	h := start(t, testConfig())
	for _, p := range []dataplane.Pod{podA, podB} {
		if _, err := h.d.SetupPod(ctx(t), p); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.d.SetPodNATRole(ctx(t), podB.PodKey, NATFrontend|NATBackend); err != nil {
		t.Fatal(err)
	}
	if err := h.d.SetNodeNATRole(ctx(t), HostInterconnect, NATFrontend|NATBackend); err != nil {
		t.Fatal(err)
	}
	block := netip.MustParsePrefix("10.100.0.0/29")
	if err := h.d.Blocks().Sync(ctx(t), []netip.Prefix{block}); err != nil {
		t.Fatal(err)
	}
	h.vpp.take()
	h.kernel.take()

	h.vpp.restart()
	poll.Eventually(t, 5*time.Second, func() error {
		h.d.mu.Lock()
		defer h.d.mu.Unlock()
		if !h.d.synced || h.d.pid != 101 {
			return fmt.Errorf("not synced with the new VPP: %v", h.d.why)
		}
		return nil
	})
	want := slices.Concat([]string{
		"sw_interface_dump all",
		"create_loopback",
		`sw_interface_tag_add_del add=true 1 "vcoil-loopback@2"`,
		"ip_address_dump 1 ip6=false", "ip_address_dump 1 ip6=true",
		"sw_interface_add_del_address add=true 1 169.254.1.1/32",
		"sw_interface_ip6_enable_disable 1 enable=true",
		"sw_interface_set_flags 1 flags=1",
		`tap_create_v3 tag="vcoil-host@2" host_if="vcoilhost" ns="/run/netns/node"(true) mtu=1500(true) flags=16 random_mac=true queues=1/1 rings=256/256`,
		"ip_address_dump 2 ip6=false", "ip_address_dump 2 ip6=true",
		"sw_interface_add_del_address add=true 2 169.254.100.1/30",
		"sw_interface_ip6_enable_disable 2 enable=true",
		"sw_interface_ip6_set_link_local_address 2 fe80::1",
		"sw_interface_set_flags 2 flags=1",
		"ip_route_add_del add=true 0.0.0.0/0 via 169.254.100.2 2",
		"ip_route_add_del add=true ::/0 via fe80::2 2",
		"acl_dump", `acl_add_replace -1 "vcoil-guard@2 deny" 3 rules`, `acl_add_replace -1 "vcoil-guard@2 permit" 2 rules`, // the pod guard
		"fib_source_dump", "ip_route_v2_dump src=8 table=0 ip6=false", "fib_source_dump", "ip_route_v2_dump src=8 table=0 ip6=true",
		`ip_table_add_del add=true table=2000000000 ip6=false name="vcoil-source-check"`, `ip_table_add_del add=true table=2000000000 ip6=true name="vcoil-source-check"`,
		"fib_source_dump", "ip_route_v2_dump src=8 table=2000000000 ip6=false", "fib_source_dump", "ip_route_v2_dump src=8 table=2000000000 ip6=true", "urpf_interface_dump all", "ip_table_dump", // source validation that VPP holds
		"acl_interface_list_dump",
		// Pods in key order: beef, then c0ffee.
		`tap_create_v3 tag="vcoil@2 beef eth0" host_if="eth0" ns="/run/netns/pod-b"(true) mtu=1500(true) flags=16 random_mac=true queues=1/1 rings=256/256`,
		"sw_interface_set_unnumbered add=true 3 uses 1",
	}, sourceSetUp(3, "10.100.0.3", ""), []string{
		guardOnly(3),
		"sw_interface_set_flags 3 flags=1",
		"ip_route_add_del add=true 10.100.0.3/32 via 10.100.0.3 3",
		"nat44_ed_plugin_enable_disable enable=true sessions=0",
		"nat44_interface_add_del_feature add=true 3 flags=32",
		"nat44_interface_add_del_feature add=true 3 flags=0",
		"sw_interface_dump 3",
		`tap_create_v3 tag="vcoil@2 c0ffee eth0" host_if="eth0" ns="/run/netns/pod-a"(true) mtu=1500(true) flags=16 random_mac=true queues=1/1 rings=256/256`,
		"sw_interface_set_unnumbered add=true 4 uses 1",
	}, sourceSetUp(4, "10.100.0.2", "fd00:100::2"), []string{
		guardOnly(4),
		"sw_interface_set_flags 4 flags=1",
		"ip_route_add_del add=true 10.100.0.2/32 via 10.100.0.2 4",
		"ip_route_add_del add=true fd00:100::2/128 via fd00:100::2 4",
		"sw_interface_dump 4",
		"ip_route_add_del add=true 10.100.0.0/29 drop",
		"nat44_interface_add_del_feature add=true 2 flags=32",
		"nat44_interface_add_del_feature add=true 2 flags=0",
	})
	wantLines(t, "VPP messages of the replay", h.vpp.take(), want)
	wantLines(t, "kernel calls of the replay", h.kernel.take(), []string{
		"SetUpHost",
		"ConfigurePod /run/netns/pod-b/eth0 10.100.0.3 invalid IP",
		"ConfigurePod /run/netns/pod-a/eth0 10.100.0.2 fd00:100::2",
		"SyncBlockRoutes [10.100.0.0/29]",
	})
	for _, p := range []dataplane.Pod{podA, podB} {
		if err := h.d.CheckPod(ctx(t), p); err != nil {
			t.Fatalf("CheckPod after the replay: %v", err)
		}
	}
}

// While VPP is gone, readiness fails, CNI calls wait and then fail with
// ErrNotReady having changed nothing; once VPP is back a waiting call goes
// through.
func TestCallsWaitWhileVPPIsGone(t *testing.T) {
	cfg := testConfig()
	cfg.ReadyWait = 100 * time.Millisecond
	h := start(t, cfg)
	h.vpp.setDown(true)
	poll.Eventually(t, 5*time.Second, func() error {
		if err := h.d.Healthy(ctx(t)); err == nil {
			return errors.New("Healthy while VPP is gone")
		}
		return nil
	})
	if err := h.d.Healthy(ctx(t)); !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "lost VPP") && !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("Healthy = %v, want ErrNotReady naming the lost VPP", err)
	}
	h.vpp.take()
	if _, err := h.d.SetupPod(ctx(t), podA); !errors.Is(err, ErrNotReady) {
		t.Fatalf("SetupPod while VPP is gone = %v, want ErrNotReady", err)
	}
	if err := h.d.TeardownPod(ctx(t), podA); !errors.Is(err, ErrNotReady) {
		t.Fatalf("TeardownPod while VPP is gone = %v, want ErrNotReady", err)
	}
	for _, m := range h.vpp.take() {
		if !strings.HasPrefix(m, "sw_interface_dump") {
			t.Fatalf("a call sent %q while VPP was gone", m)
		}
	}

	h.d.cfg.ReadyWait = 5 * time.Second
	done := make(chan error, 1)
	go func() { _, err := h.d.SetupPod(ctx(t), podA); done <- err }()
	h.vpp.restart()
	if err := <-done; err != nil {
		t.Fatalf("SetupPod that waited for VPP: %v", err)
	}
}

func TestInitFailsOnAVPPThatLacksMessagesNamingThem(t *testing.T) {
	cfg, _ := testConfig().withDefaults()
	f, k := newFakeVPP(), newFakeKernel()
	f.unknown = []string{"nat44_ed_plugin_enable_disable_be17f8dd"}
	d := newDriver(cfg, logr.Discard(), f.dialer(), k)
	defer d.Close()
	err := d.Init(ctx(t))
	if !errors.Is(err, ErrIncompatible) || !strings.Contains(err.Error(), "nat44_ed_plugin_enable_disable_be17f8dd") || !strings.Contains(err.Error(), VPPVersion) {
		t.Fatalf("Init = %v, want ErrIncompatible naming the message and %s", err, VPPVersion)
	}
}

func TestTAPWithoutVhostNetFailsNamingTheDeviceAndAFPacket(t *testing.T) {
	cfg := testConfig()
	cfg.VhostNet = filepath.Join(t.TempDir(), "vhost-net")
	cfg, _ = cfg.withDefaults()
	d := newDriver(cfg, logr.Discard(), newFakeVPP().dialer(), newFakeKernel())
	defer d.Close()
	err := d.Init(ctx(t))
	if err == nil || !strings.Contains(err.Error(), cfg.VhostNet) || !strings.Contains(err.Error(), "af_packet") {
		t.Fatalf("Init = %v, want an error naming %s and af_packet", err, cfg.VhostNet)
	}
	cfg.PodInterface, cfg.HostInterconnect = AFPacket, AFPacket
	d = newDriver(cfg, logr.Discard(), newFakeVPP().dialer(), newFakeKernel())
	defer d.Close()
	if err := d.Init(ctx(t)); err != nil {
		t.Fatalf("af_packet without vhost-net: %v", err)
	}
}

// After a vcoild restart, the pods are vcoild's allocations and those VPP
// holds with vcoil's tags (adopted for the daemon's recovery); pods that
// VPP holds as wanted are kept as they are.
func TestListPodsAfterARestartHasVcoildsAndVPPsPods(t *testing.T) {
	cfg := testConfig()
	cfg.Allocations = allocations{{PodKey: podA.PodKey, Netns: podA.Netns, IPv4: podA.IPv4, IPv6: podA.IPv6}}
	h := start(t, cfg, func(h *harness) {
		f := h.vpp
		lo := f.add(&fakeIf{name: "loop1", tag: loopbackTag, addrs: []netip.Prefix{LoopbackIPv4}, up: true})
		f.add(&fakeIf{name: "tap2", tag: interconnectTag, addrs: []netip.Prefix{InterconnectVPPIPv4}, up: true, tap: &tapv2.TapCreateV3{}})
		a := f.add(&fakeIf{name: "tap3", tag: podTag(podA.PodKey), up: true, mtu: 1500, tap: &tapv2.TapCreateV3{HostNamespace: podA.Netns, HostMtuSize: 1500}})
		b := f.add(&fakeIf{name: "tap4", tag: podTag(podB.PodKey), up: true, mtu: 1450, tap: &tapv2.TapCreateV3{HostNamespace: podB.Netns, HostMtuSize: 1450}})
		_ = lo
		for _, r := range []struct {
			sw uint32
			a  netip.Addr
		}{{a.sw, podA.IPv4}, {a.sw, podA.IPv6}, {b.sw, podB.IPv4}} {
			f.routes[hostPrefix(r.a)] = viaPath(r.sw, r.a)
		}
	})
	pods, err := h.d.ListPods(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	want := []dataplane.Pod{
		{PodKey: podB.PodKey, Netns: podB.Netns, IPv4: podB.IPv4},
		{PodKey: podA.PodKey, Netns: podA.Netns, IPv4: podA.IPv4, IPv6: podA.IPv6},
	}
	if !reflect.DeepEqual(pods, want) {
		t.Fatalf("ListPods = %+v\nwant %+v", pods, want)
	}
	for _, m := range h.vpp.take() {
		if strings.HasPrefix(m, "tap_") || strings.Contains(m, "add=false") {
			t.Fatalf("the sync after a vcoild restart changed a kept pod: %s", m)
		}
	}
	// The daemon tears down the adopted pod it has no address for.
	if err := h.d.TeardownPod(ctx(t), dataplane.Pod{PodKey: podB.PodKey}); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.vpp.ifs[4]; ok {
		t.Fatal("tap4 is still in VPP")
	}
}

// A sync after a reconnection removes pod interfaces nobody wants, with
// their routes, and hashed tags that match no key.
func TestResyncRemovesStalePods(t *testing.T) {
	h := start(t, testConfig())
	h.vpp.setDown(true)
	poll.Eventually(t, 5*time.Second, func() error {
		if h.d.Healthy(ctx(t)) == nil {
			return errors.New("still healthy")
		}
		return nil
	})
	h.vpp.mu.Lock()
	stale := h.vpp.add(&fakeIf{name: "tap9", tag: podTag(podB.PodKey), up: true, tap: &tapv2.TapCreateV3{}})
	hashed := h.vpp.add(&fakeIf{name: "tap10", tag: hashedTag(dataplane.PodKey{ContainerID: "gone", IfName: "eth1"}), up: true, tap: &tapv2.TapCreateV3{}})
	h.vpp.routes[hostPrefix(podB.IPv4)] = viaPath(stale.sw, podB.IPv4)
	h.vpp.sent = nil
	h.vpp.down = false
	h.vpp.mu.Unlock()
	poll.Eventually(t, 5*time.Second, func() error { return h.d.Healthy(ctx(t)) })
	got := h.vpp.take()
	for _, w := range []string{
		"ip_route_add_del add=false 10.100.0.3/32 via 10.100.0.3 " + fmt.Sprint(stale.sw),
		"tap_delete_v2 " + fmt.Sprint(stale.sw),
		"tap_delete_v2 " + fmt.Sprint(hashed.sw),
	} {
		if !slices.Contains(got, w) {
			t.Fatalf("the resync did not send %q:\n%s", w, strings.Join(got, "\n"))
		}
	}
}

func TestNATRolesAddAndRemoveOneFeatureEach(t *testing.T) {
	h := start(t, testConfig(), func(h *harness) {})
	if _, err := h.d.SetupPod(ctx(t), podA); err != nil {
		t.Fatal(err)
	}
	h.vpp.take()
	steps := []struct {
		role NATRole
		want []string
	}{
		{NATFrontend | NATBackend, []string{
			"nat44_ed_plugin_enable_disable enable=true sessions=0",
			"nat44_interface_add_del_feature add=true 3 flags=32",
			"nat44_interface_add_del_feature add=true 3 flags=0",
		}},
		{NATFrontend | NATBackend, nil},
		{NATFrontend, []string{"nat44_interface_add_del_feature add=false 3 flags=32"}},
		{0, []string{"nat44_interface_add_del_feature add=false 3 flags=0"}},
	}
	for i, s := range steps {
		if err := h.d.SetPodNATRole(ctx(t), podA.PodKey, s.role); err != nil {
			t.Fatal(err)
		}
		wantLines(t, fmt.Sprintf("step %d (%s)", i, s.role), h.vpp.take(), s.want)
	}
	if err := h.d.SetPodNATRole(ctx(t), podB.PodKey, NATFrontend); err == nil {
		t.Fatal("a role for a pod that is not wired was accepted")
	}
	if err := h.d.SetNodeNATRole(ctx(t), Uplink, NATFrontend); err == nil || !strings.Contains(err.Error(), "no uplink") {
		t.Fatalf("uplink role without an uplink: %v", err)
	}
}

func TestBlocksAreRoutedToDropInVPPAndThroughTheInterconnectInTheNode(t *testing.T) {
	h := start(t, testConfig())
	h.vpp.take()
	h.kernel.take()
	a, b := netip.MustParsePrefix("10.100.0.0/29"), netip.MustParsePrefix("fd00:100::/125")
	c := netip.MustParsePrefix("10.100.0.8/29")
	if err := h.d.Blocks().Sync(ctx(t), []netip.Prefix{a, b}); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "VPP messages", h.vpp.take(), []string{
		"ip_route_add_del add=true 10.100.0.0/29 drop",
		"ip_route_add_del add=true fd00:100::/125 drop",
	})
	if err := h.d.Blocks().Sync(ctx(t), []netip.Prefix{c}); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "VPP messages after a change", h.vpp.take(), []string{
		"ip_route_add_del add=false 10.100.0.0/29 drop",
		"ip_route_add_del add=false fd00:100::/125 drop",
		"ip_route_add_del add=true 10.100.0.8/29 drop",
	})
	wantLines(t, "kernel calls", h.kernel.take(), []string{
		"SyncBlockRoutes [10.100.0.0/29 fd00:100::/125]",
		"SyncBlockRoutes [10.100.0.8/29]",
	})
}

func TestSetupPodRejectsBadInputNamingTheField(t *testing.T) {
	h := start(t, testConfig())
	for _, tc := range []struct {
		name string
		pod  dataplane.Pod
		want string
	}{
		{"an empty container ID", dataplane.Pod{PodKey: dataplane.PodKey{IfName: "eth0"}, Netns: "/x", IPv4: podA.IPv4}, "container ID is empty"},
		{"a container ID with a space", dataplane.Pod{PodKey: dataplane.PodKey{ContainerID: "a b", IfName: "eth0"}, Netns: "/x", IPv4: podA.IPv4}, "character ' '"},
		{"no namespace", dataplane.Pod{PodKey: podA.PodKey, IPv4: podA.IPv4}, "netns path is empty"},
		{"no address", dataplane.Pod{PodKey: podA.PodKey, Netns: "/x"}, "neither an IPv4 nor an IPv6"},
		{"an IPv6 address as IPv4", dataplane.Pod{PodKey: podA.PodKey, Netns: "/x", IPv4: podA.IPv6}, "is not IPv4"},
		{"a loopback address", dataplane.Pod{PodKey: podA.PodKey, Netns: "/x", IPv4: netip.MustParseAddr("127.0.0.1")}, "cannot be a pod's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.vpp.take()
			_, err := h.d.SetupPod(ctx(t), tc.pod)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("SetupPod = %v, want %q", err, tc.want)
			}
			if m := h.vpp.take(); len(m) != 0 {
				t.Fatalf("bad input sent %v", m)
			}
		})
	}
}

// The fake VPP answers as VPP does for the interface of a failed SetupPod;
// this keeps the fake honest about one assumption the driver makes.
func TestFakeVPPReportsAdminUpAsVPPDoes(t *testing.T) {
	f := newFakeVPP()
	i := f.add(&fakeIf{name: "x"})
	ch := &fakeChannel{f: f}
	if err := vppapi.Call(ch, &interfaceSetFlags{SwIfIndex: index(i.sw), Flags: interface_types.IF_STATUS_API_FLAG_ADMIN_UP}, &interfaceSetFlagsReply{}); err != nil {
		t.Fatal(err)
	}
	ifs, err := interfaceDump(ch, i.sw)
	if err != nil || len(ifs) != 1 || !ifs[0].up {
		t.Fatalf("dump = %+v, %v", ifs, err)
	}
	if err := vppapi.Call(ch, &ip.IPRouteAddDel{IsAdd: false, Route: ip.IPRoute{Prefix: vppapi.Prefix(hostPrefix(podA.IPv4))}}, &ip.IPRouteAddDelReply{}); !vppapi.IsRetval(err, api.NO_SUCH_ENTRY) {
		t.Fatalf("deleting a missing route = %v", err)
	}
}

type (
	interfaceSetFlags      = interfaces.SwInterfaceSetFlags
	interfaceSetFlagsReply = interfaces.SwInterfaceSetFlagsReply
)

// Auto picks TAP where the kernel has the vhost-net device and af_packet
// where it has not, for pods and the host interconnect alike; an explicit
// interconnect type stays as it is.
func TestAutoInterfaceTypeFollowsVhostNet(t *testing.T) {
	present := filepath.Join(t.TempDir(), "vhost-net")
	if err := os.WriteFile(present, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "no-vhost-net")
	for _, tc := range []struct {
		vhost              string
		pod, interconnect  InterfaceType
		wantPod, wantInter InterfaceType
	}{
		{present, Auto, "", TAP, TAP},
		{missing, Auto, "", AFPacket, AFPacket},
		{missing, Auto, TAP, AFPacket, TAP},
		{present, AFPacket, Auto, AFPacket, TAP},
	} {
		cfg := testConfig()
		cfg.VhostNet, cfg.PodInterface, cfg.HostInterconnect = tc.vhost, tc.pod, tc.interconnect
		got, err := cfg.withDefaults()
		if err != nil {
			t.Fatal(err)
		}
		if got.PodInterface != tc.wantPod || got.HostInterconnect != tc.wantInter {
			t.Errorf("vhost-net %s, pod %q, interconnect %q: got %q/%q, want %q/%q", filepath.Base(tc.vhost), tc.pod, tc.interconnect,
				got.PodInterface, got.HostInterconnect, tc.wantPod, tc.wantInter)
		}
	}
}

// An af_packet uplink's pods get no more than its kernel link's MTU: VPP
// 25.10 gives the interface an L3 MTU of 9000 whatever the link carries,
// and pod packets of that size stalled bulk TCP between nodes.
func TestPodMTUIsTheUplinkLinksWhenSmaller(t *testing.T) {
	for _, tc := range []struct {
		name    string
		vppMTU  int
		links   map[string]int
		wantMTU int
	}{
		{"the kernel link's when VPP's is larger", 9000, map[string]int{"up0": 1500}, 1500},
		{"VPP's when the kernel link's is larger", 1500, map[string]int{"up0": 1544}, 1500},
		{"VPP's without a kernel link of that name", 9000, nil, 9000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.PodInterface, cfg.Uplink = AFPacket, "host-up0"
			h := start(t, cfg, func(h *harness) {
				h.vpp.add(&fakeIf{name: "host-up0", mtu: uint32(tc.vppMTU)})
				h.kernel.mtus = tc.links
			})
			want := fmt.Sprintf("CreateHostVeth mtu=%d", tc.wantMTU)
			if got := h.kernel.take(); !slices.Contains(got, want) {
				t.Fatalf("kernel calls %q, want %q among them", got, want)
			}
			if _, err := h.d.SetupPod(ctx(t), podA); err != nil {
				t.Fatal(err)
			}
			want = fmt.Sprintf("mtu=%d", tc.wantMTU)
			if got := h.kernel.take(); !slices.ContainsFunc(got, func(c string) bool { return strings.HasPrefix(c, "CreatePodVeth ") && strings.HasSuffix(c, want) }) {
				t.Fatalf("kernel calls %q, want a CreatePodVeth with %s", got, want)
			}
		})
	}
}
