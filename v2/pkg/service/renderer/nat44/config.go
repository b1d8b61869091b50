package nat44

import (
	"fmt"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Config; docs/vpp.md documents them.
const (
	// DefaultLocalWeight gives local and remote backends the same weight,
	// as kube-proxy spreads connections evenly.
	DefaultLocalWeight = 1
	// DefaultMaxInFlight is how many requests a large sync keeps in flight.
	DefaultMaxInFlight = 256
)

// Config configures the renderer.
type Config struct {
	// ServiceCIDRs are the cluster's service CIDRs (IPv4 ones are used):
	// the node's kernel routes them into VPP, so that the node's own
	// processes reach cluster IPs.
	ServiceCIDRs []netip.Prefix
	// LocalWeight is the probability weight of backends on this node
	// relative to remote ones (1..255; 0 means DefaultLocalWeight).
	LocalWeight uint8
	// MaxInFlight bounds pipelined requests; 0 means DefaultMaxInFlight.
	MaxInFlight int
	// Registry receives the renderer's metrics (nil: none).
	Registry prometheus.Registerer
}

func (c Config) withDefaults() (Config, error) {
	if c.LocalWeight == 0 {
		c.LocalWeight = DefaultLocalWeight
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.MaxInFlight < 1 || c.MaxInFlight > 4096 {
		return c, fmt.Errorf("MaxInFlight %d: want 1..4096", c.MaxInFlight)
	}
	for _, p := range c.ServiceCIDRs {
		if !p.IsValid() {
			return c, fmt.Errorf("invalid CIDR %v", p)
		}
	}
	return c, nil
}
