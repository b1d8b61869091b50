package vpp

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
)

// snatConfig is a node with an af_packet uplink (198.18.0.10/24 given by
// someone else), its gateway, and SNAT of everything outside a pod CIDR
// and the node networks, but for one exempt pod. The IPv6 CIDR is ignored
// and the duplicate made once.
func snatConfig() Config {
	cfg := testConfig()
	cfg.PodInterface, cfg.Uplink = AFPacket, "host-up0"
	cfg.UplinkGatewayIPv4 = netip.MustParseAddr("198.18.0.254")
	cfg.SNAT = &SNATConfig{
		ClusterCIDRs: []netip.Prefix{
			netip.MustParsePrefix("198.18.0.0/15"), netip.MustParsePrefix("10.100.0.0/16"),
			netip.MustParsePrefix("fd00:100::/48"), netip.MustParsePrefix("10.100.0.0/16"),
		},
		ExemptSources: []netip.Addr{netip.MustParseAddr("10.100.0.9")},
	}
	return cfg
}

func withUplink(f *fakeVPP) { f.add(&fakeIf{name: "host-up0", mtu: 1500}) }

// snatMessages are SNAT's messages on a VPP whose uplink is 1, loopback 2,
// host interconnect 3: pipes 4 (ends 5, 6) and 7 (ends 8, 9).
var snatMessages = []string{
	"nat44_ed_plugin_enable_disable enable=true sessions=0",
	"nat44_forwarding_enable_disable enable=true",
	"ip_table_add_del add=true table=118 ip6=false",
	"ip_table_add_del add=true table=119 ip6=false",
	"pipe_create",
	`sw_interface_tag_add_del add=true 4 "vcoil-snat-split@2"`,
	"pipe_create",
	`sw_interface_tag_add_del add=true 7 "vcoil-snat-nat@2"`,
	"sw_interface_set_table 6 table=118 ip6=false",
	"ip_address_dump 6 ip6=false", "ip_address_dump 6 ip6=true",
	"sw_interface_add_del_address add=true 6 169.254.102.1/32",
	"sw_interface_set_table 9 table=119 ip6=false",
	"ip_address_dump 9 ip6=false", "ip_address_dump 9 ip6=true",
	"sw_interface_add_del_address add=true 9 169.254.102.2/32",
	"sw_interface_set_flags 4 flags=1", "sw_interface_set_flags 5 flags=1", "sw_interface_set_flags 6 flags=1",
	"sw_interface_set_flags 7 flags=1", "sw_interface_set_flags 8 flags=1", "sw_interface_set_flags 9 flags=1",
	"nat44_add_del_interface_addr add=true 1 flags=0",
	"nat44_ed_add_del_output_interface add=true 8",
	"classify_table_by_interface 6",
	"classify_add_del_table add=true index=-1 buckets=32 memory=1048576 skip=1 match=1 next=-1 miss=-1 mask=00000000000000000000ffffffff0000",
	"input_acl_set_interface add=true 6 ip4=0 ip6=-1 l2=-1",
	"classify_add_del_session add=true table=0 hit=-1 opaque=-1 action=1 metadata=119 src=10.100.0.9 match=00000000000000000000000000000000000000000000000000000a6400090000",
	"ip_route_add_del add=true table=119 0.0.0.0/0 via 198.18.0.254 1",
	"ip_route_add_del add=true table=118 0.0.0.0/0 out of 8",
	"ip_route_add_del add=true table=118 10.100.0.0/16 lookup in table 0",
	"ip_route_add_del add=true 10.100.0.0/16 via 198.18.0.254 1",
	"ip_route_add_del add=true table=118 198.18.0.0/15 lookup in table 0",
	"ip_route_add_del add=true 198.18.0.0/15 via 198.18.0.254 1",
	"ip_route_add_del add=true 0.0.0.0/0 via 0.0.0.0 5",
}

