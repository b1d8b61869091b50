package cnat

import (
	"fmt"
	"net/netip"

	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/nat44_ed"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
)

// The switch from NAT44-ED. The NAT44 renderer (--vpp-service-renderer
// nat44) serves Services as NAT44-ED static mappings tagged "vcoil-svc"
// (or "vcoil-svc#" when the name did not fit), in any format version. A
// node switched to the cnat renderer keeps its VPP, and with it those
// mappings; both
// plugins would translate the same VIPs. The renderer deletes them at its
// first full sync of each VPP incarnation, after its translations are in
// VPP, so that a new connection always finds one of the two:
//
//   - a pod's connection to a cluster IP: cnat translates it at the pod's
//     input, or NAT44-ED at the same place; either picks a backend and
//     keeps its own session for the replies.
//   - deleting a mapping deletes its NAT44-ED sessions. The next packet of
//     a connection that NAT44-ED translated then meets cnat, which picks a
//     backend by its own hash: where that is the backend NAT44-ED had
//     picked and the client's address was kept (a cluster IP from a pod
//     or node), the connection lives on; otherwise it is cut (cnat has no
//     API to create sessions). docs/vpp-services.md has the measured
//     share.
//
// hostPorts' mappings ("vcoil-hp") and anything not tagged by vcoil are
// left alone.

// nat44ServiceTag reports whether tag is one of the NAT44 renderer's.
func nat44ServiceTag(tag string) bool {
	kind, _, _, ok := formatversion.ParseTag(tag)
	return ok && (kind == "vcoil-svc" || kind == "vcoil-svc#")
}

// nat44Messages are the requests of retireNAT44; a VPP without the NAT
// plugin has nothing to retire.
func nat44Messages() []api.Message {
	return []api.Message{
		&nat44_ed.Nat44LbStaticMappingDump{}, &nat44_ed.Nat44LbStaticMappingDetails{},
		&nat44_ed.Nat44StaticMappingDump{}, &nat44_ed.Nat44StaticMappingDetails{},
		&nat44_ed.Nat44AddDelLbStaticMapping{}, &nat44_ed.Nat44AddDelLbStaticMappingReply{},
		&nat44_ed.Nat44AddDelStaticMappingV2{}, &nat44_ed.Nat44AddDelStaticMappingV2Reply{},
	}
}

// retireNAT44 deletes the NAT44 renderer's mappings VPP holds and returns
// how many it deleted.
func retireNAT44(ch api.Channel, maxInFlight int) (int, error) {
	if ch.CheckCompatiblity(nat44Messages()...) != nil {
		return 0, nil
	}
	var ops []op
	err := vppapi.Dump(ch, &nat44_ed.Nat44LbStaticMappingDump{}, func() *nat44_ed.Nat44LbStaticMappingDetails {
		return &nat44_ed.Nat44LbStaticMappingDetails{}
	}, func(d *nat44_ed.Nat44LbStaticMappingDetails) {
		if !nat44ServiceTag(d.Tag) {
			return
		}
		k := key{netip.AddrFrom4(d.ExternalAddr), d.Protocol, d.ExternalPort}
		// VPP checks the flags a mapping was added with.
		ops = append(ops, op{req: &nat44_ed.Nat44AddDelLbStaticMapping{
			Flags: d.Flags, ExternalAddr: d.ExternalAddr, ExternalPort: d.ExternalPort, Protocol: d.Protocol,
		}, reply: &nat44_ed.Nat44AddDelLbStaticMappingReply{}, del: true, desc: "delete the NAT44 load-balancing static mapping of " + k.String()})
	})
	if err != nil {
		return 0, fmt.Errorf("dump NAT44 load-balancing static mappings: %w", err)
	}
	err = vppapi.Dump(ch, &nat44_ed.Nat44StaticMappingDump{}, func() *nat44_ed.Nat44StaticMappingDetails {
		return &nat44_ed.Nat44StaticMappingDetails{}
	}, func(d *nat44_ed.Nat44StaticMappingDetails) {
		if !nat44ServiceTag(d.Tag) {
			return
		}
		k := key{netip.AddrFrom4(d.ExternalIPAddress), d.Protocol, d.ExternalPort}
		ops = append(ops, op{req: &nat44_ed.Nat44AddDelStaticMappingV2{
			Flags: d.Flags, LocalIPAddress: d.LocalIPAddress, LocalPort: d.LocalPort,
			ExternalIPAddress: d.ExternalIPAddress, ExternalPort: d.ExternalPort, Protocol: d.Protocol,
			ExternalSwIfIndex: noInterface, VrfID: d.VrfID,
		}, reply: &nat44_ed.Nat44AddDelStaticMappingV2Reply{}, del: true, desc: "delete the NAT44 static mapping of " + k.String()})
	})
	if err != nil {
		return 0, fmt.Errorf("dump NAT44 static mappings: %w", err)
	}
	if len(ops) == 0 {
		return 0, nil
	}
	if err := send(ch, ops, maxInFlight); err != nil {
		return 0, fmt.Errorf("delete the NAT44 renderer's mappings: %w", err)
	}
	return len(ops), nil
}
