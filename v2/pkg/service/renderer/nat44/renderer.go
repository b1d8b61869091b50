package nat44

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"go.fd.io/govpp/api"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/service"
	"github.com/vcoil/vcoil/v2/pkg/service/renderer/vppranges"
)

// Renderer is the NAT44-ED service renderer (service.Renderer).
type Renderer struct {
	dp      Dataplane
	cfg     Config
	log     logr.Logger
	metrics *metrics

	// The desired state: the model (Resync's state plus Updates), each
	// service's mappings, which services claim each frontend and the
	// mapping that serves it (the smallest claiming ID's, as in the
	// nftables renderer, so that every node agrees).
	node       service.Node
	services   map[service.ID]*service.Service
	perService map[service.ID]*rendered
	claims     map[mappingKey][]service.ID
	desired    map[mappingKey]*mapping
	// backends counts, per IPv4 address of a local endpoint, the services
	// it backs: the pods that must be NAT backends.
	backends map[netip.Addr]int
	// ranged are the services with loadBalancerSourceRanges.
	ranged map[service.ID]bool
	// refused are the frontends mapped to the reject sink, which the
	// node's kernel refuses to the node's own clients (vpp.ServiceNetwork);
	// refusedChanged says that they (or the services' node ports) changed
	// since the dataplane was told.
	refused        map[mappingKey]bool
	refusedChanged bool

	// What VPP holds, valid while synced: the incarnation, vcoil's mappings
	// and the frontends that other mappings occupy. A failed request makes
	// it unknown (synced false): the next call dumps VPP again.
	synced  bool
	inc     vpp.Incarnation
	checked vpp.Incarnation
	held    map[mappingKey]*mapping
	foreign map[mappingKey]string
	acl     *vppranges.ACL
	// podBackends is what SetPodNATRoles last got (nil: never called);
	// backendsChanged says that the set of backends changed since.
	podBackends     []netip.Addr
	backendsChanged bool
}

var _ service.Renderer = (*Renderer)(nil)

// New returns the renderer for dp. It checks cfg and changes nothing
// before the first Resync.
func New(dp Dataplane, cfg Config, log logr.Logger) (*Renderer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("NAT44 service renderer: %w", err)
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, fmt.Errorf("NAT44 service renderer: register metrics: %w", err)
	}
	r := &Renderer{dp: dp, cfg: cfg, log: log, metrics: m, acl: vppranges.New(dp, "NAT44 service renderer", log)}
	r.reset(service.Node{}, 0)
	return r, nil
}

// reset empties the desired state, making room for n services.
func (r *Renderer) reset(node service.Node, n int) {
	r.node = node
	r.services = make(map[service.ID]*service.Service, n)
	r.perService = make(map[service.ID]*rendered, n)
	r.claims = make(map[mappingKey][]service.ID, n)
	r.desired = make(map[mappingKey]*mapping, n)
	r.backends = map[netip.Addr]int{}
	r.ranged = map[service.ID]bool{}
	r.refused = map[mappingKey]bool{}
}

// Resync makes VPP hold exactly the mappings of state: it renders the whole
// state, dumps what VPP holds under vcoil's tags and applies the
// difference, with the node's NAT configuration and the source-ranges ACL.
func (r *Renderer) Resync(ctx context.Context, state *service.State) (err error) {
	defer func(start time.Time) { r.metrics.observe("resync", start, err) }(time.Now())
	r.reset(state.Node, len(state.Services))
	dirty := make(map[mappingKey]bool, len(state.Services))
	for _, id := range slices.SortedFunc(maps.Keys(state.Services), service.ID.Compare) {
		r.setService(id, state.Services[id], dirty)
	}
	r.settle(dirty)
	ch, ifs, err := r.channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	return r.fullSync(ctx, ch, ifs)
}

