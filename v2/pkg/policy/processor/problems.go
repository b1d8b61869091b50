package processor

import (
	networkingv1 "k8s.io/api/networking/v1"
)

// Problems returns the parts of np that the processor leaves out, each
// naming its field: they permit nothing, so the policy is enforced stricter
// than written. It is nil when the processor takes the policy whole.
// vcoild reports them as Events on the NetworkPolicy.
func Problems(np *networkingv1.NetworkPolicy) []error {
	return parsePolicy(np).problems
}
