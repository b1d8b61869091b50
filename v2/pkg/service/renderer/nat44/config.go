package nat44

import (
	"errors"
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
	// SNAT would source-NAT pods' traffic leaving the node through the
	// uplink, except traffic to ClusterCIDRs. New refuses it: NAT44-ED's
	// output feature cannot exclude destinations (its identity mappings
	// exempt sources only), so pods' traffic to other nodes would be
	// source-NATed as well. Off by default, as on the Linux dataplane.
	SNAT bool
	// ClusterCIDRs are the destinations SNAT would leave alone (the pod,
	// node and service networks of the cluster).
	ClusterCIDRs []netip.Prefix
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
	for _, p := range append(append([]netip.Prefix{}, c.ServiceCIDRs...), c.ClusterCIDRs...) {
		if !p.IsValid() {
			return c, fmt.Errorf("invalid CIDR %v", p)
		}
	}
	if c.SNAT {
		return c, errors.New("SNAT is not supported by the NAT44 service renderer: NAT44-ED's output feature on the uplink source-NATs every new flow leaving it and cannot exclude destinations (the cluster CIDRs), so traffic to other nodes' pods would be source-NATed too (docs/vpp-services.md)")
	}
	return c, nil
}
