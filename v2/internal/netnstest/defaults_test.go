package netnstest

import "testing"

// A new namespace neither forwards nor filters by reverse path, whatever
// the root namespace does: New and NewAnonymous set the kernel's defaults.
func TestNewNamespacesStartFromTheKernelsDefaults(t *testing.T) {
	for name, n := range map[string]*NS{"named": New(t, "defaults"), "anonymous": NewAnonymous(t, "defaults")} {
		for _, d := range kernelDefaultKeys() {
			if got := n.ReadSysctl(d.key); got != d.value {
				t.Errorf("%s namespace: %s = %s, want the kernel's default %s", name, d.key, got, d.value)
			}
		}
		if got := n.ReadSysctl("net.ipv4.ip_forward"); got != "0" {
			t.Errorf("%s namespace forwards (ip_forward=%s)", name, got)
		}
	}
}

// The settings a namespace copies from a root namespace that forwards and
// filters (a Docker host, a Kubernetes node), made here inside a test
// namespace since the root namespace is not the test's to change: the
// reset New runs undoes every one of them.
func TestResetUndoesWhatARoutingRootNamespaceWouldHandDown(t *testing.T) {
	n := New(t, "inherited")
	inherited := map[string]string{
		"net.ipv4.ip_forward":                "1",
		"net.ipv4.conf.all.rp_filter":        "1",
		"net.ipv4.conf.default.rp_filter":    "2",
		"net.ipv4.conf.all.route_localnet":   "1",
		"net.ipv4.conf.all.arp_ignore":       "1",
		"net.ipv4.conf.default.arp_announce": "2",
		"net.ipv4.conf.all.send_redirects":   "0",
		"net.ipv6.conf.all.forwarding":       "1",
		"net.ipv6.conf.default.accept_ra":    "0",
		"net.ipv6.conf.default.disable_ipv6": "1",
	}
	for key, value := range inherited {
		n.Sysctl(key, value)
	}
	n.resetInherited()
	for key := range inherited {
		want := ""
		for _, d := range kernelDefaultKeys() {
			if sysctlPath(d.key) == sysctlPath(key) {
				want = d.value
			}
		}
		if want == "" {
			t.Fatalf("%s is not among the settings reset", key)
		}
		if got := n.ReadSysctl(key); got != want {
			t.Errorf("%s = %s after the reset, want %s", key, got, want)
		}
	}
	// An interface made later copies the defaults: it does not route.
	n.IP("link", "add", "probe1", "type", "veth", "peer", "name", "probe2")
	for _, key := range []string{"net/ipv4/conf/probe1/forwarding", "net/ipv4/conf/probe1/rp_filter", "net/ipv6/conf/probe1/forwarding", "net/ipv6/conf/probe1/disable_ipv6"} {
		if got := n.ReadSysctl(key); got != "0" {
			t.Errorf("%s = %s, want 0", key, got)
		}
	}
}
