package client

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestErrorsMatchTheirSentinelAndKeepTheStatus(t *testing.T) {
	for _, tc := range []struct {
		code     codes.Code
		sentinel error
	}{
		{codes.Unavailable, ErrUnavailable},
		{codes.InvalidArgument, ErrInvalidArgument},
		{codes.Internal, ErrBackend},
		{codes.DeadlineExceeded, ErrDeadlineExceeded},
		{codes.Unknown, ErrUnknownOutcome},
		{codes.FailedPrecondition, ErrBusy},
		{codes.Aborted, ErrHostRestarted},
		{codes.AlreadyExists, ErrDuplicate},
	} {
		err := wrap(status.Error(tc.code, "what went wrong"))
		assert.ErrorIs(t, err, tc.sentinel, "%v", tc.code)
		for _, other := range []error{ErrUnavailable, ErrInvalidArgument, ErrBackend} {
			if other != tc.sentinel {
				assert.NotErrorIs(t, err, other, "%v", tc.code)
			}
		}
		assert.Equal(t, tc.code, status.Code(err), "status.Code still sees the code")
		assert.Contains(t, err.Error(), "what went wrong")
	}
	assert.ErrorIs(t, wrap(status.Error(codes.DeadlineExceeded, "x")), context.DeadlineExceeded)
	assert.ErrorIs(t, wrap(status.Error(codes.Canceled, "x")), context.Canceled)
	assert.NoError(t, wrap(nil))
	plain := errors.New("not a status")
	assert.Same(t, plain, wrap(plain))
}

// A failed handshake is a FailedPrecondition told apart from ErrBusy by the
// ErrorInfo the host attaches; the reason survives status.FromError.
func TestHandshakeFailedIsToldApartFromBusy(t *testing.T) {
	st, err := status.New(codes.FailedPrecondition, `peer "p": handshake failed: refused`).
		WithDetails(&errdetails.ErrorInfo{Domain: ErrorDomain, Reason: ReasonHandshakeFailed, Metadata: map[string]string{"peer": "p"}})
	require.NoError(t, err)
	hs := wrap(st.Err())
	assert.ErrorIs(t, hs, ErrHandshakeFailed)
	assert.NotErrorIs(t, hs, ErrBusy)
	assert.Equal(t, codes.FailedPrecondition, status.Code(hs))
	assert.Contains(t, hs.Error(), "handshake failed: refused")
	again := wrap(status.Convert(hs).Err())
	assert.ErrorIs(t, again, ErrHandshakeFailed, "GRPCStatus keeps the reason")

	busy := wrap(status.Error(codes.FailedPrecondition, "held"))
	assert.ErrorIs(t, busy, ErrBusy)
	assert.NotErrorIs(t, busy, ErrHandshakeFailed)
	other, err := status.New(codes.FailedPrecondition, "x").WithDetails(&errdetails.ErrorInfo{Domain: "elsewhere", Reason: ReasonHandshakeFailed})
	require.NoError(t, err)
	assert.ErrorIs(t, wrap(other.Err()), ErrBusy, "another domain's reason is not ours")
}