// The node set-up with SNAT, on a fresh VPP: the IPv4 default route goes
// into the split pipe instead of to the gateway, after everything else of
// SNAT; the uplink is a NAT frontend although no renderer asked.
func TestSNATSetUpSendsTheseMessages(t *testing.T) {
	h := start(t, snatConfig(), func(h *harness) { withUplink(h.vpp) })
	want := []string{
		"sw_interface_dump all",
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
		"ip_route_add_del add=true ::/0 via fe80::2 3",
	}
	want = append(want, snatMessages...)
	want = append(want,
		"acl_dump", `acl_add_replace -1 "vcoil-guard@2 deny" 3 rules`, `acl_add_replace -1 "vcoil-guard@2 permit" 2 rules`, // the pod guard
		"fib_source_dump", "ip_route_v2_dump src=8 table=0 ip6=false", "fib_source_dump", "ip_route_v2_dump src=8 table=0 ip6=true",
		"sw_interface_tap_v2_dump",
		`ip_table_add_del add=true table=2000000000 ip6=false name="vcoil-source-check"`, `ip_table_add_del add=true table=2000000000 ip6=true name="vcoil-source-check"`,
		"fib_source_dump", "ip_route_v2_dump src=8 table=2000000000 ip6=false", "fib_source_dump", "ip_route_v2_dump src=8 table=2000000000 ip6=true", "urpf_interface_dump all", "ip_table_dump", // source validation that VPP holds
		"acl_interface_list_dump",
		"nat44_static_mapping_dump",
		"nat44_interface_add_del_feature add=true 1 flags=0",
	)
	wantLines(t, "VPP messages", h.vpp.take(), want)

	// The renderer taking its roles away leaves the uplink outside.
	if err := h.d.SetNodeNATRole(ctx(t), Uplink, NATFrontend|NATBackend); err != nil {
		t.Fatal(err)
	}
	if err := h.d.SetNodeNATRole(ctx(t), Uplink, 0); err != nil {
		t.Fatal(err)
	}
	wantLines(t, "VPP messages of the uplink's roles", h.vpp.take(), []string{
		"nat44_interface_add_del_feature add=true 1 flags=32",
		"nat44_interface_add_del_feature add=false 1 flags=32",
	})
}

// A restarted VPP gets all of SNAT again, as it was.
func TestSNATIsMadeAgainAfterAVPPRestart(t *testing.T) {
	h := start(t, snatConfig(), func(h *harness) { withUplink(h.vpp) })
	h.vpp.take()
	h.vpp.restart(withUplink)
	waitSynced(t, h, 101)
	got := h.vpp.take()
	i := slices.Index(got, snatMessages[0])
	if i < 0 || len(got) < i+len(snatMessages) {
		t.Fatalf("no SNAT set-up after the restart:\n  %s", strings.Join(got, "\n  "))
	}
	wantLines(t, "SNAT messages after the restart", got[i:i+len(snatMessages)], snatMessages)
}

// A cluster CIDR that is also a service CIDR keeps the service network's
// route to the kernel: a resync does not route it to the gateway first.
func TestSNATLeavesAServiceCIDRToTheServiceNetwork(t *testing.T) {
	h := start(t, snatConfig(), func(h *harness) { withUplink(h.vpp) })
	if err := h.d.SetServiceNetwork(ctx(t), ServiceNetwork{CIDRs: []netip.Prefix{netip.MustParsePrefix("10.100.0.0/16")}}); err != nil {
		t.Fatal(err)
	}
	h.vpp.take()
	h.vpp.restart(withUplink)
	waitSynced(t, h, 101)
	got := h.vpp.take()
	if slices.Contains(got, "ip_route_add_del add=true 10.100.0.0/16 via 198.18.0.254 1") {
		t.Fatalf("the service CIDR was routed to the gateway:\n  %s", strings.Join(got, "\n  "))
	}
	for _, want := range []string{
		"ip_route_add_del add=true table=118 10.100.0.0/16 lookup in table 0",
		"ip_route_add_del add=true 198.18.0.0/15 via 198.18.0.254 1",
		"ip_route_add_del add=true 10.100.0.0/16 via 169.254.100.2 3",
	} {
		if !slices.Contains(got, want) {
			t.Fatalf("no %q after the restart:\n  %s", want, strings.Join(got, "\n  "))
		}
	}
}

