package nat44

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"

	"github.com/vcoil/vcoil/v2/pkg/service"
)

// Renderer is the NAT44-ED service renderer (service.Renderer).
type Renderer struct {
	dp  Dataplane
	cfg Config
	log logr.Logger
}

var _ service.Renderer = (*Renderer)(nil)

// New returns the renderer for dp. It checks cfg and changes nothing
// before the first Resync.
func New(dp Dataplane, cfg Config, log logr.Logger) (*Renderer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("NAT44 service renderer: %w", err)
	}
	return &Renderer{dp: dp, cfg: cfg, log: log}, nil
}

// errTODO marks the contract skeleton; the implementation replaces it.
var errTODO = errors.New("NAT44 service renderer: not implemented yet")

// Resync makes VPP hold exactly the mappings of state.
func (r *Renderer) Resync(ctx context.Context, state *service.State) error { return errTODO }

// Update applies changes.
func (r *Renderer) Update(ctx context.Context, changes *service.Changes) error { return errTODO }
