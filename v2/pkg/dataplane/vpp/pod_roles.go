package vpp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"go.fd.io/govpp/binapi/nat44_ed"
	"go.fd.io/govpp/binapi/nat_types"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
)

// SetPodNATRoles records the pods' roles as desired state and gives the
// wired pods theirs, sending only what changes. A pod that fails keeps its
// previous role (what VPP holds) and the others are still set; the error
// names each that failed.
func (d *driver) SetPodNATRoles(ctx context.Context, backends []netip.Addr) error {
	if err := d.lockReady(ctx); err != nil {
		return fmt.Errorf("set the pods' NAT roles: %w", err)
	}
	defer d.mu.Unlock()
	d.podRolesKnown = true
	d.backends = make(map[netip.Addr]bool, len(backends))
	for _, a := range backends {
		if a.Is4() {
			d.backends[a] = true
		}
	}
	var errs []error
	var held map[uint32]NATRole
	for _, st := range sortedPods(d.pods) {
		role := d.podRole(st.pod)
		if !st.wired {
			st.role = role
			continue
		}
		if st.roleUnknown {
			// Whatever an earlier vcoild left is read from VPP, not
			// assumed: VPP 25.10 answers the removal of a feature an
			// interface lacks with success, and forgets the interface's
			// other feature while its node stays in the interface's
			// feature arc. A frontend whose absent backend feature was
			// removed so, and which later became a backend, dropped
			// every connection it opened to a destination that VPP does
			// not translate (a pod or NodePort of another node, a host
			// outside).
			if held == nil {
				var err error
				if held, err = d.heldNATRoles(); err != nil {
					errs = append(errs, fmt.Errorf("set the NAT roles of the pods found in VPP: %w", err))
					break
				}
			}
			st.role = held[st.swIfIndex]
		}
		add, remove := role&^st.role, st.role&^role
		if err := d.applyRole(st.swIfIndex, add, remove); err != nil {
			errs = append(errs, fmt.Errorf("set NAT role %s of pod %s: %w", role, describe(st.pod.PodKey), err))
			continue
		}
		st.role, st.roleUnknown = role, false
	}
	return errors.Join(errs...)
}

// heldNATRoles are the NAT44 features VPP holds, by interface. The caller
// holds d.mu.
func (d *driver) heldNATRoles() (map[uint32]NATRole, error) {
	held := map[uint32]NATRole{}
	err := vppapi.Dump(d.ch, &nat44_ed.Nat44InterfaceDump{},
		func() *nat44_ed.Nat44InterfaceDetails { return &nat44_ed.Nat44InterfaceDetails{} },
		func(m *nat44_ed.Nat44InterfaceDetails) {
			var r NATRole
			if m.Flags&nat_types.NAT_IS_INSIDE != 0 {
				r |= NATBackend
			}
			if m.Flags&nat_types.NAT_IS_OUTSIDE != 0 {
				r |= NATFrontend
			}
			held[uint32(m.SwIfIndex)] = r
		})
	if err != nil {
		return nil, fmt.Errorf("dump the NAT44 interfaces: %w", err)
	}
	return held, nil
}

// podRole is the role SetPodNATRoles asks for pod: every pod is a
// frontend (its clients' traffic to services is DNATed), and a pod that
// backs a service is a backend too; a pod with hostPorts is both whether
// the services renderer has spoken or not (hostport.go). The caller holds
// d.mu.
func (d *driver) podRole(pod dataplane.Pod) NATRole {
	role := d.hostPortRole(pod)
	switch {
	case !d.podRolesKnown:
	case d.backends[pod.IPv4]:
		role |= NATFrontend | NATBackend
	default:
		role |= NATFrontend
	}
	return role
}

// sortedPods returns the pods in key order, so that the messages of a
// change are in a stable order.
func sortedPods(pods map[dataplane.PodKey]*podState) []*podState {
	out := make([]*podState, 0, len(pods))
	for _, st := range pods {
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b *podState) int { return compareKeys(a.pod.PodKey, b.pod.PodKey) })
	return out
}