// Update applies changes. With the incarnation it last synced, and VPP's
// content known, it sends only the difference of the frontends that
// changed; otherwise (VPP restarted, or a request failed) it syncs
// everything from the desired state, as Resync does.
func (r *Renderer) Update(ctx context.Context, changes *service.Changes) (err error) {
	defer func(start time.Time) { r.metrics.observe("update", start, err) }(time.Now())
	if changes.Empty() {
		return nil
	}
	dirty := map[mappingKey]bool{}
	rangesChanged := false
	touch := func(id service.ID) {
		if r.ranged[id] {
			rangesChanged = true
		}
	}
	if changes.Node != nil {
		// Everything depends on the node (its NodePort addresses).
		for k := range r.desired {
			dirty[k] = true
		}
		services := r.services
		r.reset(*changes.Node, len(services))
		for _, id := range slices.SortedFunc(maps.Keys(services), service.ID.Compare) {
			r.setService(id, services[id], dirty)
		}
	}
	for _, id := range changes.Delete {
		touch(id)
		r.setService(id, nil, dirty)
	}
	for _, s := range changes.Upsert {
		touch(s.ID)
		r.setService(s.ID, s, dirty)
		touch(s.ID)
	}
	r.settle(dirty)

	ch, ifs, err := r.channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	if !r.synced || ifs.Incarnation != r.inc {
		if r.synced {
			r.log.Info("VPP incarnation changed; syncing every service mapping", "was", r.inc, "now", ifs.Incarnation)
		}
		return r.fullSync(ctx, ch, ifs)
	}
	if changes.Node != nil {
		if err := r.syncNode(ctx, ch, ifs); err != nil {
			return err
		}
	} else {
		if err := r.syncPodRoles(ctx, false); err != nil {
			return err
		}
		if err := r.syncServiceNetwork(ctx, false); err != nil {
			return err
		}
	}
	if err := r.apply(ch, slices.SortedFunc(maps.Keys(dirty), compareKeys)); err != nil {
		return err
	}
	if rangesChanged || changes.Node != nil {
		return r.syncACL(ctx, ch, ifs, false)
	}
	return nil
}

func (r *Renderer) channel(ctx context.Context) (api.Channel, vpp.NodeInterfaces, error) {
	ch, ifs, err := r.dp.Channel(ctx, r.cfg.MaxInFlight)
	if err != nil {
		return nil, ifs, fmt.Errorf("NAT44 service renderer: open a VPP channel: %w", err)
	}
	return ch, ifs, nil
}

// setService replaces the desired mappings of service id with those of s
// (nil: none), marking the frontends whose claims changed in dirty.
func (r *Renderer) setService(id service.ID, s *service.Service, dirty map[mappingKey]bool) {
	old := r.perService[id]
	defer func() {
		// The node ports go to the kernel with the service network.
		var was, is []vpp.NodePort
		if old != nil {
			was = old.nodePorts
		}
		if n := r.perService[id]; n != nil {
			is = n.nodePorts
		}
		if !slices.Equal(was, is) {
			r.refusedChanged = true
		}
	}()
	if old != nil {
		for _, e := range old.mappings {
			k := e.key
			dirty[k] = true
			c := slices.DeleteFunc(r.claims[k], func(c service.ID) bool { return c == id })
			if len(c) == 0 {
				delete(r.claims, k)
			} else {
				r.claims[k] = c
			}
		}
		for _, a := range old.backends {
			if r.backends[a]--; r.backends[a] <= 0 {
				delete(r.backends, a)
				r.backendsChanged = true
			}
		}
		delete(r.perService, id)
	}
	delete(r.services, id)
	delete(r.ranged, id)
	if s == nil {
		return
	}
	if err := s.Validate(); err != nil {
		r.log.Error(err, "Service skipped", "service", id)
		return
	}
	rnd := render(&r.node, s, r.cfg.LocalWeight)
	if rnd.leftOut > 0 {
		r.log.Info("Endpoints left out: VPP keeps the sum of a mapping's probabilities in 8 bits", "service", id, "endpoints", rnd.leftOut)
	}
	if rnd.skippedSCTP > 0 {
		r.log.V(1).Info("SCTP ports skipped: NAT44-ED translates only TCP and UDP ports", "service", id, "ports", rnd.skippedSCTP)
	}
	// Once per Service that gains IPv6 frontends, not at each change of
	// its endpoints: in a dual-stack cluster most Services have them.
	if rnd.skippedIPv6 > 0 && (old == nil || old.skippedIPv6 == 0) {
		r.log.Info("IPv6 frontends not served: vcoil's VPP dataplane serves IPv4 Services only (NAT44-ED)", "service", id, "frontends", rnd.skippedIPv6)
	}
	r.services[id], r.perService[id] = s, rnd
	for _, e := range rnd.mappings {
		dirty[e.key] = true
		r.claims[e.key] = append(r.claims[e.key], id)
	}
	for _, a := range rnd.backends {
		if r.backends[a]++; r.backends[a] == 1 {
			r.backendsChanged = true
		}
	}
	if len(s.LoadBalancerSourceRanges) > 0 {
		r.ranged[id] = true
	}
}

