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
