package cnat

import (
	"fmt"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMaxInFlight is how many requests a large sync keeps in flight.
const DefaultMaxInFlight = 256

// Config configures the renderer.
type Config struct {
	// ServiceCIDRs are the cluster's service CIDRs: the node's kernel
	// routes them into VPP, so that the node's own processes reach cluster
	// IPs.
	ServiceCIDRs []netip.Prefix
	// ForeignVIPs are VIPs the renderer leaves to others: it neither
	// changes nor deletes a translation whose VIP lies in one, and renders
	// no frontend there. Every other cnat translation in the node's VPP is
	// vcoil's (cnat translations carry no tag; doc.go says why this is the
	// rule).
	ForeignVIPs []netip.Prefix
	// MaxInFlight bounds pipelined requests; 0 means DefaultMaxInFlight.
	MaxInFlight int
	// Registry receives the renderer's metrics (nil: none).
	Registry prometheus.Registerer
}

func (c Config) withDefaults() (Config, error) {
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.MaxInFlight < 1 || c.MaxInFlight > 4096 {
		return c, fmt.Errorf("MaxInFlight %d: want 1..4096", c.MaxInFlight)
	}
	for _, set := range [][]netip.Prefix{c.ServiceCIDRs, c.ForeignVIPs} {
		for _, p := range set {
			if !p.IsValid() {
				return c, fmt.Errorf("invalid CIDR %v", p)
			}
		}
	}
	return c, nil
}

// foreign says whether a lies in one of the foreign VIP prefixes.
func (c Config) foreign(a netip.Addr) bool {
	for _, p := range c.ForeignVIPs {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
