package client

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Error is a failed engine API call: the host's gRPC code and its message,
// which names what was wrong. Match it with errors.Is against the sentinels
// below; status.Code(err) gives the gRPC code as well.
type Error struct {
	Code    codes.Code
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code.String()
	}
	return e.Code.String() + ": " + e.Message
}

// Is matches any *Error of the same code, and a DeadlineExceeded or
// Canceled error matches the context error of that name too.
func (e *Error) Is(target error) bool {
	if t, ok := target.(*Error); ok {
		return t.Code == e.Code
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
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Code, e.Message) }

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
	// ErrBusy: something still holds what the call would free.
	ErrBusy = &Error{Code: codes.FailedPrecondition}
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
	return &Error{Code: st.Code(), Message: st.Message()}
}
