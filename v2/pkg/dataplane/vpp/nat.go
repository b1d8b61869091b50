package vpp

import (
	"context"
	"fmt"
	"strings"

	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/nat44_ed"
	"go.fd.io/govpp/binapi/nat_types"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
)

// NATRole is what NAT44-ED makes of traffic through an interface (the
// "Interface features" of the Contiv/VPP services design): a Frontend is
// where clients reach services (the NAT "out" feature: DNAT of service
// addresses to backends); a Backend is where a service's endpoint sits
// (the "in" feature). Every pod is a Frontend; a pod that backs a service
// is a Backend too, and then hairpin traffic to itself is self-twice-NATed
// to the NAT loopback.
type NATRole uint8

const (
	NATFrontend NATRole = 1 << iota
	NATBackend
)

func (r NATRole) String() string {
	var s []string
	if r&NATFrontend != 0 {
		s = append(s, "frontend(out)")
	}
	if r&NATBackend != 0 {
		s = append(s, "backend(in)")
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "+")
}

// NodeInterface names the node's own VPP interfaces that can hold a role.
type NodeInterface string

const (
	// Uplink is Config.Uplink: a Frontend for clients outside the node.
	Uplink NodeInterface = "uplink"
	// HostInterconnect: a Frontend for the host's clients and a Backend for
	// host-network endpoints.
	HostInterconnect NodeInterface = "host"
)

// NATRoles is the API the services renderer calls. A role is part of the
// desired state: it is kept across a pod's rewiring and replayed after a
// VPP restart. Setting the first role enables the NAT44-ED plugin.
type NATRoles interface {
	// SetPodNATRole gives the pod's interface exactly role (0 removes
	// both features). The pod must be wired (SetupPod).
	SetPodNATRole(ctx context.Context, key dataplane.PodKey, role NATRole) error
	// SetNodeNATRole does the same for the uplink or the host
	// interconnect.
	SetNodeNATRole(ctx context.Context, iface NodeInterface, role NATRole) error
}

func (d *driver) SetPodNATRole(ctx context.Context, key dataplane.PodKey, role NATRole) error {
	if err := d.lockReady(ctx); err != nil {
		return fmt.Errorf("set NAT role of pod %s: %w", describe(key), err)
	}
	defer d.mu.Unlock()
	st := d.pods[key]
	if st == nil || !st.wired {
		return fmt.Errorf("set NAT role of pod %s: the pod is not wired", describe(key))
	}
	if err := d.applyRole(st.swIfIndex, role&^st.role, st.role&^role); err != nil {
		return fmt.Errorf("set NAT role %s of pod %s: %w", role, describe(key), err)
	}
	st.role = role
	return nil
}

func (d *driver) SetNodeNATRole(ctx context.Context, iface NodeInterface, role NATRole) error {
	if err := d.lockReady(ctx); err != nil {
		return fmt.Errorf("set NAT role of the %s interface: %w", iface, err)
	}
	defer d.mu.Unlock()
	sw, err := d.nodeInterface(iface)
	if err != nil {
		return err
	}
	if iface == Uplink && (d.cfg.SNAT != nil || d.hostPortsOn) {
		// SNAT's replies, and the clients of hostPorts, come in through
		// the uplink's outside feature.
		role |= NATFrontend
	}
	old := d.nodeRoles[iface]
	if err := d.applyRole(sw, role&^old, old&^role); err != nil {
		return fmt.Errorf("set NAT role %s of the %s interface: %w", role, iface, err)
	}
	d.nodeRoles[iface] = role
	return nil
}

func (d *driver) nodeInterface(iface NodeInterface) (uint32, error) {
	switch iface {
	case Uplink:
		if d.cfg.Uplink == "" {
			return 0, fmt.Errorf("NAT role of the uplink: no uplink is configured")
		}
		return d.node.uplink, nil
	case HostInterconnect:
		return d.node.interconnect, nil
	}
	return 0, fmt.Errorf("unknown node interface %q: want %q or %q", iface, Uplink, HostInterconnect)
}

// applyRole adds the features of add and removes those of remove on sw.
// NAT44-ED wants one call per feature: only NAT_IS_INSIDE counts, and
// "outside" is flags 0 (seen on VPP 25.10; an interface that is both inside
// and outside needs two calls).
func (d *driver) applyRole(sw uint32, add, remove NATRole) error {
	if add == 0 && remove == 0 {
		return nil
	}
	if err := d.ensureNAT(); err != nil {
		return err
	}
	for _, c := range []struct {
		role  NATRole
		flags nat_types.NatConfigFlags
	}{{NATBackend, nat_types.NAT_IS_INSIDE}, {NATFrontend, 0}} {
		for _, isAdd := range []bool{true, false} {
			set := add
			if !isAdd {
				set = remove
			}
			if set&c.role == 0 {
				continue
			}
			req := &nat44_ed.Nat44InterfaceAddDelFeature{IsAdd: isAdd, Flags: c.flags, SwIfIndex: index(sw)}
			err := vppapi.Call(d.ch, req, &nat44_ed.Nat44InterfaceAddDelFeatureReply{})
			if isAdd {
				// A VPP that outlived vcoild holds the features of the
				// pods it kept, whose roles vcoild does not know.
				err = vppapi.IgnoreRetval(err, api.VALUE_EXIST)
			} else {
				err = vppapi.IgnoreRetval(err, api.NO_SUCH_ENTRY, api.INVALID_SW_IF_INDEX)
			}
			if err != nil {
				return fmt.Errorf("NAT44 %s feature on interface %d: %w", c.role, sw, err)
			}
		}
	}
	return nil
}
