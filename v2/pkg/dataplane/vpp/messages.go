package vpp

import (
	"errors"
	"fmt"

	"github.com/vcoil/vcoil/v2/pkg/dataplane"
	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/acl"
	"go.fd.io/govpp/binapi/af_packet"
	"go.fd.io/govpp/binapi/classify"
	"go.fd.io/govpp/binapi/fib"
	interfaces "go.fd.io/govpp/binapi/interface"
	"go.fd.io/govpp/binapi/ip"
	"go.fd.io/govpp/binapi/ip_neighbor"
	"go.fd.io/govpp/binapi/memclnt"
	"go.fd.io/govpp/binapi/nat44_ed"
	"go.fd.io/govpp/binapi/pipe"
	"go.fd.io/govpp/binapi/tapv2"
	"go.fd.io/govpp/binapi/urpf"
	"go.fd.io/govpp/binapi/vlib"
)

// VPPVersion is the VPP release whose binary API GoVPP's binapi (and so
// vcoil) is generated for.
const VPPVersion = "25.10"

// ErrIncompatible is returned (wrapped, naming the messages) when the VPP at
// the socket does not know every message the driver sends: another release
// than VPPVersion, or a plugin (nat, af_packet, acl, urpf) missing.
var ErrIncompatible = errors.New("VPP is incompatible with vcoil")

// ErrNotReady is returned (wrapped) by SetupPod, CheckPod, TeardownPod and
// ListPods when VPP is not connected and synced within Config.ReadyWait:
// the caller should try again later; nothing was changed.
var ErrNotReady = fmt.Errorf("VPP is not connected and synced yet: %w", dataplane.ErrNotReady)