// settle chooses the mapping of each dirty frontend: that of the smallest
// service ID claiming it.
func (r *Renderer) settle(dirty map[mappingKey]bool) {
	for k := range dirty {
		c := r.claims[k]
		if len(c) == 0 {
			delete(r.desired, k)
			continue
		}
		if len(c) > 1 {
			r.log.V(1).Info("Frontend claimed by more than one service; the first by namespace and name serves it", "frontend", k, "services", c)
		}
		owner := c[0]
		if len(c) > 1 {
			owner = slices.MinFunc(c, service.ID.Compare)
		}
		r.desired[k] = r.perService[owner].get(k)
	}
	for k := range dirty {
		m := r.desired[k]
		if refused := m != nil && m.Kind == kindReject; refused != r.refused[k] {
			r.refusedChanged = true
			if refused {
				r.refused[k] = true
			} else {
				delete(r.refused, k)
			}
		}
	}
}

// fullSync configures the node's NAT, dumps vcoil's mappings and applies
// the whole difference, then the ACL.
func (r *Renderer) fullSync(ctx context.Context, ch api.Channel, ifs vpp.NodeInterfaces) error {
	r.synced = false
	if r.checked != ifs.Incarnation || r.checked == 0 {
		if err := checkMessages(ch); err != nil {
			return err
		}
		r.checked = ifs.Incarnation
	}
	if ifs.Incarnation != r.inc {
		// What the renderer knew of VPP died with the old one.
		r.acl.Forget()
	}
	r.inc = ifs.Incarnation
	if err := r.syncNode(ctx, ch, ifs); err != nil {
		return err
	}
	held, foreign, err := dumpMappings(ch)
	if err != nil {
		return fmt.Errorf("NAT44 service renderer: dump static mappings: %w", err)
	}
	r.held, r.foreign = held, foreign
	r.metrics.resetMappings(held)
	keys := make([]mappingKey, 0, len(held)+len(r.desired))
	for k := range held {
		keys = append(keys, k)
	}
	for k := range r.desired {
		if _, ok := held[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, compareKeys)
	r.synced = true
	if err := r.apply(ch, keys); err != nil {
		return err
	}
	return r.syncACL(ctx, ch, ifs, true)
}

// apply sends what turns the held mappings at keys into the desired ones,
// and records what VPP then holds. A frontend that a mapping without
// vcoil's tag occupies is left alone (logged): VPP would refuse the
// renderer's.
func (r *Renderer) apply(ch api.Channel, keys []mappingKey) error {
	var ops []op
	blocked := 0
	for _, k := range keys {
		want := r.wanted(k)
		if tag, ok := r.foreign[k]; ok && r.desired[k] != nil {
			if blocked == 0 {
				r.log.Error(errors.New("frontend taken by a mapping vcoil did not make"), "Service frontend not rendered",
					"service", r.desired[k].Service, "frontend", k, "tag", tag)
			}
			blocked++
		}
		ops = change(ops, k, r.held[k], want)
	}
	if blocked > 1 {
		r.log.Error(errors.New("frontends taken by mappings vcoil did not make"), "Service frontends not rendered", "frontends", blocked)
	}
	if len(ops) > 0 {
		err := send(ch, ops, r.cfg.MaxInFlight)
		r.metrics.sent(len(ops))
		if err != nil {
			r.synced = false
			return fmt.Errorf("NAT44 service renderer: %w", err)
		}
	}
	for _, k := range keys {
		r.setHeld(k, r.wanted(k))
	}
	return nil
}

// wanted is the desired mapping at k, unless a mapping vcoil did not make
// holds k.
func (r *Renderer) wanted(k mappingKey) *mapping {
	if _, taken := r.foreign[k]; taken {
		return nil
	}
	return r.desired[k]
}

func (r *Renderer) setHeld(k mappingKey, m *mapping) {
	old := r.held[k]
	if old == m {
		return
	}
	if old != nil {
		r.metrics.mapping(old.Kind, -1)
	}
	if m == nil {
		delete(r.held, k)
		return
	}
	r.held[k] = m
	r.metrics.mapping(m.Kind, 1)
}

// syncACL makes VPP hold the source-ranges ACL of the services on the
// outside interfaces (package vppranges); full: find it by its tag first
// and set the interfaces' lists again.
func (r *Renderer) syncACL(ctx context.Context, ch api.Channel, ifs vpp.NodeInterfaces, full bool) error {
	return r.acl.Sync(ctx, ch, ifs, vppranges.Rules(r.services, r.ranged, false), full)
}
