package cnicontract

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vcoil/vcoil/v2/pkg/cnirpc"
)

// This file is the one place where CNI errors and gRPC statuses meet.
// vcoild answers a failed call with NewError (or ToRPCError); the binary
// turns whatever the call returned back into a CNI error with FromRPCError.

// NewError returns the gRPC error that vcoild answers a failed call with:
// a status whose detail is a cnirpc.CNIError{code, msg, details}, which the
// binary prints unchanged as the CNI error. The status's own gRPC code is
// derived from the CNI code (see rpcCode) for logs and metrics only; the
// binary decides on the detail. Text that is not UTF-8 is repaired, because
// protobuf would refuse it and the error would be lost.
func NewError(code cnirpc.ErrorCode, msg, details string) error {
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	details = strings.ToValidUTF8(details, "\uFFFD")
	st, err := status.New(rpcCode(code), msg).WithDetails(&cnirpc.CNIError{Code: code, Msg: msg, Details: details})
	if err != nil {
		// Unreachable with valid UTF-8 and a non-OK code; keep the message.
		return status.Error(codes.Internal, msg)
	}
	return st.Err()
}

// ToRPCError converts an error of vcoild's into what its gRPC handler
// returns: nil stays nil, a gRPC status error is returned as it is, a
// *types.Error anywhere in the chain (ParseConf's and ParseArgs' errors, for
// example) keeps its code, message and details, and any other error becomes
// code 100 (INTERNAL) with the error's text as message.
func ToRPCError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && !wrapsCNIError(err) {
		return err
	}
	var ce *types.Error
	if errors.As(err, &ce) {
		code := cnirpc.ErrorCode_INTERNAL
		if ce.Code <= math.MaxInt32 {
			code = cnirpc.ErrorCode(ce.Code)
		}
		return NewError(code, ce.Msg, ce.Details)
	}
	return NewError(cnirpc.ErrorCode_INTERNAL, err.Error(), "")
}

func wrapsCNIError(err error) bool {
	var ce *types.Error
	return errors.As(err, &ce)
}

// FromRPCError converts what a call to vcoild returned into the CNI error
// the binary prints. nil stays nil. Otherwise, in this order:
//   - a *types.Error in the chain is returned as it is;
//   - a status with a cnirpc.CNIError detail becomes that detail's code,
//     msg and details, whatever the status's gRPC code;
//   - Unavailable (no socket, nothing listening, vcoild stopping) and
//     DeadlineExceeded (vcoild did not answer within the call's timeout)
//     become the code `unreachable`: the binary passes TRY_AGAIN_LATER (11)
//     for ADD, DEL, CHECK and GC and PLUGIN_NOT_AVAILABLE (50) for STATUS;
//   - any other status becomes code 100 (INTERNAL) with the status's
//     message, and its gRPC code in the details.
//
// It never panics.
func FromRPCError(err error, unreachable cnirpc.ErrorCode) *types.Error {
	if err == nil {
		return nil
	}
	var ce *types.Error
	if errors.As(err, &ce) {
		return ce
	}
	st := rpcStatus(err)
	if d, ok := cniDetail(st); ok {
		code := d.GetCode()
		if code < 0 {
			// Not a CNI code; uint would turn it into a huge one.
			code = cnirpc.ErrorCode_INTERNAL
		}
		return types.NewError(uint(code), d.GetMsg(), d.GetDetails())
	}
	switch st.Code() {
	case codes.Unavailable:
		return types.NewError(uint(unreachable), "vcoild is unreachable", err.Error())
	case codes.DeadlineExceeded:
		return types.NewError(uint(unreachable), "vcoild did not answer in time", err.Error())
	}
	return types.NewError(uint(cnirpc.ErrorCode_INTERNAL), st.Message(), fmt.Sprintf("gRPC code %s: %v", st.Code(), err))
}

// IsUnknownContainer says whether vcoild answered that it does not know the
// container: a CNIError detail with UNKNOWN_CONTAINER, or a NotFound status
// without any CNIError detail. DEL treats that as done.
func IsUnknownContainer(err error) bool {
	if err == nil {
		return false
	}
	st := rpcStatus(err)
	if d, ok := cniDetail(st); ok {
		return d.GetCode() == cnirpc.ErrorCode_UNKNOWN_CONTAINER
	}
	return st.Code() == codes.NotFound
}

// rpcStatus finds the gRPC status of err, also when err wraps it or is a
// bare context error.
func rpcStatus(err error) *status.Status {
	if st, ok := status.FromError(err); ok {
		return st
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return status.FromContextError(err)
	}
	return status.New(codes.Unknown, err.Error())
}

func cniDetail(st *status.Status) (*cnirpc.CNIError, bool) {
	for _, d := range st.Details() {
		if ce, ok := d.(*cnirpc.CNIError); ok {
			return ce, true
		}
	}
	return nil, false
}

// rpcCode is the gRPC code that goes with a CNI code, chosen so that a
// reader of vcoild's gRPC logs and metrics sees the right kind of failure.
func rpcCode(code cnirpc.ErrorCode) codes.Code {
	switch code {
	case cnirpc.ErrorCode_INCOMPATIBLE_CNI_VERSION, cnirpc.ErrorCode_UNSUPPORTED_FIELD,
		cnirpc.ErrorCode_INVALID_ENVIRONMENT_VARIABLES, cnirpc.ErrorCode_DECODING_FAILURE,
		cnirpc.ErrorCode_INVALID_NETWORK_CONFIG:
		return codes.InvalidArgument
	case cnirpc.ErrorCode_UNKNOWN_CONTAINER:
		return codes.NotFound
	case cnirpc.ErrorCode_TRY_AGAIN_LATER, cnirpc.ErrorCode_PLUGIN_NOT_AVAILABLE, cnirpc.ErrorCode_LIMITED_CONNECTIVITY:
		return codes.Unavailable
	case cnirpc.ErrorCode_POOL_EXHAUSTED:
		return codes.ResourceExhausted
	case cnirpc.ErrorCode_POOL_NOT_FOUND:
		return codes.FailedPrecondition
	case cnirpc.ErrorCode_IO_FAILURE, cnirpc.ErrorCode_INTERNAL:
		return codes.Internal
	}
	return codes.Unknown
}
