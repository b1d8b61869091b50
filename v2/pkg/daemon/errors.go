package daemon

import (
	"fmt"

	"github.com/vcoil/vcoil/v2/pkg/cni"
	"github.com/vcoil/vcoil/v2/pkg/cnirpc"
)

// cniError is the gRPC error carrying a CNI error (code, msg, details),
// which the vcoil binary prints unchanged.
func cniError(code cnirpc.ErrorCode, details string, format string, args ...any) error {
	return cni.NewError(code, fmt.Sprintf(format, args...), details)
}

// errorCode is the CNI code an error carries, for metrics.
func errorCode(err error) cnirpc.ErrorCode {
	return cnirpc.ErrorCode(cni.FromRPCError(err, cnirpc.ErrorCode_INTERNAL).Code)
}
