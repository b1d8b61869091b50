package vpp

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/acl"
	"go.fd.io/govpp/binapi/nat44_ed"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// formatMessages are the dumps NewerObjects sends: the tags of every kind
// of VPP object vcoild tags (the dataplane's interfaces and hostPort
// mappings, the ACLs of the policies and of the services, the services'
// mappings).
func formatMessages() []api.Message {
	return []api.Message{
		&acl.ACLDump{}, &acl.ACLDetails{},
		&nat44_ed.Nat44StaticMappingDump{}, &nat44_ed.Nat44StaticMappingDetails{},
		&nat44_ed.Nat44LbStaticMappingDump{}, &nat44_ed.Nat44LbStaticMappingDetails{},
	}
}

// NewerObjects reads the tags of the VPP at socket, changing nothing, for
// vcoild's check before any of its parts starts (package formatgate): its
// error matches formatversion.ErrNewer, naming each object, when VPP holds
// objects of a newer format than this vcoild's. Any other error means VPP
// could not be read (not running yet, a missing plugin): the parts meet
// the objects later and each refuses a newer one. It does not wait for
// VPP: a missing socket fails at once, a dead one within GoVPP's connect
// timeout.
func NewerObjects(ctx context.Context, socket string, replyTimeout time.Duration) error {
	if socket == "" {
		socket = DefaultAPISocket
	}
	if replyTimeout == 0 {
		replyTimeout = DefaultRequestTimeout
	}
	if _, err := os.Stat(socket); err != nil {
		return fmt.Errorf("VPP's API socket: %w", err)
	}
	return newerObjects(ctx, socketDialer(socket, replyTimeout))
}

func newerObjects(ctx context.Context, dial dialer) error {
	conn, err := dial(ctx)
	if err != nil {
		return err
	}
	defer conn.close()
	var newer, other []error
	check := func(what, tag string) {
		if err := formatversion.CheckTag(what, tag); err != nil {
			newer = append(newer, err)
		}
	}
	read := func(what string, err error) {
		if err != nil {
			other = append(other, fmt.Errorf("list VPP's %s: %w", what, err))
		}
	}
	ifs, err := interfaceDump(conn.ch, ^uint32(0))
	read("interfaces", err)
	for _, i := range ifs {
		check(fmt.Sprintf("VPP interface %d (%s)", i.swIfIndex, i.name), i.tag)
	}
	read("ACLs", vppapi.Dump(conn.ch, &acl.ACLDump{ACLIndex: ^uint32(0)},
		func() *acl.ACLDetails { return &acl.ACLDetails{} },
		func(m *acl.ACLDetails) { check(fmt.Sprintf("VPP ACL %d", m.ACLIndex), m.Tag) }))
	read("static mappings", vppapi.Dump(conn.ch, &nat44_ed.Nat44StaticMappingDump{},
		func() *nat44_ed.Nat44StaticMappingDetails { return &nat44_ed.Nat44StaticMappingDetails{} },
		func(m *nat44_ed.Nat44StaticMappingDetails) {
			check(fmt.Sprintf("VPP static mapping %s:%d/%d", netip.AddrFrom4(m.ExternalIPAddress), m.ExternalPort, m.Protocol), m.Tag)
		}))
	read("load-balancing static mappings", vppapi.Dump(conn.ch, &nat44_ed.Nat44LbStaticMappingDump{},
		func() *nat44_ed.Nat44LbStaticMappingDetails { return &nat44_ed.Nat44LbStaticMappingDetails{} },
		func(m *nat44_ed.Nat44LbStaticMappingDetails) {
			check(fmt.Sprintf("VPP load-balancing static mapping %s:%d/%d", netip.AddrFrom4(m.ExternalAddr), m.ExternalPort, m.Protocol), m.Tag)
		}))
	if len(newer) > 0 {
		return errors.Join(newer...)
	}
	return errors.Join(other...)
}
