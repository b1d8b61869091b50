package vpp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/cnat"
	"go.fd.io/govpp/binapi/feature"
	"go.fd.io/govpp/binapi/interface_types"
	"go.fd.io/govpp/binapi/ip_types"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
)

// CnatSNAT is what the cnat service renderer asks of the pods: hairpin
// (a pod reaching itself through a Service) source-NATed to the node's NAT
// loopback of the family.
type CnatSNAT struct {
	// IPv4 and IPv6 are the NAT loopbacks (invalid: none of the family).
	IPv4, IPv6 netip.Addr
}

// cnatPodFeatures are the cnat feature-arc nodes every pod interface gets
// with the cnat renderer: the output nodes source-NAT a packet whose
// source and destination are one address after translation (the hairpin
// case of cnat's k8s SNAT policy, given the pod interfaces as its "pod"
// interfaces); the input nodes translate the replies back (cnat keeps
// those sessions for its input nodes only). The input nodes also
// translate the pod's new connections to a VIP before the ACL plugin's
// input node, where the FIB lookup would otherwise: the same translation,
// earlier, with the same sessions' effect.
var cnatPodFeatures = []struct{ arc, node string }{
	{"ip4-unicast", "cnat-input-ip4"}, {"ip4-output", "cnat-output-ip4"},
	{"ip6-unicast", "cnat-input-ip6"}, {"ip6-output", "cnat-output-ip6"},
}

// cnatMessages are the requests of SetCnatPods, checked when it is first
// used on a VPP: only nodes with the cnat renderer need the cnat plugin.
func cnatMessages() []api.Message {
	return []api.Message{
		&cnat.CnatSetSnatPolicy{}, &cnat.CnatSetSnatPolicyReply{},
		&cnat.CnatSetSnatAddresses{}, &cnat.CnatSetSnatAddressesReply{},
		&cnat.CnatSnatPolicyAddDelIf{}, &cnat.CnatSnatPolicyAddDelIfReply{},
		&feature.FeatureEnableDisable{}, &feature.FeatureEnableDisableReply{},
	}
}

// SetCnatPods records snat as desired state and configures cnat's SNAT
// policy and every wired pod for it; pods wired later get it at SetupPod,
// and a restarted VPP at the resync.
func (d *driver) SetCnatPods(ctx context.Context, snat CnatSNAT) error {
	if (snat.IPv4.IsValid() && !snat.IPv4.Is4()) || (snat.IPv6.IsValid() && !snat.IPv6.Is6()) {
		return fmt.Errorf("cnat pods: NAT loopbacks %v and %v are not an IPv4 and an IPv6 address", snat.IPv4, snat.IPv6)
	}
	if err := d.lockReady(ctx); err != nil {
		return fmt.Errorf("cnat pods: %w", err)
	}
	defer d.mu.Unlock()
	if d.cnat != nil && *d.cnat == snat && d.cnatSynced {
		// The renderer says it at every full sync; VPP holds it already
		// (pods wired since got it at their set-up, a new VPP at the
		// driver's sync), and the requests cost a few per pod.
		return nil
	}
	d.cnat = &snat
	return d.syncCnat()
}

// syncCnat sets cnat's SNAT policy and addresses and gives every wired pod
// the features (each request is idempotent in VPP), and records whether
// all of it succeeded. The caller holds d.mu.
func (d *driver) syncCnat() error {
	err := d.applyCnat()
	d.cnatSynced = d.cnat != nil && err == nil
	return err
}

