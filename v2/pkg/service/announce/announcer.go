package announce

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/go-logr/logr"

	"github.com/vcoil/vcoil/v2/pkg/service"
)

// ErrNotServed is returned (wrapped) when addresses a Service should
// announce are held back because the serving renderer has not rendered
// them yet. The processor then resyncs the Announcer at its next retry,
// after resyncing the serving renderer in the same round.
var ErrNotServed = errors.New("not served yet")

// Exporter is where the announced addresses go: routes.Exporter with the
// LoadBalancer protocol.
type Exporter interface {
	// Sync makes the exported routes exactly prefixes (/32 and /128 here).
	Sync(ctx context.Context, prefixes []netip.Prefix) error
}

// Served says what the node serves; a Gate.
type Served interface {
	Serves(id service.ID, addr netip.Addr) bool
}

// Announcer is the service.Renderer that announces LoadBalancer addresses:
// it keeps, per Service, the addresses Addresses gives, and syncs the
// Exporter with their union, limited to the addresses inside vcoil's
// LoadBalancer pools (another implementation's addresses are its own
// business) and to those the serving renderer serves. Calls of the
// processor and SetPools may come from different goroutines.
type Announcer struct {
	exporter Exporter
	served   Served
	log      logr.Logger

	mu    sync.Mutex
	want  map[service.ID][]netip.Addr
	pools []netip.Prefix
	// haveState and havePools: the Announcer syncs nothing before it has
	// both, so that a start does not withdraw the addresses a previous
	// run announced just because the Services or the pools are not known
	// yet.
	haveState, havePools bool
}

// New returns an Announcer that exports through e what s serves. Put it
// in the processor's renderers after the Gate of the serving renderer.
func New(e Exporter, s Served, log logr.Logger) *Announcer {
	return &Announcer{exporter: e, served: s, log: log, want: map[service.ID][]netip.Addr{}}
}

// Resync takes state as the whole set of Services and syncs the exporter.
func (a *Announcer) Resync(ctx context.Context, state *service.State) error {
	want := make(map[service.ID][]netip.Addr)
	for id, svc := range state.Services {
		if addrs := Addresses(svc); len(addrs) > 0 {
			want[id] = addrs
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.want, a.haveState = want, true
	return a.syncLocked(ctx)
}

// Update applies changes and syncs the exporter; a change that touches no
// LoadBalancer address costs no netlink call.
func (a *Announcer) Update(ctx context.Context, changes *service.Changes) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	changed := false
	for _, id := range changes.Delete {
		if _, ok := a.want[id]; ok {
			delete(a.want, id)
			changed = true
		}
	}
	for _, svc := range changes.Upsert {
		addrs := Addresses(svc)
		if slices.Equal(addrs, a.want[svc.ID]) {
			continue
		}
		if len(addrs) > 0 {
			a.want[svc.ID] = addrs
		} else {
			delete(a.want, svc.ID)
		}
		changed = true
	}
	if !changed {
		return nil
	}
	return a.syncLocked(ctx)
}

// SetPools replaces the LoadBalancer pools' subnets and syncs the
// exporter; the first call enables syncing (with no pool, nothing is
// announced). It syncs even when the pools did not change, so that the
// caller's retry of a failed sync does something.
func (a *Announcer) SetPools(ctx context.Context, pools []netip.Prefix) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pools, a.havePools = slices.Clone(pools), true
	return a.syncLocked(ctx)
}

func (a *Announcer) syncLocked(ctx context.Context) error {
	if !a.haveState || !a.havePools {
		return nil
	}
	var announce []netip.Prefix
	var held []string
	for id, addrs := range a.want {
		for _, addr := range addrs {
			if !a.inPools(addr) {
				continue
			}
			if !a.served.Serves(id, addr) {
				held = append(held, id.String()+" "+addr.String())
				continue
			}
			announce = append(announce, netip.PrefixFrom(addr, addr.BitLen()))
		}
	}
	// Two Services may hold one address (one for TCP, one for UDP); the
	// exporter takes each prefix once.
	slices.SortFunc(announce, func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr()) })
	announce = slices.Compact(announce)
	if err := a.exporter.Sync(ctx, announce); err != nil {
		return fmt.Errorf("announce %d LoadBalancer addresses: %w", len(announce), err)
	}
	if len(held) > 0 {
		slices.Sort(held)
		const shown = 5
		more := ""
		if len(held) > shown {
			more = fmt.Sprintf(" and %d more", len(held)-shown)
			held = held[:shown]
		}
		return fmt.Errorf("LoadBalancer addresses not announced until the node serves them (%s%s): %w", strings.Join(held, ", "), more, ErrNotServed)
	}
	return nil
}

func (a *Announcer) inPools(addr netip.Addr) bool {
	for _, p := range a.pools {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}
