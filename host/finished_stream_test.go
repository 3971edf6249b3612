package host

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	enginev1 "github.com/custody-dev/custody/api/engine/v1"
	"github.com/custody-dev/custody/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The reply is lost after the host sent it (the engine's deadline fires,
// its context ends): the next stream delivers it again, once.
func TestWatchFinishedDeliversAgainAReplyTheEngineNeverAcknowledged(t *testing.T) {
	rs := serveReports(t)
	rs.h.rep.add(recvRound("r1"))

	ctx, cancel := context.WithCancel(context.Background())
	st := rs.raw(ctx, &enginev1.WatchFinishedRequest{})
	b, err := st.Recv()
	require.NoError(t, err)
	require.Equal(t, []string{"r1"}, b.GetFinishedRecving(), "the host sent the report")
	cancel() // the engine's deadline fired before it processed the reply

	c := rs.dial()
	got := received{}
	rs.h.rep.add(recvRound("r2"))
	watchUntil(t, c, got, has("r2"))
	got.exactlyOnce(t, "r1", "r2")

	// And once acknowledged, never again: a later watch starts after it.
	rs.h.rep.add(recvRound("r3"))
	got = received{}
	watchUntil(t, c, got, has("r3"))
	got.exactlyOnce(t, "r3")
}

// fn fails (the engine could not take the report): the report is not
// acknowledged and comes again.
func TestWatchFinishedDeliversAgainWhatTheEngineFailedToTake(t *testing.T) {
	rs := serveReports(t)
	rs.h.rep.add(recvRound("r1"))
	c := rs.dial()
	refused := errors.New("engine busy")
	err := c.WatchFinished(context.Background(), func(client.Finished) error { return refused })
	require.ErrorIs(t, err, refused)
	got := received{}
	watchUntil(t, c, got, has("r1"))
	got.exactlyOnce(t, "r1")
}

// The connection drops in the middle of a round split over several
// batches: the round arrives whole on the next stream, once.
func TestWatchFinishedLosesNothingWhenTheConnectionDropsMidRound(t *testing.T) {
	rs := serveReports(t)
	rd, ids := bigRound(40, 20)
	rs.h.rep.add(rd)

	st := rs.raw(context.Background(), &enginev1.WatchFinishedRequest{MaxBatchBytes: MinBatchBytes})
	b, err := st.Recv()
	require.NoError(t, err)
	require.True(t, b.GetMore(), "the first part of a split round")
	rs.stop() // the connection drops mid-round, nothing acknowledged
	for err == nil {
		_, err = st.Recv() // what was buffered, then the drop
	}

	rs.start()
	c := rs.dial(client.WithMaxReply(MinBatchBytes))
	got := received{}
	var round client.Finished
	watchUntil(t, c, got, func(f client.Finished) bool { round = f; return true })
	got.exactlyOnce(t, ids...)
	assert.Len(t, round.InvalidBlocks, len(rd.InvalidBlocks), "the failures and their invalid blocks came together")
}

// The host stops under a running watch: the watch ends with ErrUnavailable,
// and the next one, on a host serving the same log, resumes at its cursor.
func TestWatchFinishedResumesAfterTheHostWentAway(t *testing.T) {
	rs := serveReports(t)
	c := rs.dial()
	rs.h.rep.add(recvRound("r1"))
	got := received{}
	processed := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- c.WatchFinished(context.Background(), func(f client.Finished) error {
			got.add(f)
			close(processed)
			return nil
		})
	}()
	<-processed
	rs.stop() // whether r1's acknowledgement arrived first or not
	require.ErrorIs(t, <-errc, client.ErrUnavailable)

	rs.start()
	rs.h.rep.add(recvRound("r2"))
	watchUntil(t, c, got, has("r2"))
	got.exactlyOnce(t, "r1", "r2")
}

// A round far over the engine's reply limit arrives whole: gRPC would
// refuse any reply over the limit, so an unsplit batch fails this test.
func TestWatchFinishedSplitsWhatExceedsTheReplyLimit(t *testing.T) {
	rs := serveReports(t)
	rd, ids := bigRound(60, 30)
	rs.h.rep.add(rd)
	whole, _, _ := rs.h.rep.next(0, 0)
	require.Greater(t, proto.Size(finishedProto(whole)), 4*MinBatchBytes, "the round is far over the limit")

	c := rs.dial(client.WithMaxReply(MinBatchBytes))
	got := received{}
	var round client.Finished
	watchUntil(t, c, got, func(f client.Finished) bool { round = f; return true })
	got.exactlyOnce(t, ids...)
	assert.Len(t, round.InvalidBlocks, len(rd.InvalidBlocks))
	for _, f := range round.Failed {
		assert.Contains(t, f.Reason, "BACKEND")
	}
}

