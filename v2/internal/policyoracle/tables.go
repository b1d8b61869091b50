package policyoracle

import (
	"net/netip"

	"github.com/vcoil/vcoil/v2/pkg/policy/renderer"
)

// Tables evaluates connections the way a network stack applies the renderer
// cache's output on one node (docs/background.md#the-renderer-cache):
//
// When the local tables are attached to the pods' Ingress, a pod's local
// table filters the traffic into the pod and the global table the traffic
// leaving the node through its uplinks. The first packet of a connection to
// a local pod meets the destination's local table; one from a local pod to
// anywhere else meets the global table. The source's interface holds a
// reflective rule that lets every packet out of the pod and the
// connection's replies back in, so restrictions come only from the
// destination's local table or the global table, and replies of an admitted
// connection pass.
//
// Attached to the pods' Egress, it is the mirror: a connection from a local
// pod meets the source's local table (traffic out of the pod); one from
// anywhere else to a local pod meets the global table on traffic entering
// the node.
//
// Tables are applied in order with first-match semantics.
type Tables struct {
	// Direction is the direction of the pods that the local tables are
	// attached to (the renderer cache's Direction).
	Direction renderer.Direction
	// Local maps the address of each local pod to its local table; a local
	// pod without a table has a nil entry.
	Local map[netip.Addr][]renderer.Rule
	// Global is the global table; empty when there is none.
	Global []renderer.Rule
}

// Allowed returns the verdict on the first packet of c, and whether the
// node sees that packet at all (one end is a local pod).
func (t *Tables) Allowed(c Connection) (allowed, decided bool) {
	_, srcLocal := t.Local[c.Src]
	_, dstLocal := t.Local[c.Dst]
	if t.Direction == renderer.Ingress {
		switch {
		case dstLocal:
			return firstMatch(t.Local[c.Dst], c), true
		case srcLocal:
			return firstMatch(t.Global, c), true
		}
		return false, false
	}
	switch {
	case srcLocal:
		return firstMatch(t.Local[c.Src], c), true
	case dstLocal:
		return firstMatch(t.Global, c), true
	}
	return false, false
}

// firstMatch applies a table; a packet that no rule matches passes (only an
// empty table lets that happen: tables end with a rule matching all).
func firstMatch(rules []renderer.Rule, c Connection) bool {
	for i := range rules {
		if ruleMatches(&rules[i], c) {
			return rules[i].Action == renderer.ActionPermit
		}
	}
	return true
}

func ruleMatches(r *renderer.Rule, c Connection) bool {
	if r.SrcNetwork.IsValid() && !r.SrcNetwork.Contains(c.Src) {
		return false
	}
	if r.DstNetwork.IsValid() && !r.DstNetwork.Contains(c.Dst) {
		return false
	}
	switch r.Protocol {
	case renderer.ProtocolAny:
		return true
	case renderer.ProtocolTCP:
		if c.Protocol != TCP {
			return false
		}
	case renderer.ProtocolUDP:
		if c.Protocol != UDP {
			return false
		}
	case renderer.ProtocolSCTP:
		if c.Protocol != SCTP {
			return false
		}
	default:
		return false
	}
	return r.SrcPort.First <= c.SrcPort && c.SrcPort <= r.SrcPort.Last &&
		r.DstPort.First <= c.DstPort && c.DstPort <= r.DstPort.Last
}
