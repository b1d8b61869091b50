package processor

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/vcoil/vcoil/v2/pkg/nodestate"
	"github.com/vcoil/vcoil/v2/pkg/service"
)

// Rendered wraps the renderer of the node's dataplane, in that renderer's
// place among the processor's renderers, and keeps what the node's state
// shows of it: the model it last applied successfully (a failed call
// leaves its dataplane as it was, the Renderer contract, so the model
// stays the previous one) and how its calls went. Each call is one sync.
type Rendered struct {
	r     service.Renderer
	how   service.Rendering
	clock func() time.Time

	mu       sync.Mutex
	node     service.Node
	services map[service.ID]*service.Service
	sync     nodestate.Sync
}

var _ service.Renderer = (*Rendered)(nil)

// NewRendered wraps r, which renders as how says.
func NewRendered(r service.Renderer, how service.Rendering) *Rendered {
	return &Rendered{r: r, how: how, clock: time.Now, services: map[service.ID]*service.Service{}}
}

// Resync resyncs the wrapped renderer and, when it succeeded, takes state
// as what it applied.
func (d *Rendered) Resync(ctx context.Context, state *service.State) error {
	start := d.clock()
	err := d.r.Resync(ctx, state)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.record(start, err)
	if err == nil {
		// The processor's map is the renderer's to keep, but the wrapped
		// renderer may keep it too: this copy is changed by Update alone.
		d.node, d.services = state.Node, maps.Clone(state.Services)
	}
	return err
}

// Update applies changes to the wrapped renderer and, when it succeeded,
// to what it applied.
func (d *Rendered) Update(ctx context.Context, changes *service.Changes) error {
	start := d.clock()
	err := d.r.Update(ctx, changes)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.record(start, err)
	if err != nil {
		return err
	}
	if changes.Node != nil {
		d.node = *changes.Node
	}
	for _, id := range changes.Delete {
		delete(d.services, id)
	}
	for _, s := range changes.Upsert {
		d.services[s.ID] = s
	}
	return nil
}

// record notes a call that started at start and ended now. The caller
// holds d.mu.
func (d *Rendered) record(start time.Time, err error) {
	end := d.clock()
	d.sync.Attempted = end
	if err != nil {
		d.sync.Error = err.Error()
		d.sync.Errors++
		return
	}
	d.sync.Error = ""
	d.sync.Last = end
	d.sync.Duration = nodestate.Seconds(end.Sub(start).Seconds())
}

// Services is the node state's services section as far as the renderer
// knows it: its name, its syncs and the frontends of the model it last
// applied.
func (d *Rendered) Services() *nodestate.Services {
	d.mu.Lock()
	node, services, sync := d.node, maps.Clone(d.services), d.sync
	d.mu.Unlock()
	// The models are never changed once given to a renderer: the
	// frontends are built without the lock.
	return &nodestate.Services{
		Renderer:  d.how.Name,
		Sync:      sync,
		Frontends: service.Frontends(&node, services, d.how),
	}
}

// StateSource fills the node state's services section: what the Rendered
// among the processor's renderers last applied (Setup of package proxy
// wraps the dataplane's renderer in one; without one the section holds
// only the rejected Services) and the Services the processor does not
// serve because it cannot represent them, with the reason its Warning
// Event gives.
func (p *Processor) StateSource() nodestate.Source {
	return nodestate.SourceFunc(func(_ context.Context, s *nodestate.State) error {
		out := &nodestate.Services{}
		for _, r := range p.opts.Renderers {
			if d, ok := r.(*Rendered); ok {
				out = d.Services()
				break
			}
		}
		out.Rejected = p.Rejected()
		s.Services = out
		return nil
	})
}

// Rejected are the Services the processor does not serve because Build
// finds them invalid, sorted by namespace and name. It builds them again
// from the objects it holds now (Build is pure), so a Service fixed a
// moment ago is no longer listed even before the next round.
func (p *Processor) Rejected() []nodestate.Rejected {
	type input struct {
		svc    *corev1.Service
		slices []*discoveryv1.EndpointSlice
	}
	p.mu.Lock()
	info := p.nodeInfoLocked()
	inputs := make([]input, 0, len(p.services))
	for id, svc := range p.services {
		in := input{svc: svc}
		for _, s := range p.slices[id] {
			in.slices = append(in.slices, s)
		}
		inputs = append(inputs, in)
	}
	p.mu.Unlock()
	// The cached objects are never changed in place: Build runs without
	// the lock, which the informers' handlers need.
	var out []nodestate.Rejected
	for _, in := range inputs {
		if _, err := Build(in.svc, in.slices, info); err != nil {
			out = append(out, nodestate.Rejected{Service: in.svc.Namespace + "/" + in.svc.Name, Reason: err.Error()})
		}
	}
	slices.SortFunc(out, func(a, b nodestate.Rejected) int { return cmp.Compare(a.Service, b.Service) })
	return out
}
