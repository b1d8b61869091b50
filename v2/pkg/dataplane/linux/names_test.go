package linux

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
)

func TestHostIfNameIsShortStableAndPerInterface(t *testing.T) {
	a := dataplane.PodKey{ContainerID: strings.Repeat("f", 64), IfName: "eth0"}
	b := dataplane.PodKey{ContainerID: a.ContainerID, IfName: "eth1"}
	name := HostIfName(a)
	if len(name) != 15 || !strings.HasPrefix(name, "vcoil") {
		t.Fatalf("HostIfName = %q, want vcoil and 10 hex digits", name)
	}
	if HostIfName(a) != name {
		t.Fatal("HostIfName changes between calls")
	}
	if HostIfName(b) == name {
		t.Fatalf("two interfaces of one container share the name %s", name)
	}
}

func TestHostAliasRoundTrips(t *testing.T) {
	for _, tc := range []struct {
		name  string
		alias string
		want  dataplane.PodKey
		ok    bool
	}{
		{"vcoil's alias gives back its key", hostAlias(dataplane.PodKey{ContainerID: "abc-1.x_y", IfName: "eth0"}), dataplane.PodKey{ContainerID: "abc-1.x_y", IfName: "eth0"}, true},
		{"an empty alias is not vcoil's", "", dataplane.PodKey{}, false},
		{"another program's alias is not vcoil's", "uplink to rack 3", dataplane.PodKey{}, false},
		{"an alias with a bad container ID is not vcoil's", "vcoil a/b eth0", dataplane.PodKey{}, false},
		{"an alias with extra fields is not vcoil's", "vcoil abc eth0 more", dataplane.PodKey{}, false},
		{"an alias of format 1 gives back its key", "vcoil abc eth0", dataplane.PodKey{ContainerID: "abc", IfName: "eth0"}, true},
		{"a newer vcoil's alias is not read", "vcoil@3 abc eth0", dataplane.PodKey{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseHostAlias(tc.alias)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("parseHostAlias(%q) = %v, %v; want %v, %v", tc.alias, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestValidatePodNamesWhatIsWrong(t *testing.T) {
	good := dataplane.Pod{
		PodKey: dataplane.PodKey{ContainerID: "c1", IfName: "eth0"},
		Netns:  "/run/netns/x",
		IPv4:   netip.MustParseAddr("198.19.0.5"),
		IPv6:   netip.MustParseAddr("2001:db8:19::5"),
	}
	for _, tc := range []struct {
		name   string
		change func(*dataplane.Pod)
		want   string
	}{
		{"a dual-stack pod is valid", func(*dataplane.Pod) {}, ""},
		{"an IPv4-only pod is valid", func(p *dataplane.Pod) { p.IPv6 = netip.Addr{} }, ""},
		{"an IPv6-only pod is valid", func(p *dataplane.Pod) { p.IPv4 = netip.Addr{} }, ""},
		{"an empty container ID is rejected", func(p *dataplane.Pod) { p.ContainerID = "" }, "container ID is empty"},
		{"a container ID with a space is rejected", func(p *dataplane.Pod) { p.ContainerID = "a b" }, "container ID \"a b\""},
		{"a container ID too long for the alias is rejected", func(p *dataplane.Pod) { p.ContainerID = strings.Repeat("a", 250) }, "too long"},
		{"an interface name of 16 characters is rejected", func(p *dataplane.Pod) { p.IfName = "eth0123456789012" }, "1 to 15"},
		{"an interface name with a slash is rejected", func(p *dataplane.Pod) { p.IfName = "a/b" }, "'/'"},
		{"an empty netns is rejected", func(p *dataplane.Pod) { p.Netns = "" }, "netns path is empty"},
		{"a pod without addresses is rejected", func(p *dataplane.Pod) { p.IPv4, p.IPv6 = netip.Addr{}, netip.Addr{} }, "neither"},
		{"an IPv6 address in the IPv4 field is rejected", func(p *dataplane.Pod) { p.IPv4 = p.IPv6 }, "is not IPv4"},
		{"an IPv4-mapped address in the IPv6 field is rejected", func(p *dataplane.Pod) { p.IPv6 = netip.MustParseAddr("::ffff:198.19.0.5") }, "is not IPv6"},
		{"the gateway's link-local address is rejected", func(p *dataplane.Pod) { p.IPv4 = netip.MustParseAddr(GatewayIPv4) }, "cannot be a pod's"},
		{"a multicast address is rejected", func(p *dataplane.Pod) { p.IPv6 = netip.MustParseAddr("ff02::1") }, "cannot be a pod's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := good
			tc.change(&p)
			err := validatePod(p)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("validatePod: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("validatePod = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"the main table cannot be the pod table", Config{PodTable: 254}, "PodTable 254"},
		{"a rule after main is rejected", Config{PodRulePriority: 32766}, "PodRulePriority 32766"},
		{"an MTU below IPv4's minimum is rejected", Config{MTU: 67}, "MTU 67"},
		{"a node namespace that does not exist is rejected", Config{NodeNetns: "/nonexistent/netns"}, "/nonexistent/netns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg, logr.Discard())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	c, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.PodTable != 116 || c.PodRulePriority != 2000 || c.MTU != 0 || c.NodeNetns != "" {
		t.Fatalf("defaults = %+v, want table 116, priority 2000, MTU detected, the process's namespace", c)
	}
}
