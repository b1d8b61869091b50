package acl

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultMaxInFlight is how many ACL requests a transaction keeps in flight
// when Config.MaxInFlight is 0.
const DefaultMaxInFlight = 64

// DefaultMaxRules is the budget of ACL rules when Config.MaxRules is 0.
// With the ACL counters on, VPP gives every rule a counter of 16 bytes per
// thread in its stats segment and aborts when the segment is full
// (measured on VPP 25.10 with the documented 32M segment and the main
// thread alone: at 2.06 million rules); half a million leaves room for
// three threads and VPP's other counters.
const DefaultMaxRules = 500_000

// Config configures the renderer.
type Config struct {
	// MaxInFlight bounds pipelined requests (1..4096); 0 means
	// DefaultMaxInFlight.
	MaxInFlight int
	// MaxRules bounds the rules of all the renderer's ACLs together; 0
	// means DefaultMaxRules. A transaction whose tables need more is
	// refused before VPP is touched (VPP keeps the rules it has; pods
	// waiting for their policies stay down), rather than let VPP run out
	// of memory, which aborts it and takes every pod of the node down.
	MaxRules int
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
	if c.MaxRules == 0 {
		c.MaxRules = DefaultMaxRules
	}
	if c.MaxRules < 0 {
		return c, fmt.Errorf("MaxRules %d: want a positive number", c.MaxRules)
	}
	return c, nil
}
