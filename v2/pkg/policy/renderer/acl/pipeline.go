package acl

import (
	"errors"
	"fmt"
	"strings"

	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/acl"
	"go.fd.io/govpp/binapi/memclnt"
	"go.fd.io/govpp/binapi/vlib"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
)

// op is one request of a pipelined batch.
type op struct {
	req, reply api.Message
	what       string
	// del: NO_SUCH_ENTRY means done.
	del bool
	// done runs when the request succeeded.
	done func()
}

// send runs ops on ch, pipelined (vppapi.Pipeline): ACL API handlers run
// with VPP's workers stopped (forwarding stalls while they run), so one
// transaction's requests go back to back instead of one round trip each.
// It names the first failure with the number of other failures.
func send(ch api.Channel, ops []op, maxInFlight int) error {
	err := vppapi.Pipeline(ch, len(ops), maxInFlight, func(i int) vppapi.PipelineOp {
		return vppapi.PipelineOp{Req: ops[i].req, Reply: ops[i].reply, Del: ops[i].del}
	}, func(i int) {
		if ops[i].done != nil {
			ops[i].done()
		}
	})
	var pe *vppapi.PipelineError
	if !errors.As(err, &pe) {
		return err
	}
	if pe.Failed > 1 {
		return fmt.Errorf("%s: %w (and %d more of %d requests failed)", ops[pe.Index].what, pe.Err, pe.Failed-1, len(ops))
	}
	return fmt.Errorf("%s: %w", ops[pe.Index].what, pe.Err)
}

// Messages are the requests the renderer sends on its own channel, with
// their replies and the details of its dump. The renderer checks once per
// VPP incarnation that VPP knows them all (they need the acl plugin).
func Messages() []api.Message {
	return []api.Message{
		&memclnt.ControlPing{}, &memclnt.ControlPingReply{},
		&acl.ACLDump{}, &acl.ACLDetails{},
		&acl.ACLAddReplace{}, &acl.ACLAddReplaceReply{},
		&acl.ACLDel{}, &acl.ACLDelReply{},
		&acl.ACLStatsIntfCountersEnable{}, &acl.ACLStatsIntfCountersEnableReply{},
		&vlib.CliInband{}, &vlib.CliInbandReply{},
	}
}

// checkMessages fails, naming them, when VPP lacks messages the renderer
// sends.
func checkMessages(ch api.Channel) error {
	return vppapi.CheckMessages(ch, "the VPP ACL policy renderer", "is the acl plugin loaded?", Messages())
}

// reclassifyCLI turns on the ACL plugin's session reclassification. The
// plugin has no API message for it (startup.conf's acl-plugin { reclassify
// sessions 1 } is the other way).
const reclassifyCLI = "set acl-plugin reclassify-sessions 1"

// reclassifySessions makes VPP keep an interface's sessions when one side
// of its ACL lists changes, judging them again lazily on the side whose
// lists changed, instead of deleting them all: with the lists the
// dataplane sends (output changes alone as additions and removals), a pod
// that moves to another table keeps its own connections
// (docs/policy.md#vpp-acls).
func reclassifySessions(ch api.Channel) error {
	reply := &vlib.CliInbandReply{}
	if err := vppapi.Call(ch, &vlib.CliInband{Cmd: reclassifyCLI}, reply); err != nil {
		return err
	}
	if out := strings.TrimSpace(reply.Reply); out != "" {
		return fmt.Errorf("%q: %s", reclassifyCLI, out)
	}
	return nil
}
