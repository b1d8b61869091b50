package cnat

import (
	"cmp"
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

type serviceID = service.ID

// Renderer is the cnat service renderer (service.Renderer).
type Renderer struct {
	dp      Dataplane
	cfg     Config
	log     logr.Logger
	metrics *metrics

	// The desired state: the model (Resync's state plus Updates), each
	// service's translations, which services claim each frontend and the
	// translation that serves it (the smallest claiming ID's, as in the
	// other renderers, so that every node agrees).
	node       service.Node
	services   map[service.ID]*service.Service
	perService map[service.ID]*rendered
	claims     map[key][]service.ID
	desired    map[key]*translation
	// refused are the IPv4 frontends translated to the reject sink, which
	// the node's kernel refuses to the node's own clients
	// (vpp.ServiceNetwork); networkChanged says that they, the node ports
	// or the node changed since the dataplane was told.
	refused        map[key]bool
	networkChanged bool
	// ranged are the services with loadBalancerSourceRanges; acl is their
	// ACL on the uplink's and the host interconnect's input, which sees a
	// LoadBalancer IP before cnat translates it at the FIB lookup.
	ranged map[service.ID]bool
	acl    *vppranges.ACL

	// What VPP holds, valid while synced: the incarnation, vcoil's
	// translations and the frontends under foreign VIPs. A failed request
	// makes it unknown (synced false): the next call dumps VPP again.
	synced  bool
	inc     vpp.Incarnation
	checked vpp.Incarnation
	held    map[key]*translation
	foreign map[key]bool
	// retired: the incarnation whose NAT44 service mappings are gone.
	retired vpp.Incarnation
}

var _ service.Renderer = (*Renderer)(nil)

// New returns the renderer for dp. It checks cfg and changes nothing
// before the first Resync.
func New(dp Dataplane, cfg Config, log logr.Logger) (*Renderer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("cnat service renderer: %w", err)
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, fmt.Errorf("cnat service renderer: register metrics: %w", err)
	}
	r := &Renderer{dp: dp, cfg: cfg, log: log, metrics: m, acl: vppranges.New(dp, "cnat service renderer", log)}
	r.reset(service.Node{}, 0)
	return r, nil
}

// Rendering is how this renderer serves the model (package-level
// Rendering).
func (r *Renderer) Rendering() service.Rendering { return Rendering() }

func (r *Renderer) reset(node service.Node, n int) {
	r.node = node
	r.services = make(map[service.ID]*service.Service, n)
	r.perService = make(map[service.ID]*rendered, n)
	r.claims = make(map[key][]service.ID, n)
	r.desired = make(map[key]*translation, n)
	r.refused = map[key]bool{}
	r.ranged = map[service.ID]bool{}
	r.networkChanged = true
}

