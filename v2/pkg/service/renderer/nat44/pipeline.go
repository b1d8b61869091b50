package nat44

import (
	"errors"
	"fmt"

	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/acl"
	"go.fd.io/govpp/binapi/memclnt"
	"go.fd.io/govpp/binapi/nat44_ed"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
)

// send runs ops on ch, pipelined (vppapi.Pipeline), and names the first
// failure with the number of other failures.
func send(ch api.Channel, ops []op, maxInFlight int) error {
	err := vppapi.Pipeline(ch, len(ops), maxInFlight, func(i int) vppapi.PipelineOp {
		return vppapi.PipelineOp{Req: ops[i].req, Reply: ops[i].reply, Del: ops[i].del}
	}, nil)
	var pe *vppapi.PipelineError
	if !errors.As(err, &pe) {
		return err
	}
	if pe.Failed > 1 {
		return fmt.Errorf("%s: %w (and %d more of %d requests failed)", ops[pe.Index].what(), pe.Err.Err, pe.Failed-1, len(ops))
	}
	return fmt.Errorf("%s: %w", ops[pe.Index].what(), pe.Err.Err)
}

// Messages are the requests the renderer sends, with their replies and the
// details of its dumps. The renderer checks once per VPP incarnation that
// VPP knows them all: they need the nat (NAT44-ED) and acl plugins.
func Messages() []api.Message {
	return []api.Message{
		&memclnt.ControlPing{}, &memclnt.ControlPingReply{},

		&nat44_ed.Nat44ForwardingEnableDisable{}, &nat44_ed.Nat44ForwardingEnableDisableReply{},
		&nat44_ed.Nat44AddressDump{}, &nat44_ed.Nat44AddressDetails{},
		&nat44_ed.Nat44AddDelAddressRange{}, &nat44_ed.Nat44AddDelAddressRangeReply{},
		&nat44_ed.Nat44LbStaticMappingDump{}, &nat44_ed.Nat44LbStaticMappingDetails{},
		&nat44_ed.Nat44StaticMappingDump{}, &nat44_ed.Nat44StaticMappingDetails{},
		&nat44_ed.Nat44AddDelLbStaticMapping{}, &nat44_ed.Nat44AddDelLbStaticMappingReply{},
		&nat44_ed.Nat44AddDelStaticMappingV2{}, &nat44_ed.Nat44AddDelStaticMappingV2Reply{},
		&nat44_ed.Nat44LbStaticMappingAddDelLocal{}, &nat44_ed.Nat44LbStaticMappingAddDelLocalReply{},

		&acl.ACLDump{}, &acl.ACLDetails{},
		&acl.ACLAddReplace{}, &acl.ACLAddReplaceReply{},
		&acl.ACLDel{}, &acl.ACLDelReply{},
	}
}

// checkMessages fails, naming them, when VPP lacks messages the renderer
// sends.
func checkMessages(ch api.Channel) error {
	return vppapi.CheckMessages(ch, "the NAT44 service renderer", "are the nat and acl plugins loaded?", Messages())
}
