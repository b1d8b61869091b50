package cnicontract

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vcoil/vcoil/v2/pkg/cnirpc"
)

func TestNewErrorComesBackAsTheSameCNIError(t *testing.T) {
	tests := []struct {
		name     string
		code     cnirpc.ErrorCode
		wantGRPC codes.Code
	}{
		{"an invalid configuration is an invalid argument", cnirpc.ErrorCode_INVALID_NETWORK_CONFIG, codes.InvalidArgument},
		{"an unknown container is not found", cnirpc.ErrorCode_UNKNOWN_CONTAINER, codes.NotFound},
		{"try again later is unavailable", cnirpc.ErrorCode_TRY_AGAIN_LATER, codes.Unavailable},
		{"plugin not available is unavailable", cnirpc.ErrorCode_PLUGIN_NOT_AVAILABLE, codes.Unavailable},
		{"an exhausted pool is resource exhausted", cnirpc.ErrorCode_POOL_EXHAUSTED, codes.ResourceExhausted},
		{"a missing pool is a failed precondition", cnirpc.ErrorCode_POOL_NOT_FOUND, codes.FailedPrecondition},
		{"vcoil's internal error is internal", cnirpc.ErrorCode_INTERNAL, codes.Internal},
		{"a code outside the enum is unknown", cnirpc.ErrorCode(120), codes.Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := NewError(tt.code, "the message", "the details")
			if got := status.Code(err); got != tt.wantGRPC {
				t.Errorf("gRPC code %s, want %s", got, tt.wantGRPC)
			}
			// Whatever the caller's unreachable code, the detail decides.
			ce := FromRPCError(err, cnirpc.ErrorCode_TRY_AGAIN_LATER)
			want := types.Error{Code: uint(tt.code), Msg: "the message", Details: "the details"}
			if *ce != want {
				t.Errorf("came back as %+v, want %+v", *ce, want)
			}
		})
	}
}

func TestNewErrorRepairsTextThatIsNotUTF8(t *testing.T) {
	err := NewError(cnirpc.ErrorCode_INTERNAL, "bad \xff", "worse \xfe")
	ce := FromRPCError(err, cnirpc.ErrorCode_TRY_AGAIN_LATER)
	if ce.Code != 100 || ce.Msg != "bad \uFFFD" || ce.Details != "worse \uFFFD" {
		t.Errorf("got %+v", *ce)
	}
}

func TestFromRPCError(t *testing.T) {
	unavailableWithDetail, _ := status.New(codes.Unavailable, "x").WithDetails(&cnirpc.CNIError{Code: cnirpc.ErrorCode_POOL_EXHAUSTED, Msg: "pool default is exhausted"})
	negativeDetail, _ := status.New(codes.Internal, "x").WithDetails(&cnirpc.CNIError{Code: -4, Msg: "odd"})
	tests := []struct {
		name        string
		err         error
		unreachable cnirpc.ErrorCode
		wantCode    uint
		wantMsg     string
	}{
		{"a CNI error is kept as it is", types.NewError(7, "name: missing", ""), cnirpc.ErrorCode_TRY_AGAIN_LATER, 7, "name: missing"},
		{"a wrapped CNI error is kept as it is", fmt.Errorf("add: %w", types.NewError(4, "CNI_ARGS: x", "")), cnirpc.ErrorCode_TRY_AGAIN_LATER, 4, "CNI_ARGS: x"},
		{"Unavailable without a detail is the unreachable code for ADD", status.Error(codes.Unavailable, "connection refused"), cnirpc.ErrorCode_TRY_AGAIN_LATER, 11, "vcoild is unreachable"},
		{"Unavailable without a detail is the unreachable code for STATUS", status.Error(codes.Unavailable, "connection refused"), cnirpc.ErrorCode_PLUGIN_NOT_AVAILABLE, 50, "vcoild is unreachable"},
		{"DeadlineExceeded is the unreachable code", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), cnirpc.ErrorCode_TRY_AGAIN_LATER, 11, "vcoild did not answer in time"},
		{"a bare context deadline is the unreachable code", context.DeadlineExceeded, cnirpc.ErrorCode_PLUGIN_NOT_AVAILABLE, 50, "vcoild did not answer in time"},
		{"a wrapped Unavailable is the unreachable code", fmt.Errorf("call: %w", status.Error(codes.Unavailable, "gone")), cnirpc.ErrorCode_TRY_AGAIN_LATER, 11, "vcoild is unreachable"},
		{"a detail wins over Unavailable", unavailableWithDetail.Err(), cnirpc.ErrorCode_TRY_AGAIN_LATER, 101, "pool default is exhausted"},
		{"a negative detail code becomes INTERNAL", negativeDetail.Err(), cnirpc.ErrorCode_TRY_AGAIN_LATER, 100, "odd"},
		{"another gRPC error is INTERNAL with the gRPC message", status.Error(codes.Internal, "boom"), cnirpc.ErrorCode_TRY_AGAIN_LATER, 100, "boom"},
		{"NotFound without a detail is INTERNAL outside DEL", status.Error(codes.NotFound, "no such pod"), cnirpc.ErrorCode_TRY_AGAIN_LATER, 100, "no such pod"},
		{"Unimplemented is INTERNAL", status.Error(codes.Unimplemented, "method GC not implemented"), cnirpc.ErrorCode_TRY_AGAIN_LATER, 100, "method GC not implemented"},
		{"a plain error is INTERNAL with its text", errors.New("plain"), cnirpc.ErrorCode_TRY_AGAIN_LATER, 100, "plain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ce := FromRPCError(tt.err, tt.unreachable)
			if ce == nil || ce.Code != tt.wantCode || ce.Msg != tt.wantMsg {
				t.Errorf("got %+v, want code %d msg %q", ce, tt.wantCode, tt.wantMsg)
			}
		})
	}
	if ce := FromRPCError(nil, cnirpc.ErrorCode_TRY_AGAIN_LATER); ce != nil {
		t.Errorf("nil came back as %+v", ce)
	}
}

