package dataplane

import (
	"net/netip"
	"strings"
	"testing"
)

// Pod.Validate is the check both dataplanes run before wiring: each bad
// field is rejected with an error that names it.
func TestPodValidateNamesTheBadField(t *testing.T) {
	good := Pod{
		PodKey: PodKey{ContainerID: "c1", IfName: "eth0"},
		Netns:  "/run/netns/x",
		IPv4:   netip.MustParseAddr("198.19.0.5"),
		IPv6:   netip.MustParseAddr("2001:db8:19::5"),
		MTU:    65535, // a dataplane's own limit, not the contract's
	}
	for _, tc := range []struct {
		name   string
		change func(*Pod)
		want   string
	}{
		{"dual stack", func(*Pod) {}, ""},
		{"IPv4 only", func(p *Pod) { p.IPv6 = netip.Addr{} }, ""},
		{"IPv6 only", func(p *Pod) { p.IPv4 = netip.Addr{} }, ""},
		{"bad key", func(p *Pod) { p.IfName = "" }, "interface name"},
		{"no netns", func(p *Pod) { p.Netns = "" }, "netns path is empty"},
		{"no address", func(p *Pod) { p.IPv4, p.IPv6 = netip.Addr{}, netip.Addr{} }, "neither an IPv4 nor an IPv6"},
		{"IPv6 as IPv4", func(p *Pod) { p.IPv4 = p.IPv6 }, "is not IPv4"},
		{"IPv4 as IPv6", func(p *Pod) { p.IPv6 = p.IPv4 }, "is not IPv6"},
		{"IPv4-mapped IPv6", func(p *Pod) { p.IPv6 = netip.MustParseAddr("::ffff:198.19.0.5") }, "is not IPv6"},
		{"unspecified", func(p *Pod) { p.IPv4 = netip.IPv4Unspecified() }, "0.0.0.0 cannot be a pod's"},
		{"loopback", func(p *Pod) { p.IPv6 = netip.IPv6Loopback() }, "::1 cannot be a pod's"},
		{"broadcast", func(p *Pod) { p.IPv4 = netip.MustParseAddr("255.255.255.255") }, "255.255.255.255 cannot be a pod's"},
		{"link-local", func(p *Pod) { p.IPv4 = netip.MustParseAddr("169.254.1.1") }, "169.254.1.1 cannot be a pod's"},
		{"multicast", func(p *Pod) { p.IPv6 = netip.MustParseAddr("ff02::1") }, "ff02::1 cannot be a pod's"},
		{"zone", func(p *Pod) { p.IPv6 = p.IPv6.WithZone("eth0") }, "cannot be a pod's"},
		{"source prefixes", func(p *Pod) {
			p.SourcePrefixes = []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("2001:db8:77::/48"), netip.MustParsePrefix("198.51.100.7/32")}
		}, ""},
		{"unmasked source prefix", func(p *Pod) { p.SourcePrefixes = []netip.Prefix{netip.MustParsePrefix("203.0.113.9/24")} }, "203.0.113.9/24 has bits set"},
		{"no source prefix", func(p *Pod) { p.SourcePrefixes = []netip.Prefix{{}} }, "is not a prefix"},
		{"loopback source prefix", func(p *Pod) { p.SourcePrefixes = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")} }, "127.0.0.0/8 cannot be a pod's"},
		{"everything as source prefix", func(p *Pod) { p.SourcePrefixes = []netip.Prefix{netip.MustParsePrefix("::/0")} }, "::/0 cannot be a pod's"},
		{"link-local source prefix", func(p *Pod) { p.SourcePrefixes = []netip.Prefix{netip.MustParsePrefix("fe80::/64")} }, "fe80::/64 cannot be a pod's"},
		{"multicast source prefix", func(p *Pod) { p.SourcePrefixes = []netip.Prefix{netip.MustParsePrefix("224.0.0.0/4")} }, "224.0.0.0/4 cannot be a pod's"},
		{"IPv4-mapped source prefix", func(p *Pod) { p.SourcePrefixes = []netip.Prefix{netip.MustParsePrefix("::ffff:203.0.113.0/120")} }, "IPv4-mapped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := good
			tc.change(&p)
			err := p.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
