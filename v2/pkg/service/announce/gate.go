package announce

import (
	"context"
	"net/netip"
	"slices"
	"sync"

	"github.com/vcoil/vcoil/v2/pkg/service"
)

// Gate wraps the renderer that serves the LoadBalancer addresses (the
// nftables renderer) and remembers, per Service, the addresses Addresses
// gives for the model that renderer last rendered successfully.
//
// The processor calls every renderer in each round whatever the ones
// before it returned, so the Announcer, though it comes after the nftables
// renderer, also gets the changes that renderer failed to apply; a failed
// call leaves the renderer's dataplane as it was (the Renderer contract),
// which is what the Gate still holds. The Announcer announces only what
// the Gate holds.
type Gate struct {
	r service.Renderer

	mu     sync.Mutex
	served map[service.ID][]netip.Addr
}

// NewGate wraps r; put the Gate in the processor's renderers in r's place.
func NewGate(r service.Renderer) *Gate {
	return &Gate{r: r, served: map[service.ID][]netip.Addr{}}
}

// Resync resyncs the wrapped renderer and, when it succeeded, takes state
// as what is served.
func (g *Gate) Resync(ctx context.Context, state *service.State) error {
	if err := g.r.Resync(ctx, state); err != nil {
		return err
	}
	served := make(map[service.ID][]netip.Addr)
	for id, svc := range state.Services {
		if a := Addresses(svc); len(a) > 0 {
			served[id] = a
		}
	}
	g.mu.Lock()
	g.served = served
	g.mu.Unlock()
	return nil
}

// Update applies changes to the wrapped renderer and, when it succeeded,
// to what is served.
func (g *Gate) Update(ctx context.Context, changes *service.Changes) error {
	if err := g.r.Update(ctx, changes); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, id := range changes.Delete {
		delete(g.served, id)
	}
	for _, svc := range changes.Upsert {
		if a := Addresses(svc); len(a) > 0 {
			g.served[svc.ID] = a
		} else {
			delete(g.served, svc.ID)
		}
	}
	return nil
}

// Serves says whether the wrapped renderer serves addr for the Service id
// in a way that this node may announce it.
func (g *Gate) Serves(id service.ID, addr netip.Addr) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Contains(g.served[id], addr)
}