func (d *driver) applyCnat() error {
	if d.cnat == nil {
		return nil
	}
	if err := vppapi.CheckMessages(d.ch, "the cnat service renderer's pod set-up", "is the cnat plugin loaded?", cnatMessages()); err != nil {
		return err
	}
	if err := vppapi.Call(d.ch, &cnat.CnatSetSnatPolicy{Policy: cnat.CNAT_POLICY_K8S}, &cnat.CnatSetSnatPolicyReply{}); err != nil {
		return fmt.Errorf("cnat pods: set the k8s SNAT policy: %w", err)
	}
	req := &cnat.CnatSetSnatAddresses{SwIfIndex: interface_types.InterfaceIndex(NoInterface)}
	if d.cnat.IPv4.IsValid() {
		req.SnatIP4 = ip_types.IP4Address(d.cnat.IPv4.As4())
	}
	if d.cnat.IPv6.IsValid() {
		req.SnatIP6 = ip_types.IP6Address(d.cnat.IPv6.As16())
	}
	if err := vppapi.Call(d.ch, req, &cnat.CnatSetSnatAddressesReply{}); err != nil {
		return fmt.Errorf("cnat pods: set the SNAT addresses %v, %v: %w", d.cnat.IPv4, d.cnat.IPv6, err)
	}
	if d.node.natEnabled {
		if err := d.cnatTwiceNATPool(); err != nil {
			return err
		}
	}
	var errs []error
	for _, st := range sortedPods(d.pods) {
		if !st.wired {
			continue
		}
		if err := d.cnatPod(st.swIfIndex, true); err != nil {
			errs = append(errs, fmt.Errorf("pod %s: %w", describe(st.pod.PodKey), err))
		}
	}
	if err := d.applyCnatFrontends(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// cnatFrontendRole is the NAT44 role every pod needs with the cnat
// renderer: hostPorts are still NAT44-ED static mappings, which a pod
// reaches only as a NAT44 frontend; so while a pod of the node has
// hostPorts every pod is one, and otherwise none is (NAT44-ED stays out of
// the pods' traffic; the role's cost grows with the hostPorts, not with
// the Services). The caller holds d.mu.
func (d *driver) cnatFrontendRole() NATRole {
	if d.cnat == nil || d.podRolesKnown {
		return 0
	}
	for _, st := range d.pods {
		if d.hasHostPorts(st.pod) {
			return NATFrontend
		}
	}
	return 0
}

// syncCnatFrontends gives every wired pod the role cnatFrontendRole says,
// after a pod with hostPorts came or went; a failure is logged (the pod's
// own set-up or removal succeeded) and the next change or resync tries
// again. The caller holds d.mu.
func (d *driver) syncCnatFrontends() {
	if d.cnat == nil {
		return
	}
	if err := d.applyCnatFrontends(); err != nil {
		d.log.Error(err, "Could not give the pods the NAT44 role of hostPorts")
	}
}

func (d *driver) applyCnatFrontends() error {
	if d.podRolesKnown {
		return nil
	}
	var errs []error
	var held map[uint32]NATRole
	for _, st := range sortedPods(d.pods) {
		if !st.wired {
			continue
		}
		if st.roleUnknown {
			// A pod wired by an earlier vcoild may hold the roles its
			// NAT44 service renderer gave every pod (a node switched to
			// cnat): read them, so that they go (SetPodNATRoles says why
			// they are read, not assumed).
			if held == nil {
				var err error
				if held, err = d.heldNATRoles(); err != nil {
					errs = append(errs, fmt.Errorf("the NAT roles of the pods found in VPP: %w", err))
					break
				}
			}
			st.role, st.roleUnknown = held[st.swIfIndex], false
		}
		if role := d.podRoleWith(st); role != st.role {
			if err := d.applyRole(st.swIfIndex, role&^st.role, st.role&^role); err != nil {
				errs = append(errs, fmt.Errorf("NAT role %s of pod %s: %w", role, describe(st.pod.PodKey), err))
				continue
			}
			st.role = role
		}
	}
	return errors.Join(errs...)
}

// cnatPod adds (or removes) the pod interface sw to cnat's pod interfaces
// and enables (or disables) its cnat features, when the cnat renderer
// asked for them. The caller holds d.mu.
func (d *driver) cnatPod(sw uint32, on bool) error {
	if d.cnat == nil {
		return nil
	}
	req := &cnat.CnatSnatPolicyAddDelIf{SwIfIndex: index(sw), Table: cnat.CNAT_POLICY_POD}
	if on {
		req.IsAdd = 1
	}
	if err := vppapi.Call(d.ch, req, &cnat.CnatSnatPolicyAddDelIfReply{}); err != nil {
		return fmt.Errorf("cnat's pod interfaces (interface %d): %w", sw, err)
	}
	for _, f := range cnatPodFeatures {
		req := &feature.FeatureEnableDisable{SwIfIndex: index(sw), Enable: on, ArcName: f.arc, FeatureName: f.node}
		if err := vppapi.Call(d.ch, req, &feature.FeatureEnableDisableReply{}); err != nil {
			return fmt.Errorf("feature %s on interface %d: %w", f.node, sw, err)
		}
	}
	return nil
}
