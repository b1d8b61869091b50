package vpp

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"go.fd.io/govpp/binapi/acl"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
)

// maxACLs is what an interface's ACL list holds (its count is a u8).
const maxACLs = 255

// SetInterfaceACLs records owner's input ACLs on iface and sends the
// interface's merged list when it differs from the one sent in this
// incarnation. The first list set on an interface in an incarnation is
// sent whatever it is, so that what an earlier vcoild left there is
// replaced: owners set their lists (empty ones too) at each resync.
func (d *driver) SetInterfaceACLs(ctx context.Context, inc Incarnation, iface NodeInterface, owner ACLOwner, input []uint32) error {
	if owner != ACLPolicy && owner != ACLServices {
		return fmt.Errorf("set the input ACLs of the %s interface: unknown owner %d", iface, owner)
	}
	if err := d.lockReady(ctx); err != nil {
		return fmt.Errorf("set the input ACLs of the %s interface: %w", iface, err)
	}
	defer d.mu.Unlock()
	if inc != d.incarnation {
		return fmt.Errorf("set the input ACLs of the %s interface: incarnation %d is stale, VPP is in incarnation %d: resync", iface, inc, d.incarnation)
	}
	sw, err := d.nodeInterface(iface)
	if err != nil {
		return fmt.Errorf("set the input ACLs: %w", err)
	}
	owners := maps.Clone(d.acls[iface])
	if owners == nil {
		owners = map[ACLOwner][]uint32{}
	}
	owners[owner] = slices.Clone(input)
	merged := mergeACLs(owners)
	if len(merged) > maxACLs {
		return fmt.Errorf("set the input ACLs of the %s interface: %d ACLs, VPP takes at most %d", iface, len(merged), maxACLs)
	}
	sent, known := d.aclsSent[iface]
	if !known || !slices.Equal(sent, merged) {
		req := &acl.ACLInterfaceSetACLList{SwIfIndex: index(sw), Count: uint8(len(merged)), NInput: uint8(len(merged)), Acls: merged}
		if err := vppapi.Call(d.ch, req, &acl.ACLInterfaceSetACLListReply{}); err != nil {
			return fmt.Errorf("set the input ACLs %v of the %s interface (%d): %w", merged, iface, sw, err)
		}
		d.aclsSent[iface] = merged
	}
	d.acls[iface] = owners
	return nil
}

// mergeACLs is the interface's list: the owners' ACLs in the order of the
// owners' constants (policies first), each owner's in its own order.
func mergeACLs(owners map[ACLOwner][]uint32) []uint32 {
	merged := []uint32{}
	for _, o := range slices.Sorted(maps.Keys(owners)) {
		merged = append(merged, owners[o]...)
	}
	return merged
}

// resetACLs forgets the lists at a new incarnation: their ACL indexes
// belong to the old one, and the owners set them again when they resync.
// The caller holds d.mu.
func (d *driver) resetACLs() {
	clear(d.acls)
	clear(d.aclsSent)
}