// Resync makes VPP hold exactly the translations of state: it renders the
// whole state, dumps what VPP holds and applies the difference, with the
// service network.
func (r *Renderer) Resync(ctx context.Context, state *service.State) (err error) {
	defer func(start time.Time) { r.metrics.observe("resync", start, err) }(time.Now())
	r.reset(state.Node, len(state.Services))
	dirty := make(map[key]bool, len(state.Services))
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
// everything, as Resync does.
func (r *Renderer) Update(ctx context.Context, changes *service.Changes) (err error) {
	defer func(start time.Time) { r.metrics.observe("update", start, err) }(time.Now())
	if changes.Empty() {
		return nil
	}
	dirty := map[key]bool{}
	if changes.Node != nil {
		// Every frontend depends on the node (NodePort addresses, the NAT
		// loopback of source-NATed frontends).
		for k := range r.desired {
			dirty[k] = true
		}
		services := r.services
		r.reset(*changes.Node, len(services))
		for _, id := range slices.SortedFunc(maps.Keys(services), service.ID.Compare) {
			r.setService(id, services[id], dirty)
		}
	}
	rangesChanged := changes.Node != nil
	for _, id := range changes.Delete {
		rangesChanged = rangesChanged || r.ranged[id]
		r.setService(id, nil, dirty)
	}
	for _, s := range changes.Upsert {
		rangesChanged = rangesChanged || r.ranged[s.ID]
		r.setService(s.ID, s, dirty)
		rangesChanged = rangesChanged || r.ranged[s.ID]
	}
	r.settle(dirty)

	ch, ifs, err := r.channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	if !r.synced || ifs.Incarnation != r.inc {
		if r.synced {
			r.log.Info("VPP incarnation changed; syncing every translation", "was", r.inc, "now", ifs.Incarnation)
		}
		return r.fullSync(ctx, ch, ifs)
	}
	if err := r.syncServiceNetwork(ctx, false); err != nil {
		return err
	}
	// The filter before the translations it filters: a new LoadBalancer IP
	// is never reachable from every source, even for a moment.
	if rangesChanged {
		if err := r.syncACL(ctx, ch, ifs, false); err != nil {
			return err
		}
	}
	if err := r.apply(ch, slices.SortedFunc(maps.Keys(dirty), compareKeys)); err != nil {
		return err
	}
	if changes.Node != nil {
		return r.syncPods(ctx)
	}
	return nil
}

// syncACL makes VPP hold the source-ranges ACL of the services, both
// families, on the node interfaces' input (package vppranges); full: find
// it by its tag first and set the interfaces' lists again.
func (r *Renderer) syncACL(ctx context.Context, ch api.Channel, ifs vpp.NodeInterfaces, full bool) error {
	return r.acl.Sync(ctx, ch, ifs, vppranges.Rules(r.services, r.ranged, true), full)
}

func (r *Renderer) channel(ctx context.Context) (api.Channel, vpp.NodeInterfaces, error) {
	ch, ifs, err := r.dp.Channel(ctx, r.cfg.MaxInFlight)
	if err != nil {
		return nil, ifs, fmt.Errorf("cnat service renderer: open a VPP channel: %w", err)
	}
	return ch, ifs, nil
}

// setService replaces the desired translations of service id with those
// of s (nil: none), marking the frontends whose claims changed in dirty.
func (r *Renderer) setService(id service.ID, s *service.Service, dirty map[key]bool) {
	old := r.perService[id]
	if old != nil {
		for _, e := range old.entries {
			dirty[e.key] = true
			c := slices.DeleteFunc(r.claims[e.key], func(c service.ID) bool { return c == id })
			if len(c) == 0 {
				delete(r.claims, e.key)
			} else {
				r.claims[e.key] = c
			}
		}
		if len(old.nodePorts) > 0 {
			r.networkChanged = true
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
	rnd := render(&r.node, s)
	// Logged when a service starts having them, not at each change of its
	// endpoints.
	if rnd.skippedSCTP > 0 && (old == nil || old.skippedSCTP == 0) {
		r.log.Info("SCTP ports not served: cnat translates the ports of TCP and UDP only", "service", id, "ports", rnd.skippedSCTP)
	}
	if rnd.noLoopback > 0 && (old == nil || old.noLoopback == 0) {
		r.log.Info("The node has no NAT loopback of a frontend's family: its clients are not source-NATed, so a remote backend's reply may not come back", "service", id, "frontends", rnd.noLoopback)
	}
	if rnd.unsinkable > 0 && (old == nil || old.unsinkable == 0) {
		r.log.V(1).Info("IPv6 frontends without endpoints are not translated: they follow VPP's routes", "service", id, "frontends", rnd.unsinkable)
	}
	r.services[id], r.perService[id] = s, rnd
	for _, e := range rnd.entries {
		if r.cfg.foreign(e.key.Addr) {
			r.log.Error(errors.New("frontend under a foreign VIP prefix"), "Service frontend not rendered", "service", id, "frontend", e.key)
			continue
		}
		dirty[e.key] = true
		r.claims[e.key] = append(r.claims[e.key], id)
	}
	if len(rnd.nodePorts) > 0 {
		r.networkChanged = true
	}
	if len(s.LoadBalancerSourceRanges) > 0 {
		r.ranged[id] = true
	}
}

// settle chooses the translation of each dirty frontend: that of the
// smallest service ID claiming it.
func (r *Renderer) settle(dirty map[key]bool) {
	for k := range dirty {
		c := r.claims[k]
		if len(c) == 0 {
			delete(r.desired, k)
		} else {
			if len(c) > 1 {
				r.log.V(1).Info("Frontend claimed by more than one service; the first by namespace and name serves it", "frontend", k, "services", c)
			}
			r.desired[k] = r.perService[slices.MinFunc(c, service.ID.Compare)].get(k)
		}
		t := r.desired[k]
		if refused := t != nil && t.Kind == kindReject; refused != r.refused[k] {
			r.networkChanged = true
			if refused {
				r.refused[k] = true
			} else {
				delete(r.refused, k)
			}
		}
	}
}

// fullSync dumps VPP's translations and applies the whole difference, with
// the marker and the service network.
func (r *Renderer) fullSync(ctx context.Context, ch api.Channel, ifs vpp.NodeInterfaces) error {
	r.synced = false
	if r.checked != ifs.Incarnation || r.checked == 0 {
		if err := checkMessages(ch); err != nil {
			return err
		}
		r.checked = ifs.Incarnation
	}
	if ifs.Incarnation != r.inc {
		// What the renderer knew of VPP's ACLs died with the old one.
		r.acl.Forget()
	}
	r.inc = ifs.Incarnation
	held, foreign, err := dump(ch, r.cfg.foreign)
	if err != nil {
		return fmt.Errorf("cnat service renderer: dump translations: %w", err)
	}
	if err := r.syncServiceNetwork(ctx, true); err != nil {
		return err
	}
	r.held, r.foreign = held, foreign
	r.metrics.reset(held)
	// The marker first: VPP then says what it holds before it holds any.
	mk := markerKey()
	if err := r.applyKeys(ch, []key{mk}, func(key) *translation { return markerTranslation() }); err != nil {
		return err
	}
	keys := make([]key, 0, len(held)+len(r.desired))
	for k := range held {
		if k != mk {
			keys = append(keys, k)
		}
	}
	for k := range r.desired {
		if _, ok := held[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, compareKeys)
	if err := r.syncACL(ctx, ch, ifs, true); err != nil {
		return err
	}
	r.synced = true
	if err := r.apply(ch, keys); err != nil {
		return err
	}
	if r.retired != ifs.Incarnation {
		// After the translations: a new connection always finds one of
		// the two plugins (retire.go).
		n, err := retireNAT44(ch, r.cfg.MaxInFlight)
		if err != nil {
			return fmt.Errorf("cnat service renderer: the switch from NAT44: %w", err)
		}
		if n > 0 {
			r.log.Info("deleted the NAT44 static mappings of an earlier vcoild's services; cnat serves them now", "mappings", n)
		}
		r.retired = ifs.Incarnation
	}
	return r.syncPods(ctx)
}

// apply sends what turns the held translations at keys into the desired
// ones.
func (r *Renderer) apply(ch api.Channel, keys []key) error {
	return r.applyKeys(ch, keys, func(k key) *translation { return r.desired[k] })
}

func (r *Renderer) applyKeys(ch api.Channel, keys []key, want func(key) *translation) error {
	var ops []op
	for _, k := range keys {
		if r.foreign[k] {
			continue
		}
		ops = change(ops, k, r.held[k], want(k))
	}
	if len(ops) == 0 {
		return nil
	}
	err := send(ch, ops, r.cfg.MaxInFlight)
	r.metrics.sent(len(ops))
	if err != nil {
		r.synced = false
		return fmt.Errorf("cnat service renderer: %w", err)
	}
	for _, o := range ops {
		if o.del {
			r.setHeld(o.k, nil)
		} else {
			r.setHeld(o.k, o.t)
		}
	}
	return nil
}

func (r *Renderer) setHeld(k key, t *translation) {
	if old := r.held[k]; old != nil {
		r.metrics.translation(old.Kind, -1)
	}
	if t == nil {
		delete(r.held, k)
		return
	}
	r.held[k] = t
	r.metrics.translation(t.Kind, 1)
}

// syncServiceNetwork tells the dataplane the service network: the service
// CIDRs, the NAT loopback, the sinks, the frontends refused through the
// reject sink and the node ports; always, or only when they changed.
func (r *Renderer) syncServiceNetwork(ctx context.Context, always bool) error {
	if !always && !r.networkChanged {
		return nil
	}
	var cidrs []netip.Prefix
	for _, p := range r.cfg.ServiceCIDRs {
		cidrs = append(cidrs, p.Masked())
	}
	refused := make([]vpp.Frontend, 0, len(r.refused))
	for _, k := range slices.SortedFunc(maps.Keys(r.refused), compareKeys) {
		refused = append(refused, vpp.Frontend{Addr: k.Addr, Protocol: k.Proto, Port: k.Port})
	}
	net := vpp.ServiceNetwork{CIDRs: cidrs, IPv6: true, Sinks: true, Refused: refused, NodePorts: r.nodePorts()}
	for _, a := range r.node.NATLoopback {
		if a.Is4() {
			net.Source = a
		} else {
			net.SourceIPv6 = a
		}
	}
	if err := r.dp.SetServiceNetwork(ctx, net); err != nil {
		r.networkChanged = true
		return fmt.Errorf("cnat service renderer: set the service network: %w", err)
	}
	r.networkChanged = false
	return nil
}

// syncPods gives the pods cnat's features and SNAT policy: hairpin is
// source-NATed to the NAT loopbacks, which the service network routes
// (cnat translates the replies back only on a route). It runs after the
// translations: on a node switched from the NAT44 renderer it also takes
// the pods' NAT44 roles away, and until then NAT44-ED keeps translating
// what cnat does not yet (retire.go). The dataplane sends nothing when
// VPP holds it already.
func (r *Renderer) syncPods(ctx context.Context) error {
	var snat vpp.CnatSNAT
	for _, a := range r.node.NATLoopback {
		if a.Is4() {
			snat.IPv4 = a
		} else {
			snat.IPv6 = a
		}
	}
	if err := r.dp.SetCnatPods(ctx, snat); err != nil {
		r.synced = false
		return fmt.Errorf("cnat service renderer: set up pods for hairpin: %w", err)
	}
	return nil
}

// nodePorts are the node ports of every service, each once (a port two
// services claim goes to the first by namespace and name), sorted.
func (r *Renderer) nodePorts() []vpp.NodePort {
	type npKey struct {
		proto uint8
		port  uint16
		is4   bool
	}
	seen := map[npKey]bool{}
	var out []vpp.NodePort
	for _, id := range slices.SortedFunc(maps.Keys(r.perService), service.ID.Compare) {
		for _, np := range r.perService[id].nodePorts {
			if k := (npKey{np.Protocol, np.Port, np.ClusterIP.Is4()}); !seen[k] {
				seen[k] = true
				out = append(out, np)
			}
		}
	}
	slices.SortFunc(out, func(a, b vpp.NodePort) int {
		if c := cmp.Compare(a.Protocol, b.Protocol); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Port, b.Port); c != 0 {
			return c
		}
		return a.ClusterIP.Compare(b.ClusterIP)
	})
	return out
}
