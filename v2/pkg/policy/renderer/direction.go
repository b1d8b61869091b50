package renderer

// Direction is a direction of traffic from the pod's point of view, as in a
// NetworkPolicy's policyTypes. It names a pod's two rule lists
// (PodRules.Ingress and PodRules.Egress), the policies they come from, and
// the direction a renderer cache attaches its local tables to.
type Direction uint8

const (
	// Ingress is traffic into the pod, from its peers; its rules come from
	// the pod's ingress policies. They name the peer as source, and their
	// destination network is "any" (the pod itself).
	Ingress Direction = iota
	// Egress is traffic out of the pod, to its peers; its rules come from
	// the pod's egress policies. They name the peer as destination, and
	// their source network is "any" (the pod itself).
	Egress
)

func (d Direction) String() string {
	if d == Egress {
		return "egress"
	}
	return "ingress"
}

// VSwitchDirection is a direction from the point of view of the node's end
// of a pod's interface, where dataplanes attach their filters: the vswitch
// receives the pod's packets there and sends the pod's packets from there.
// VPP applies ACLs to the packets an interface receives (input, "ingress"
// ACLs) or sends (output, "egress" ACLs); nftables matches the pod's
// host-side interface as input (iifname) or output (oifname) interface.
//
// It is the dataplanes' vocabulary, the reverse of the pod's, and it is not
// used by the policy core: renderers get it from OnVSwitch and never swap
// direction words themselves.
type VSwitchDirection uint8

const (
	// VSwitchIngress is packets the vswitch receives from the pod: traffic
	// out of the pod (its Egress).
	VSwitchIngress VSwitchDirection = iota
	// VSwitchEgress is packets the vswitch sends to the pod: traffic into
	// the pod (its Ingress).
	VSwitchEgress
)

func (d VSwitchDirection) String() string {
	if d == VSwitchEgress {
		return "vswitch egress"
	}
	return "vswitch ingress"
}

// OnVSwitch returns the direction, on the vswitch's end of a pod's
// interface, in which traffic of the pod's direction d crosses that
// interface: a pod's Ingress is the vswitch's egress (the vswitch sends the
// packets to the pod) and its Egress the vswitch's ingress.
//
// It is the one place where the pod's vocabulary turns into the dataplane's.
// A VPP ACL renderer, whose tables are attached to the pods' Ingress (see
// package renderer/acl/tables), installs local tables as the ACLs of
// OnVSwitch(Ingress) == VSwitchEgress, the output ACLs of pod interfaces.
func OnVSwitch(d Direction) VSwitchDirection {
	if d == Egress {
		return VSwitchIngress
	}
	return VSwitchEgress
}
