package plugin

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/custody-dev/custody/sdk"
	pb "github.com/custody-dev/custody/sdk/plugin/proto/custody/transport/v1"
)

// A call-level error crosses the process boundary as a gRPC status whose
// gRPC code is fixed by grpcCodes and whose details carry the sdk Status
// (Code and message) unchanged. The host rebuilds the very *Error the
// transport returned from the details; the gRPC code only serves gRPC
// tooling and is the fallback for a status without details.

// grpcCodes maps each sdk Code to the gRPC code a call-level error carries.
var grpcCodes = [...]codes.Code{
	sdk.CodeOK:               codes.OK,
	sdk.CodeBusy:             codes.FailedPrecondition,
	sdk.CodeNotFound:         codes.NotFound,
	sdk.CodeInvalidArgument:  codes.InvalidArgument,
	sdk.CodeRemoteDisconnect: codes.Aborted,
	sdk.CodeCanceled:         codes.Canceled,
	sdk.CodeBackend:          codes.Internal,
	sdk.CodeUnsupported:      codes.Unimplemented,
	sdk.CodeTimeout:          codes.DeadlineExceeded,
	sdk.CodePluginShutdown:   codes.Unavailable,
}

// grpcCodeOf is the gRPC code for c; codes.Unknown for a code this version
// does not know.
func grpcCodeOf(c sdk.Code) codes.Code {
	if int(c) < len(grpcCodes) {
		return grpcCodes[c]
	}
	return codes.Unknown
}

// statusError is the gRPC error a server returns for a transport's
// call-level error err (non-nil).
func statusError(err error) error {
	s := statusOf(err)
	st := status.New(grpcCodeOf(sdk.Code(s.Code)), err.Error())
	if withDetails, derr := st.WithDetails(s); derr == nil {
		st = withDetails
	}
	return st.Err()
}

// transportError returns the *Error a transport returned, as carried in the
// details of st, or nil when st carries none (the status came from gRPC
// itself, not from the transport).
func transportError(st *status.Status) error {
	for _, d := range st.Details() {
		if s, ok := d.(*pb.Status); ok {
			if err := errOf(s); err != nil {
				return err
			}
			// A status carrying OK is not an error of the transport;
			// treat it like one without details.
			return nil
		}
	}
	return nil
}
