package acl

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMaxInFlight is how many ACL requests a transaction keeps in flight
// when Config.MaxInFlight is 0.
const DefaultMaxInFlight = 64

// Config configures the renderer.
type Config struct {
	// MaxInFlight bounds pipelined requests (1..4096); 0 means
	// DefaultMaxInFlight.
	MaxInFlight int
	// Registry receives the renderer's metrics (nil: none).
	Registry prometheus.Registerer
	// StatsSocket is VPP's stats socket (startup.conf's statseg {
	// socket-name }). When it and Registry are set, the renderer turns on
	// the ACL plugin's counters and exports each of its ACLs' hit counts
	// (vcoil_vpp_policy_acl_matched_packets_total, _bytes_total).
	StatsSocket string
}

func (c Config) withDefaults() (Config, error) {
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.MaxInFlight < 1 || c.MaxInFlight > 4096 {
		return c, fmt.Errorf("MaxInFlight %d: want 1..4096", c.MaxInFlight)
	}
	return c, nil
}
