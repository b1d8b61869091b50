package vpp

import (
	"context"
	"errors"
	"fmt"
	"slices"
)

// Holding pods down until their policy ACLs are in VPP.
//
// A new VPP process holds no ACL, and the driver's own lists start empty
// in each incarnation (resetACLs): the policy stack sets them again when it
// resyncs, after the driver's sync. A pod made again by that sync, and
// brought up at once, would forward unfiltered until then. So, with
// Config.HoldPodsForPolicies, every pod interface wired into an
// incarnation before ReleasePods succeeded in it is left admin-down: VPP
// neither polls a down interface (its tap and af_packet inputs skip it)
// nor resolves the routes through it, so the pod sends and receives
// nothing. Everything else of the pod is made as usual: VPP takes the
// unnumbered address, the source checks, static neighbours and routes
// through a down interface, and the routes resolve when it comes up; an
// af_packet pod's veth is set down and up with it (VPP does that), which
// the pod's side of the wiring does not mind (its addresses are NODAD and
// its routes are "dev" routes). The policy stack calls ReleasePods after
// each of its full syncs; it sets the held interfaces up once the
// policies' lists were set in this incarnation. Until then, while the
// policy resync fails, the pods stay down (fail closed) and the policy
// agent retries and fails its readiness.
//
// Pods VPP kept (vcoild restarted, VPP did not) are not held: they keep
// the ACL lists VPP holds. A new pod (CNI ADD) during a hold is held too:
// its ADD returns once the policy agent rendered its rules (which, in a
// new incarnation, renders every pod's), and it comes up with the others.
// After the release, a new pod is set up as before: its interface comes up
// with whatever lists the owners set for its addresses, and the policy
// agent sets its own before ADD returns, before its containers start.

// holding reports whether a pod wired now is left down. The caller holds
// d.mu.
func (d *driver) holding() bool {
	return d.cfg.HoldPodsForPolicies && d.released != d.incarnation
}

// ReleasePods sets up the pod interfaces held down in this incarnation,
// once the policy owner's ACL lists were set in it; before that it fails,
// changing nothing, and the caller (the policy agent) retries. Without
// Config.HoldPodsForPolicies it does nothing.
func (d *driver) ReleasePods(ctx context.Context) error {
	if !d.cfg.HoldPodsForPolicies {
		return nil
	}
	if err := d.lockReady(ctx); err != nil {
		return fmt.Errorf("release the pods held for their network policies: %w", err)
	}
	defer d.mu.Unlock()
	if d.released == d.incarnation {
		return nil
	}
	if d.policiesIn != d.incarnation {
		return fmt.Errorf("release the pods held for their network policies: the policies' ACL lists are not in VPP incarnation %d yet (last set in %d)",
			d.incarnation, d.policiesIn)
	}
	held := make([]*podState, 0, len(d.pods))
	for _, st := range d.pods {
		if st.held && st.wired {
			held = append(held, st)
		}
	}
	slices.SortFunc(held, func(a, b *podState) int { return compareKeys(a.pod.PodKey, b.pod.PodKey) })
	var errs []error
	for _, st := range held {
		if err := setUp(d.ch, st.swIfIndex, fmt.Sprintf("interface %d (%s)", st.swIfIndex, st.vppName)); err != nil {
			errs = append(errs, fmt.Errorf("pod %s: %w", describe(st.pod.PodKey), err))
			continue
		}
		st.held = false
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("release the pods held for their network policies: %w", err)
	}
	d.released = d.incarnation
	if len(held) > 0 {
		d.log.Info("the network policies are in VPP; released the pods held down", "incarnation", d.incarnation, "pods", len(held))
	}
	return nil
}
