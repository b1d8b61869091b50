package kubectlvcoil

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseDestination(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		want     Target
	}{
		{"a pod with a port and protocol", "shop/web-1:8080/udp", Target{Port: 8080, Protocol: "udp"}},
		{"a pod in the default namespace", "web-1:8080", Target{Port: 8080}},
		{"a Service with its port by name", "svc/shop/web:http", Target{Service: "shop/web", PortName: "http"}},
		{"a Service without a port", "svc/web", Target{Service: "ns/web"}},
		{"an IPv4 address with a port", "203.0.113.10:443/TCP", Target{Port: 443, Protocol: "tcp"}},
		{"an IPv6 address in brackets with a port", "[2001:db8::1]:53/udp", Target{Port: 53, Protocol: "udp"}},
		{"an IPv6 address alone", "2001:db8::1", Target{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseDestination(tt.in, "ns")
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case strings.Contains(tt.in, "shop/web-1"):
				tt.want.Namespace, tt.want.Name = "shop", "web-1"
			case tt.in == "web-1:8080":
				tt.want.Namespace, tt.want.Name = "ns", "web-1"
			case strings.HasPrefix(tt.in, "203."):
				tt.want.Addr = netip.MustParseAddr("203.0.113.10")
			case strings.Contains(tt.in, "2001:db8::1"):
				tt.want.Addr = netip.MustParseAddr("2001:db8::1")
			}
			if got != tt.want {
				t.Errorf("ParseDestination(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
	for _, bad := range []string{"shop/web:0", "shop/web:99999", "shop/web:80/icmp", "a/b/c", "10.0.0.1:http", "shop/web:http", "[10.0.0.1]:80"} {
		if _, err := ParseDestination(bad, "ns"); err == nil {
			t.Errorf("ParseDestination(%q) accepted it", bad)
		}
	}
	if _, err := ParseSource("shop/web:80", "ns"); err == nil {
		t.Error("a source with a port was accepted")
	}
	if _, err := ParseSource("svc/shop/web", "ns"); err == nil {
		t.Error("a Service as the source was accepted")
	}
}
