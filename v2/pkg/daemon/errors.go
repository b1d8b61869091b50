package daemon

import (
	"errors"
	"fmt"

	"github.com/vcoil/vcoil/v2/pkg/cnicontract"
	"github.com/vcoil/vcoil/v2/pkg/cnirpc"
)

// cniError is the gRPC error carrying a CNI error (code, msg, details),
// which the vcoil binary prints unchanged.
func cniError(code cnirpc.ErrorCode, details string, format string, args ...any) error {
	return cnicontract.NewError(code, fmt.Sprintf(format, args...), details)
}

// errorCode is the CNI code an error carries, for metrics.
func errorCode(err error) cnirpc.ErrorCode {
	return cnirpc.ErrorCode(cnicontract.FromRPCError(err, cnirpc.ErrorCode_INTERNAL).Code)
}

// errPolicies marks an ADD that failed because the pod's network policies
// could not be applied: the pod is undone and the kubelet retries.
var errPolicies = errors.New("apply network policies")

// errEgress marks an ADD that failed because the tunnels of the Egresses the
// pod names could not be set up in its netns: started anyway, the pod's
// traffic to the Egresses' destinations would leave un-NATed.
var errEgress = errors.New("set up egress")