func TestFromRPCErrorKeepsTheGRPCCodeInTheDetails(t *testing.T) {
	ce := FromRPCError(status.Error(codes.PermissionDenied, "no"), cnirpc.ErrorCode_TRY_AGAIN_LATER)
	if !strings.Contains(ce.Details, "PermissionDenied") {
		t.Errorf("details %q do not name the gRPC code", ce.Details)
	}
}

func TestToRPCError(t *testing.T) {
	already := status.Error(codes.Aborted, "aborted")
	tests := []struct {
		name string
		err  error
		want types.Error
	}{
		{"a CNI error keeps its code, message and details", types.NewError(7, "mtu 1: out of range", "d"), types.Error{Code: 7, Msg: "mtu 1: out of range", Details: "d"}},
		{"a wrapped CNI error keeps its code", fmt.Errorf("parse: %w", types.NewError(6, "m", "")), types.Error{Code: 6, Msg: "m"}},
		{"a CNI error whose code does not fit the enum becomes INTERNAL", types.NewError(1<<40, "huge", ""), types.Error{Code: 100, Msg: "huge"}},
		{"a plain error becomes INTERNAL with its text", errors.New("disk full"), types.Error{Code: 100, Msg: "disk full"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FromRPCError(ToRPCError(tt.err), cnirpc.ErrorCode_TRY_AGAIN_LATER)
			if *got != tt.want {
				t.Errorf("got %+v, want %+v", *got, tt.want)
			}
		})
	}
	if got := ToRPCError(already); got != already {
		t.Errorf("a gRPC status became %v", got)
	}
	if ToRPCError(nil) != nil {
		t.Errorf("nil became an error")
	}
}

func TestIsUnknownContainer(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"UNKNOWN_CONTAINER is an unknown container", NewError(cnirpc.ErrorCode_UNKNOWN_CONTAINER, "c", ""), true},
		{"NotFound without a detail is an unknown container", status.Error(codes.NotFound, "c"), true},
		{"POOL_NOT_FOUND is not an unknown container", NewError(cnirpc.ErrorCode_POOL_NOT_FOUND, "p", ""), false},
		{"Unavailable is not an unknown container", status.Error(codes.Unavailable, "x"), false},
		{"no error is not an unknown container", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsUnknownContainer(tt.err); got != tt.want {
				t.Errorf("IsUnknownContainer(%v) = %v", tt.err, got)
			}
		})
	}
}
