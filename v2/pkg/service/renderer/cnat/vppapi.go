package cnat

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"go.fd.io/govpp/api"
	"go.fd.io/govpp/binapi/cnat"
	"go.fd.io/govpp/binapi/interface_types"
	"go.fd.io/govpp/binapi/ip"
	"go.fd.io/govpp/binapi/ip_types"
	"go.fd.io/govpp/binapi/memclnt"

	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp"
	"github.com/vcoil/vcoil/v2/pkg/dataplane/vpp/vppapi"
	"github.com/vcoil/vcoil/v2/pkg/formatversion"
	"github.com/vcoil/vcoil/v2/pkg/service/renderer/vppranges"
)

// noInterface is the sw_if_index of an endpoint given by its address.
const noInterface = interface_types.InterfaceIndex(^uint32(0))

// affinityHash is the flow hash of ClientIP-affinity translations: the
// client's address only, so that every connection of a client lands in the
// same Maglev bucket.
const affinityHash = ip.IP_API_V2_FLOW_HASH_SRC_IP

// The marker. cnat translations have no tag, so the renderer keeps one
// translation of its own that says "vcoil's cnat translations, format N":
// TCP to markerAddr, port formatversion.CnatTranslations, one path to the
// drop sink. The address is in vcoil's link-local range of sinks: no pod,
// node or Service uses it, and traffic to it is dropped either way. It is
// made at the first full sync of a VPP and dies with VPP, as the
// translations it describes.
var markerAddr = netip.MustParseAddr("169.254.101.254")

func markerKey() key { return key{markerAddr, protoTCP, formatversion.CnatTranslations} }

func markerTranslation() *translation {
	return &translation{Kind: kindMarker, Paths: []path{{Dst: netip.AddrPortFrom(vpp.DropSinkIPv4, formatversion.CnatTranslations)}}}
}

func endpoint(a netip.Addr, port uint16) cnat.CnatEndpoint {
	e := cnat.CnatEndpoint{SwIfIndex: noInterface, Port: port, IfAf: ip_types.ADDRESS_IP4}
	if a.IsValid() {
		e.Addr = ip_types.NewAddress(a.AsSlice())
		e.IfAf = e.Addr.Af
	}
	return e
}

func endpointAddr(e cnat.CnatEndpoint) netip.Addr {
	a, ok := netip.AddrFromSlice(e.Addr.ToIP())
	if !ok || a.IsUnspecified() {
		return netip.Addr{}
	}
	return a
}

func ipProto(p uint8) ip_types.IPProto { return ip_types.IPProto(p) }

// update is the request that makes VPP hold t at k (creating it, or
// replacing its paths).
func update(k key, t *translation) *cnat.CnatTranslationUpdate {
	tr := cnat.CnatTranslation{Vip: endpoint(k.Addr, k.Port), IPProto: ipProto(k.Proto), LbType: cnat.CNAT_LB_TYPE_DEFAULT}
	if t.RealIP {
		tr.IsRealIP = 1
	}
	if t.snat() {
		tr.Flags = uint8(cnat.CNAT_TRANSLATION_ALLOC_PORT)
	}
	if t.Maglev {
		tr.LbType, tr.FlowHashConfig = cnat.CNAT_LB_TYPE_MAGLEV, affinityHash
	}
	tr.Paths = make([]cnat.CnatEndpointTuple, len(t.Paths))
	for i, p := range t.Paths {
		tr.Paths[i] = cnat.CnatEndpointTuple{DstEp: endpoint(p.Dst.Addr(), p.Dst.Port()), SrcEp: endpoint(p.Src, 0)}
		if !p.Src.IsValid() {
			// The source endpoint's family follows the path's: VPP
			// resolves an all-zero one of the wrong family otherwise.
			tr.Paths[i].SrcEp.IfAf = tr.Paths[i].DstEp.IfAf
		}
	}
	tr.NPaths = uint32(len(tr.Paths))
	return &cnat.CnatTranslationUpdate{Translation: tr}
}

