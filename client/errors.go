package client

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Error is a failed engine API call: the host's gRPC code and its message,
// which names what was wrong. Match it with errors.Is against the sentinels
// below; status.Code(err) gives the gRPC code as well.
type Error struct {
	Code    codes.Code
	Message string
	// Reason tells apart errors of one code: the reason of the
	// google.rpc.ErrorInfo of ErrorDomain the host attached ("" when none):
	// ReasonHandshakeFailed.
	Reason string
}

// ErrorDomain is the domain of the google.rpc.ErrorInfo details the host
// attaches to an engine API error.
const ErrorDomain = "custody.engine.v1"

// ReasonHandshakeFailed is the ErrorInfo reason of ErrHandshakeFailed.
const ReasonHandshakeFailed = "HANDSHAKE_FAILED"

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code.String()
	}
	return e.Code.String() + ": " + e.Message
}

// Is matches any *Error of the same code and reason, and a DeadlineExceeded
// or Canceled error matches the context error of that name too.
func (e *Error) Is(target error) bool {
	if t, ok := target.(*Error); ok {
		return t.Code == e.Code && t.Reason == e.Reason
	}
	switch target {
	case context.DeadlineExceeded:
		return e.Code == codes.DeadlineExceeded
	case context.Canceled:
		return e.Code == codes.Canceled
	}
	return false
}

// GRPCStatus makes status.Code and status.FromError see the host's status.
func (e *Error) GRPCStatus() *status.Status {
	st := status.New(e.Code, e.Message)
	if e.Reason != "" {
		if d, err := st.WithDetails(&errdetails.ErrorInfo{Domain: ErrorDomain, Reason: e.Reason}); err == nil {
			return d
		}
	}
	return st
}

// Sentinel errors, one per code the host uses, each saying what to do next.
var (
	// ErrUnavailable: the host stopped, its transport restarts, a peer's
	// handshake runs or the connection broke. Retry.
	ErrUnavailable = &Error{Code: codes.Unavailable}
	// ErrInvalidArgument: the call's input was wrong; the message says
	// what. The call changed nothing.
	ErrInvalidArgument = &Error{Code: codes.InvalidArgument}
	// ErrDeadlineExceeded: the caller's deadline or a transport call's
	// timeout passed.
	ErrDeadlineExceeded = &Error{Code: codes.DeadlineExceeded}
	// ErrCanceled: the call was canceled.
	ErrCanceled = &Error{Code: codes.Canceled}
	// ErrBackend: the transport failed; the host's log says why.
	ErrBackend = &Error{Code: codes.Internal}
	// ErrUnknownOutcome: whether a transport call took effect is unknown;
	// its request is reported failed once the transport is fenced.
	ErrUnknownOutcome = &Error{Code: codes.Unknown}
	// ErrBusy: something still holds what the call would free, or a pool
	// is poisoned; the message says which.
	ErrBusy = &Error{Code: codes.FailedPrecondition}
	// ErrHandshakeFailed: the last attempt of the peer's handshake failed;
	// the message names the peer and the cause (`peer "NAME": handshake
	// failed: CAUSE`), as it stays until an attempt succeeds. The host
	// retries it with backoff on its own: the call may be retried at the
	// engine's own pace, and succeeds once an attempt did; ConnectPeer
	// starts an attempt at once (with other ranks, when they were wrong).
	// Its code is FailedPrecondition, its Reason ReasonHandshakeFailed; it
	// does not match ErrBusy.
	ErrHandshakeFailed = &Error{Code: codes.FailedPrecondition, Reason: ReasonHandshakeFailed}
	// ErrNotFound: the transport does not know what the call named.
	ErrNotFound = &Error{Code: codes.NotFound}
	// ErrUnsupported: the transport does not offer what the call needs.
	ErrUnsupported = &Error{Code: codes.Unimplemented}
	// ErrResourceExhausted: a message exceeded a size limit.
	ErrResourceExhausted = &Error{Code: codes.ResourceExhausted}
	// ErrHostRestarted: a report cursor was not the host process's (the
	// host restarted since it was read); nothing was acknowledged. Start
	// again from cursor 0 (WatchFinished does so itself).
	ErrHostRestarted = &Error{Code: codes.Aborted}
	// ErrDuplicate: the call repeats a request the host took, by id, token
	// and kind (in flight, or among the last reported): a retry of a call
	// whose reply was lost got through the first time. Nothing new was
	// taken; the request's one report comes, or came, as for the first.
	ErrDuplicate = &Error{Code: codes.AlreadyExists}
)

// wrap turns a gRPC error into an *Error; nil stays nil and an error that
// carries no status is returned as it is.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	e = &Error{Code: st.Code(), Message: st.Message()}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			e.Reason = info.GetReason()
		}
	}
	return e
}
