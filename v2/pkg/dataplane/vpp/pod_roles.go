package vpp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
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
	for _, st := range sortedPods(d.pods) {
		role := d.podRole(st.pod)
		if !st.wired {
			st.role = role
			continue
		}
		add, remove := role&^st.role, st.role&^role
		if st.roleUnknown {
			// Whatever an earlier vcoild left: every feature of role is
			// added (VPP's "already so" is success), every other removed.
			add, remove = role, (NATFrontend|NATBackend)&^role
		}
		if err := d.applyRole(st.swIfIndex, add, remove); err != nil {
			errs = append(errs, fmt.Errorf("set NAT role %s of pod %s: %w", role, describe(st.pod.PodKey), err))
			continue
		}
		st.role, st.roleUnknown = role, false
	}
	return errors.Join(errs...)
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