// vcoild restarting on a VPP that kept SNAT finds the tagged pipes and the
// classifier, creates nothing, and changes only the exemptions that
// changed (and tables it cannot move are no error).
func TestSNATOnAVPPThatKeptItChangesOnlyTheExemptions(t *testing.T) {
	h := start(t, snatConfig(), func(h *harness) { withUplink(h.vpp) })
	h.d.Close()
	h.vpp.take()

	cfg := snatConfig()
	cfg.SNAT.ExemptSources = []netip.Addr{netip.MustParseAddr("10.100.0.7"), netip.MustParseAddr("10.100.0.8")}
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	h.d = newDriver(cfg, logr.Discard(), h.vpp.dialer(), h.kernel)
	if err := h.d.Init(ctx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.d.Close)
	got := h.vpp.take()
	i := slices.Index(got, "nat44_ed_plugin_enable_disable enable=true sessions=0")
	j := slices.Index(got, "ip_route_add_del add=true 0.0.0.0/0 via 0.0.0.0 5")
	if i < 0 || j < i {
		t.Fatalf("no SNAT set-up:\n  %s", strings.Join(got, "\n  "))
	}
	wantLines(t, "SNAT messages", got[i:j+1], []string{
		"nat44_ed_plugin_enable_disable enable=true sessions=0",
		"nat44_forwarding_enable_disable enable=true",
		"ip_table_add_del add=true table=118 ip6=false",
		"ip_table_add_del add=true table=119 ip6=false",
		"pipe_dump",
		"sw_interface_set_table 6 table=118 ip6=false",
		"ip_address_dump 6 ip6=false", "ip_address_dump 6 ip6=true",
		"sw_interface_set_table 9 table=119 ip6=false",
		"ip_address_dump 9 ip6=false", "ip_address_dump 9 ip6=true",
		"sw_interface_set_flags 4 flags=1", "sw_interface_set_flags 5 flags=1", "sw_interface_set_flags 6 flags=1",
		"sw_interface_set_flags 7 flags=1", "sw_interface_set_flags 8 flags=1", "sw_interface_set_flags 9 flags=1",
		"nat44_add_del_interface_addr add=true 1 flags=0",
		"nat44_ed_add_del_output_interface add=true 8",
		"classify_table_by_interface 6",
		"classify_session_dump table=0",
		"classify_add_del_session add=false table=0 hit=-1 opaque=-1 action=1 metadata=119 src=10.100.0.9 match=00000000000000000000000000000000000000000000000000000a6400090000",
		"classify_add_del_session add=true table=0 hit=-1 opaque=-1 action=1 metadata=119 src=10.100.0.7 match=00000000000000000000000000000000000000000000000000000a6400070000",
		"classify_add_del_session add=true table=0 hit=-1 opaque=-1 action=1 metadata=119 src=10.100.0.8 match=00000000000000000000000000000000000000000000000000000a6400080000",
		"ip_route_add_del add=true table=119 0.0.0.0/0 via 198.18.0.254 1",
		"ip_route_add_del add=true table=118 0.0.0.0/0 out of 8",
		"ip_route_add_del add=true table=118 10.100.0.0/16 lookup in table 0",
		"ip_route_add_del add=true 10.100.0.0/16 via 198.18.0.254 1",
		"ip_route_add_del add=true table=118 198.18.0.0/15 lookup in table 0",
		"ip_route_add_del add=true 198.18.0.0/15 via 198.18.0.254 1",
		"ip_route_add_del add=true 0.0.0.0/0 via 0.0.0.0 5",
	})
	h.vpp.mu.Lock()
	defer h.vpp.mu.Unlock()
	if n := len(h.vpp.snat.classifiers[0].sessions); n != 2 {
		t.Fatalf("the classifier has %d sessions, want 2", n)
	}
}

// vcoild started without SNAT on a VPP that has it from an earlier run
// deletes the pipes, and routes the default through the gateway again.
func TestSNATOffDeletesThePipesOfAnEarlierRun(t *testing.T) {
	h := start(t, snatConfig(), func(h *harness) { withUplink(h.vpp) })
	h.d.Close()
	h.vpp.take()

	cfg := snatConfig()
	cfg.SNAT = nil
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	h.d = newDriver(cfg, logr.Discard(), h.vpp.dialer(), h.kernel)
	if err := h.d.Init(ctx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.d.Close)
	got := h.vpp.take()
	i := slices.Index(got, "ip_route_add_del add=true 0.0.0.0/0 via 198.18.0.254 1")
	if i < 0 || len(got) < i+4 {
		t.Fatalf("no default route through the gateway:\n  %s", strings.Join(got, "\n  "))
	}
	wantLines(t, "VPP messages", got[i:i+4], []string{
		"ip_route_add_del add=true 0.0.0.0/0 via 198.18.0.254 1",
		"ip_route_add_del add=true ::/0 via fe80::2 3",
		"pipe_delete 4",
		"pipe_delete 7",
	})
	h.vpp.mu.Lock()
	defer h.vpp.mu.Unlock()
	if len(h.vpp.snat.pipes) != 0 || h.vpp.byName("pipe0.0") != nil {
		t.Fatalf("pipes left: %v", h.vpp.snat.pipes)
	}
}

func TestSNATConfigIsCheckedNamingTheField(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"without an uplink", func(c *Config) { c.Uplink, c.UplinkGatewayIPv4 = "", netip.Addr{} }, "SNAT needs Uplink"},
		{"without an IPv4 gateway", func(c *Config) { c.UplinkGatewayIPv4 = netip.Addr{} }, "SNAT needs UplinkGatewayIPv4"},
		{"without IPv4 cluster CIDRs", func(c *Config) { c.SNAT.ClusterCIDRs = []netip.Prefix{netip.MustParsePrefix("fd00::/8")} }, "SNAT.ClusterCIDRs has no IPv4 prefix"},
		{"with a default route as a cluster CIDR", func(c *Config) {
			c.SNAT.ClusterCIDRs = append(c.SNAT.ClusterCIDRs, netip.MustParsePrefix("0.0.0.0/0"))
		}, "SNAT.ClusterCIDRs: 0.0.0.0/0 is not a cluster CIDR"},
		{"with an IPv6 exempt source", func(c *Config) { c.SNAT.ExemptSources = []netip.Addr{netip.MustParseAddr("fd00::9")} }, "SNAT.ExemptSources: fd00::9 is not an IPv4 address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := snatConfig()
			tc.change(&cfg)
			_, err := cfg.withDefaults()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("withDefaults: %v, want %q", err, tc.want)
			}
		})
	}
}