func TestWatchFinishedRefusesBadInputAndChangesNothing(t *testing.T) {
	rs := serveReports(t)
	rs.h.rep.add(recvRound("r1"))
	for name, req := range map[string]*enginev1.WatchFinishedRequest{
		"cursor never issued": {Cursor: 5, Incarnation: rs.h.rep.incarnation()},
		"limit below a batch": {MaxBatchBytes: MinBatchBytes - 1},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // bounds a failure
			defer cancel()
			st := rs.raw(ctx, req)
			_, err := st.Recv()
			assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		})
	}
	t.Run("acknowledgement never issued", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // bounds a failure
		defer cancel()
		st := rs.raw(ctx, &enginev1.WatchFinishedRequest{})
		_, err := st.Recv()
		require.NoError(t, err)
		require.NoError(t, st.Send(&enginev1.WatchFinishedRequest{Cursor: 9, Incarnation: rs.h.rep.incarnation()}))
		_, err = st.Recv()
		assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	})
	_, err := client.Dial(rs.socket, client.WithMaxReply(100))
	assert.Error(t, err)
	f, err := rs.dial().GetFinished(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []string{"r1"}, f.FinishedRecving, "the refused calls removed nothing")
}

// An acknowledgement on the stream removes what it covers from the host.
func TestWatchFinishedAcknowledgementRemovesTheReport(t *testing.T) {
	rs := serveReports(t)
	rs.h.rep.add(recvRound("r1"))
	st := rs.raw(context.Background(), &enginev1.WatchFinishedRequest{})
	b, err := st.Recv()
	require.NoError(t, err)
	require.NoError(t, st.Send(&enginev1.WatchFinishedRequest{Cursor: b.GetNext()}))
	select {
	case <-rs.h.rep.acked(b.GetNext()):
	case <-time.After(10 * time.Second): // a bound on failure, not a synchronisation
		t.Fatal("the acknowledgement did not remove the report")
	}
	f, err := rs.dial().GetFinished(context.Background())
	require.NoError(t, err)
	assert.Empty(t, f.FinishedRecving)
}

// The host restarts under an engine that holds a cursor of the old host
// process (40), and the new process has already issued more cursors (50):
// the old cursor acknowledges nothing of the new log, and every report of
// the new process reaches the engine, once.
func TestWatchFinishedLosesNoReportWhenTheHostRestarted(t *testing.T) {
	rs := serveReports(t)
	c := rs.dial()
	round := func(prefix string, n int) []string {
		var ids []string
		for i := range n {
			ids = append(ids, fmt.Sprintf("%s-%d", prefix, i))
			rs.h.rep.add(recvRound(ids[i]))
		}
		return ids
	}
	old := round("old", 40)
	got := received{}
	watchUntil(t, c, got, has("old-39"))
	got.exactlyOnce(t, old...) // the client holds cursor 40 of the old process

	rs.stop()
	rs.h = &Host{done: make(chan struct{})} // a new host process: its log starts at 0
	fresh := round("new", 50)
	rs.start()
	got = received{}
	watchUntil(t, c, got, has("new-49"))
	got.exactlyOnce(t, fresh...)
}

// An engine's cursor of another host process is refused, on the opening
// message or on an acknowledgement, with Aborted naming the restart and the
// host's incarnation, and changes nothing.
func TestWatchFinishedRefusesACursorOfAnotherHostProcess(t *testing.T) {
	rs := serveReports(t)
	for i := range 4 {
		rs.h.rep.add(recvRound(fmt.Sprintf("r%d", i)))
	}
	inc := rs.h.rep.incarnation()
	other := inc + 1
	if other == 0 {
		other = 1
	}
	refused := func(t *testing.T, err error) {
		t.Helper()
		assert.Equal(t, codes.Aborted, status.Code(err), "%v", err)
		assert.Contains(t, status.Convert(err).Message(), "restarted")
		assert.Contains(t, status.Convert(err).Message(), fmt.Sprintf("%#x", inc), "the error names the host's incarnation")
		assert.Contains(t, status.Convert(err).Message(), "cursor 0")
	}
	for name, req := range map[string]*enginev1.WatchFinishedRequest{
		"another incarnation":  {Cursor: 2, Incarnation: other},
		"a cursor without one": {Cursor: 2},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // bounds a failure
			defer cancel()
			st := rs.raw(ctx, req)
			_, err := st.Recv()
			refused(t, err)
		})
	}
	t.Run("an acknowledgement of another incarnation", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // bounds a failure
		defer cancel()
		st := rs.raw(ctx, &enginev1.WatchFinishedRequest{})
		b, err := st.Recv()
		require.NoError(t, err)
		require.Equal(t, inc, b.GetIncarnation(), "a batch carries the host's incarnation")
		require.NoError(t, st.Send(&enginev1.WatchFinishedRequest{Cursor: b.GetNext(), Incarnation: other}))
		_, err = st.Recv()
		refused(t, err)
	})
	b, _, _ := rs.h.rep.next(0, DefaultBatchBytes)
	assert.Equal(t, uint64(0), b.Cursor, "a refused cursor acknowledged something")

	// The host's own incarnation with its cursor resumes there.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // bounds a failure
	defer cancel()
	st := rs.raw(ctx, &enginev1.WatchFinishedRequest{Cursor: 2, Incarnation: inc})
	b2, err := st.Recv()
	require.NoError(t, err)
	assert.Equal(t, []string{"r2", "r3"}, b2.GetFinishedRecving())
}