// dump reads the translations VPP holds: the renderer's, keyed by
// frontend, and the keys of those under foreign VIPs, which it leaves
// alone. The marker's port is the format of the translations (0: no
// marker: a VPP that no cnat renderer has synced); a newer one fails the
// dump before anything changes.
func dump(ch api.Channel, foreign func(netip.Addr) bool) (ours map[key]*translation, others map[key]bool, err error) {
	ours, others = map[key]*translation{}, map[key]bool{}
	var newer error
	err = vppapi.Dump(ch, &cnat.CnatTranslationDump{}, func() *cnat.CnatTranslationDetails { return &cnat.CnatTranslationDetails{} },
		func(d *cnat.CnatTranslationDetails) {
			tr := &d.Translation
			k := key{endpointAddr(tr.Vip), uint8(tr.IPProto), tr.Vip.Port}
			if foreign(k.Addr) {
				others[k] = true
				return
			}
			t := &translation{Kind: kindBackends, Maglev: tr.LbType == cnat.CNAT_LB_TYPE_MAGLEV, ID: tr.ID}
			for _, p := range tr.Paths {
				t.Paths = append(t.Paths, path{Dst: netip.AddrPortFrom(endpointAddr(p.DstEp), p.DstEp.Port), Src: endpointAddr(p.SrcEp)})
			}
			slices.SortFunc(t.Paths, comparePaths)
			if len(t.Paths) == 1 {
				switch t.Paths[0].Dst.Addr() {
				case vpp.RejectSinkIPv4:
					t.Kind = kindReject
				case vpp.DropSinkIPv4:
					t.Kind = kindDrop
				}
			}
			if k.Addr == markerAddr && k.Proto == protoTCP {
				t.Kind = kindMarker
				if err := formatversion.Check(fmt.Sprintf("VPP cnat translation marker %s", k), int(k.Port), formatversion.CnatTranslations); err != nil {
					newer = err
				}
			}
			ours[k] = t
		})
	if err == nil {
		err = newer
	}
	return ours, others, err
}

// op is one request of a sync.
type op struct {
	k     key
	req   api.Message
	reply api.Message
	del   bool
	t     *translation // for update: what VPP then holds
	// desc says what a request that is not about a translation does.
	desc string
}

func (o op) what() string {
	if o.desc != "" {
		return o.desc
	}
	if o.del {
		return "delete the cnat translation of " + o.k.String()
	}
	if o.t != nil && o.t.Service != (serviceID{}) {
		return fmt.Sprintf("translate %s for service %s", o.k, o.t.Service)
	}
	return "translate " + o.k.String()
}

// change appends to ops what turns held (nil: none) into want (nil: none)
// at k. cnat replaces a translation's paths in place; its LB type only
// when it is made, so a change of affinity is a delete and an add.
func change(ops []op, k key, held, want *translation) []op {
	switch {
	case held.same(want):
		return ops
	case want == nil || (held != nil && held.Maglev != want.Maglev):
		ops = append(ops, op{k: k, req: &cnat.CnatTranslationDel{ID: held.ID}, reply: &cnat.CnatTranslationDelReply{}, del: true})
		if want == nil {
			return ops
		}
	}
	return append(ops, op{k: k, req: update(k, want), reply: &cnat.CnatTranslationUpdateReply{}, t: want})
}

// send runs ops on ch, pipelined, and records the IDs VPP gives new
// translations. It names the first failure with the number of others.
func send(ch api.Channel, ops []op, maxInFlight int) error {
	err := vppapi.Pipeline(ch, len(ops), maxInFlight, func(i int) vppapi.PipelineOp {
		return vppapi.PipelineOp{Req: ops[i].req, Reply: ops[i].reply, Del: ops[i].del}
	}, func(i int) {
		if r, ok := ops[i].reply.(*cnat.CnatTranslationUpdateReply); ok {
			ops[i].t.ID = r.ID
		}
	})
	var pe *vppapi.PipelineError
	if !errors.As(err, &pe) {
		return err
	}
	if pe.Failed > 1 {
		return fmt.Errorf("%s: %w (and %d more of %d requests failed)", ops[pe.Index].what(), pe.Err.Err, pe.Failed-1, len(ops))
	}
	return fmt.Errorf("%s: %w", ops[pe.Index].what(), pe.Err.Err)
}

// Messages are the requests the renderer sends, with their replies and
// the details of its dumps; it checks once per VPP incarnation that VPP
// knows them all (they need the cnat and acl plugins).
func Messages() []api.Message {
	return append([]api.Message{
		&memclnt.ControlPing{}, &memclnt.ControlPingReply{},
		&cnat.CnatTranslationDump{}, &cnat.CnatTranslationDetails{},
		&cnat.CnatTranslationUpdate{}, &cnat.CnatTranslationUpdateReply{},
		&cnat.CnatTranslationDel{}, &cnat.CnatTranslationDelReply{},
	}, vppranges.Messages()...)
}

func checkMessages(ch api.Channel) error {
	return vppapi.CheckMessages(ch, "the cnat service renderer", "are the cnat and acl plugins loaded?", Messages())
}
