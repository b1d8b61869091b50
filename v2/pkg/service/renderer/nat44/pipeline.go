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

// send runs ops on ch with up to maxInFlight requests sent and not yet
// answered, receiving the replies in the order sent. VPP handles one
// client's requests in order, so an operation that depends on an earlier
// one (an addition after the deletion of the same key) needs no wait.
//
// Every reply is received, even after a failure, so that the channel holds
// no stale replies and the caller knows that nothing is in flight. It
// returns the first failure, naming what failed, with the number of other
// failures.
func send(ch api.Channel, ops []op, maxInFlight int) error {
	inFlight := make([]api.RequestCtx, 0, maxInFlight)
	first, failed := -1, 0
	var firstErr error
	receive := func(i int, rc api.RequestCtx) {
		e := rc.ReceiveReply(ops[i].reply)
		if e != nil && ops[i].del && vppapi.IsRetval(e, api.NO_SUCH_ENTRY) {
			e = nil
		}
		if e != nil {
			failed++
			if first < 0 {
				first, firstErr = i, e
			}
		}
	}
	next := 0 // the oldest op whose reply is awaited
	for i := range ops {
		if len(inFlight) == maxInFlight {
			receive(next, inFlight[0])
			inFlight = inFlight[1:]
			next++
		}
		inFlight = append(inFlight, ch.SendRequest(ops[i].req))
	}
	for _, rc := range inFlight {
		receive(next, rc)
		next++
	}
	if first < 0 {
		return nil
	}
	if failed > 1 {
		return fmt.Errorf("%s: %w (and %d more of %d requests failed)", ops[first].what(), firstErr, failed-1, len(ops))
	}
	return fmt.Errorf("%s: %w", ops[first].what(), firstErr)
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
	err := ch.CheckCompatiblity(Messages()...)
	if err == nil {
		return nil
	}
	var ce *api.CompatibilityError
	if errors.As(err, &ce) {
		return fmt.Errorf("VPP does not know %d of the %d messages the NAT44 service renderer sends (are the nat and acl plugins loaded?): %v",
			len(ce.IncompatibleMessages), len(Messages()), ce.IncompatibleMessages)
	}
	return fmt.Errorf("check the messages the NAT44 service renderer sends: %w", err)
}
