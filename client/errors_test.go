package client

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
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