// messages are the requests the driver sends with their replies (and the
// details of dumps). The connection check asks VPP for all of them, and
// docs/vpp.md lists them; the tests check that the driver sends nothing
// else.
func messages() []api.Message {
	return append([]api.Message{
		&memclnt.ControlPing{}, &memclnt.ControlPingReply{},

		&interfaces.SwInterfaceDump{}, &interfaces.SwInterfaceDetails{},
		&interfaces.CreateLoopback{}, &interfaces.CreateLoopbackReply{},
		&interfaces.SwInterfaceTagAddDel{}, &interfaces.SwInterfaceTagAddDelReply{},
		&interfaces.SwInterfaceSetFlags{}, &interfaces.SwInterfaceSetFlagsReply{},
		&interfaces.SwInterfaceSetUnnumbered{}, &interfaces.SwInterfaceSetUnnumberedReply{},
		&interfaces.SwInterfaceAddDelAddress{}, &interfaces.SwInterfaceAddDelAddressReply{},

		&ip.SwInterfaceIP6EnableDisable{}, &ip.SwInterfaceIP6EnableDisableReply{},
		&ip.SwInterfaceIP6SetLinkLocalAddress{}, &ip.SwInterfaceIP6SetLinkLocalAddressReply{},
		&ip.IPAddressDump{}, &ip.IPAddressDetails{},
		&ip.IPRouteAddDel{}, &ip.IPRouteAddDelReply{},
		&ip.IPRouteV2Dump{}, &ip.IPRouteV2Details{},
		&fib.FibSourceDump{}, &fib.FibSourceDetails{},

		&ip_neighbor.IPNeighborAddDel{}, &ip_neighbor.IPNeighborAddDelReply{},

		&tapv2.TapCreateV3{}, &tapv2.TapCreateV3Reply{},
		&tapv2.TapDeleteV2{}, &tapv2.TapDeleteV2Reply{},
		&tapv2.SwInterfaceTapV2Dump{}, &tapv2.SwInterfaceTapV2Details{},

		&af_packet.AfPacketCreateV3{}, &af_packet.AfPacketCreateV3Reply{},
		&af_packet.AfPacketDelete{}, &af_packet.AfPacketDeleteReply{},

		&nat44_ed.Nat44EdPluginEnableDisable{}, &nat44_ed.Nat44EdPluginEnableDisableReply{},
		&nat44_ed.Nat44InterfaceAddDelFeature{}, &nat44_ed.Nat44InterfaceAddDelFeatureReply{},
		&nat44_ed.Nat44InterfaceDump{}, &nat44_ed.Nat44InterfaceDetails{},

		&acl.ACLInterfaceSetACLList{}, &acl.ACLInterfaceSetACLListReply{},
		&acl.ACLInterfaceAddDel{}, &acl.ACLInterfaceAddDelReply{},
		// The pod guard (guard.go).
		&acl.ACLAddReplace{}, &acl.ACLAddReplaceReply{},
		&acl.ACLDel{}, &acl.ACLDelReply{},
		&acl.ACLDump{}, &acl.ACLDetails{},
		&acl.ACLInterfaceListDump{}, &acl.ACLInterfaceListDetails{},
		&acl.ACLStatsIntfCountersEnable{}, &acl.ACLStatsIntfCountersEnableReply{},

		// HostPorts (hostport.go); also ip_address_dump and
		// nat44_forwarding_enable_disable.
		&nat44_ed.Nat44AddDelStaticMappingV2{}, &nat44_ed.Nat44AddDelStaticMappingV2Reply{},
		&nat44_ed.Nat44StaticMappingDump{}, &nat44_ed.Nat44StaticMappingDetails{},

		// SNAT (snat.go).
		&pipe.PipeCreate{}, &pipe.PipeCreateReply{},
		&pipe.PipeDelete{}, &pipe.PipeDeleteReply{},
		&pipe.PipeDump{}, &pipe.PipeDetails{},
		&ip.IPTableAddDel{}, &ip.IPTableAddDelReply{},
		&interfaces.SwInterfaceSetTable{}, &interfaces.SwInterfaceSetTableReply{},
		&nat44_ed.Nat44ForwardingEnableDisable{}, &nat44_ed.Nat44ForwardingEnableDisableReply{},
		&nat44_ed.Nat44AddDelAddressRange{}, &nat44_ed.Nat44AddDelAddressRangeReply{},
		&nat44_ed.Nat44AddDelInterfaceAddr{}, &nat44_ed.Nat44AddDelInterfaceAddrReply{},
		&nat44_ed.Nat44EdAddDelOutputInterface{}, &nat44_ed.Nat44EdAddDelOutputInterfaceReply{},
		&classify.ClassifyTableByInterface{}, &classify.ClassifyTableByInterfaceReply{},
		&classify.ClassifyAddDelTable{}, &classify.ClassifyAddDelTableReply{},
		&classify.InputACLSetInterface{}, &classify.InputACLSetInterfaceReply{},
		&classify.ClassifySessionDump{}, &classify.ClassifySessionDetails{},
		&classify.ClassifyAddDelSession{}, &classify.ClassifyAddDelSessionReply{},

		// Source validation (source.go, sourcemetrics.go); also
		// ip_table_add_del and ip_route_add_del/dump in the source tables.
		&ip.IPTableDump{}, &ip.IPTableDetails{},
		&vlib.CliInband{}, &vlib.CliInbandReply{},
	}, urpfMessages()...)
}

// urpfMessages are the messages of VPP's uRPF plugin (urpf_plugin.so).
func urpfMessages() []api.Message {
	return []api.Message{
		&urpf.UrpfUpdateV2{}, &urpf.UrpfUpdateV2Reply{},
		&urpf.UrpfInterfaceDump{}, &urpf.UrpfInterfaceDetails{},
	}
}

// Messages returns the names of the binary-API messages vcoil sends (and
// receives), for documentation and diagnostics.
func Messages() []string {
	var names []string
	for _, m := range messages() {
		names = append(names, m.GetMessageName()+"_"+m.GetCrcString())
	}
	return names
}
