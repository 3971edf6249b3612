package host

import (
	"context"
	"testing"
	"time"

	enginev1 "github.com/custody-dev/custody/api/engine/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// StreamFinished sends what WatchFinished sends, from the opening cursor,
// and only AckFinished removes it: a second stream from the same cursor
// gets the same reports until they are acknowledged.
func TestStreamFinishedSendsTheLogAndAckFinishedRemovesIt(t *testing.T) {
	rs := serveReports(t)
	rs.h.rep.add(recvRound("r1"))
	rs.h.rep.add(recvRound("r2"))
	e := rs.engineStub()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // bounds a failure
	defer cancel()

	first := func() *enginev1.Finished {
		t.Helper()
		sctx, scancel := context.WithCancel(ctx)
		defer scancel()
		st, err := e.StreamFinished(sctx, &enginev1.WatchFinishedRequest{})
		require.NoError(t, err)
		b, err := st.Recv()
		require.NoError(t, err)
		return b
	}
	b := first()
	assert.Equal(t, []string{"r1", "r2"}, b.GetFinishedRecving())
	assert.Equal(t, rs.h.rep.incarnation(), b.GetIncarnation())
	assert.Equal(t, []string{"r1", "r2"}, first().GetFinishedRecving(), "nothing was acknowledged: sent again")

	_, err := e.AckFinished(ctx, &enginev1.AckFinishedRequest{Cursor: b.GetCursor() + 1, Incarnation: b.GetIncarnation()})
	require.NoError(t, err)
	assert.Equal(t, []string{"r2"}, first().GetFinishedRecving(), "r1 acknowledged, r2 not")

	// A new report reaches an open stream as the host adds it.
	st, err := e.StreamFinished(ctx, &enginev1.WatchFinishedRequest{Cursor: b.GetNext(), Incarnation: b.GetIncarnation()})
	require.NoError(t, err)
	rs.h.rep.add(recvRound("r3"))
	b3, err := st.Recv()
	require.NoError(t, err)
	assert.Equal(t, []string{"r3"}, b3.GetFinishedRecving(), "a stream opened past r2 sends what follows it")
	left, _, _ := rs.h.rep.next(0, DefaultBatchBytes)
	assert.Equal(t, b.GetNext(), left.Cursor, "the opening cursor acknowledged r2: the host's log starts after it")
}

// AckFinished refuses what it cannot apply, and changes nothing: a cursor
// without its incarnation, another host process's, one never issued.
func TestAckFinishedRefusesBadInputAndChangesNothing(t *testing.T) {
	rs := serveReports(t)
	rs.h.rep.add(recvRound("r1"))
	inc := rs.h.rep.incarnation()
	other := inc + 1
	if other == 0 {
		other = 1
	}
	e := rs.engineStub()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // bounds a failure
	defer cancel()
	for name, tc := range map[string]struct {
		req  *enginev1.AckFinishedRequest
		code codes.Code
		says string
	}{
		"a cursor without its incarnation": {&enginev1.AckFinishedRequest{Cursor: 1}, codes.Aborted, "without its incarnation"},
		"another host process's cursor":    {&enginev1.AckFinishedRequest{Cursor: 1, Incarnation: other}, codes.Aborted, "restarted"},
		"a cursor never issued":            {&enginev1.AckFinishedRequest{Cursor: 2, Incarnation: inc}, codes.InvalidArgument, "issued cursors up to 1"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := e.AckFinished(ctx, tc.req)
			assert.Equal(t, tc.code, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), "ack finished")
			assert.Contains(t, status.Convert(err).Message(), tc.says)
		})
	}
	_, err := e.AckFinished(ctx, &enginev1.AckFinishedRequest{})
	require.NoError(t, err, "cursor 0 acknowledges nothing and is always accepted")
	b, _, _ := rs.h.rep.next(0, DefaultBatchBytes)
	assert.Equal(t, []string{"r1"}, ids(b.FinishedReceiving), "a refused acknowledgement removed a report")

	// A bad opening message is refused as WatchFinished's is.
	st, err := e.StreamFinished(ctx, &enginev1.WatchFinishedRequest{MaxBatchBytes: MinBatchBytes - 1})
	require.NoError(t, err)
	_, err = st.Recv()
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
}
