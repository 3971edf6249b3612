package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	enginev1 "github.com/custody-dev/custody/api/engine/v1"
	"github.com/custody-dev/custody/client"
	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/sdk"
)

// reportServer serves the engine API of a host that has only its report
// log: the tests add rounds to it directly, as the owner does.
type reportServer struct {
	t      *testing.T
	h      *Host
	socket string
	gs     *grpc.Server
	served chan error
}

func serveReports(t *testing.T) *reportServer {
	t.Helper()
	rs := &reportServer{t: t, h: &Host{done: make(chan struct{})}, socket: filepath.Join(t.TempDir(), "engine.sock")}
	rs.start()
	t.Cleanup(rs.stop)
	return rs
}

func (rs *reportServer) start() {
	ln, err := net.Listen("unix", rs.socket)
	require.NoError(rs.t, err)
	rs.gs, rs.served = NewEngineServer(rs.h), make(chan error, 1)
	go func() { rs.served <- rs.gs.Serve(ln) }()
}

// stop closes every connection and stream at once, as a host that dies
// or a connection that drops does.
func (rs *reportServer) stop() {
	if rs.gs == nil {
		return
	}
	rs.gs.Stop()
	<-rs.served
	rs.gs = nil
}

func (rs *reportServer) dial(opts ...client.Option) *client.Client {
	c, err := client.Dial(rs.socket, opts...)
	require.NoError(rs.t, err)
	rs.t.Cleanup(func() { c.Close() })
	return c
}

// raw opens a bare stream, for what the client library hides: batches as
// they cross the wire and acknowledgements withheld.
func (rs *reportServer) raw(ctx context.Context, open *enginev1.WatchFinishedRequest) enginev1.Engine_WatchFinishedClient {
	st, err := rs.engineStub().WatchFinished(ctx)
	require.NoError(rs.t, err)
	require.NoError(rs.t, st.Send(open))
	return st
}

// engineStub is a raw engine API client of rs, closed with the test.
func (rs *reportServer) engineStub() enginev1.EngineClient {
	conn, err := grpc.NewClient("unix://"+rs.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(rs.t, err)
	rs.t.Cleanup(func() { conn.Close() })
	return enginev1.NewEngineClient(conn)
}

// received is what an engine processed, by request id.
type received map[string]int

func (r received) add(f client.Finished) {
	for _, id := range f.FinishedSending {
		r[id]++
	}
	for _, id := range f.FinishedRecving {
		r[id]++ // a failed receive is here too
	}
	for _, x := range f.Failed {
		if x.Sending {
			r[x.Request]++
		}
	}
}

// exactlyOnce asserts that every id in want was processed once and
// nothing else was.
func (r received) exactlyOnce(t *testing.T, want ...string) {
	t.Helper()
	exp := received{}
	for _, id := range want {
		exp[id] = 1
	}
	assert.Equal(t, exp, r)
}

func recvRound(ids ...string) core.Ready {
	rd := core.Ready{}
	for _, id := range ids {
		rd.FinishedReceiving = append(rd.FinishedReceiving, core.RequestID(id))
	}
	return rd
}

// bigRound is one round of n failed receives with long ids, each with
// blocks invalid blocks, far more than one 16 KiB reply holds.
func bigRound(n, blocks int) (core.Ready, []string) {
	rd := core.Ready{}
	var ids []string
	for i := range n {
		id := fmt.Sprintf("%s-%04d", strings.Repeat("r", 900), i)
		ids = append(ids, id)
		rd.Failed = append(rd.Failed, core.Failure{Request: core.RequestID(id), Reason: fmt.Errorf("handle %d: %w", i, sdk.ErrBackend)})
		for b := range blocks {
			rd.InvalidBlocks = append(rd.InvalidBlocks, core.BlockRef{Pool: 1, Block: uint32(i*blocks + b)})
		}
	}
	return rd, ids
}

// watchUntil runs c.WatchFinished until stop says so, adding every report
// to got. It calls again on ErrUnavailable, as an engine does: a stream
// opened on a connection to a host that went away fails so, whatever the
// client's cursor.
func watchUntil(t *testing.T, c *client.Client, got received, stop func(client.Finished) bool) {
	t.Helper()
	// The timeout bounds a failure (a report that never comes); stop ends
	// the watch by cancel.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		err := c.WatchFinished(ctx, func(f client.Finished) error {
			got.add(f)
			if stop(f) {
				cancel()
			}
			return nil
		})
		if errors.Is(err, client.ErrUnavailable) {
			continue
		}
		require.ErrorIs(t, err, context.Canceled)
		return
	}
}

func has(id string) func(client.Finished) bool {
	return func(f client.Finished) bool {
		return received{}.with(f)[id] > 0
	}
}

func (r received) with(f client.Finished) received { r.add(f); return r }

// A stream waiting past the log's end is woken by a round added, not by an
// acknowledgement, which gives it nothing to send.
func TestOutboxAcknowledgementWakesNoStream(t *testing.T) {
	var o outbox
	o.add(recvRound("a"))
	_, ok, waiting := o.next(1, DefaultBatchBytes)
	require.False(t, ok)
	require.NoError(t, o.ack(o.incarnation(), 1))
	select {
	case <-waiting:
		t.Fatal("an acknowledgement woke a stream that has nothing to send")
	default:
	}
	o.add(recvRound("b"))
	select {
	case <-waiting:
	default:
		t.Fatal("adding a round did not wake the waiting stream")
	}
}

func TestOutboxKeepsEveryReportUntilAcknowledged(t *testing.T) {
	var o outbox
	_, ok, changed := o.next(0, DefaultBatchBytes)
	require.False(t, ok)
	o.add(recvRound("a", "b"))
	select {
	case <-changed:
	default:
		t.Fatal("adding a round did not wake the waiting stream")
	}
	b, ok, _ := o.next(0, DefaultBatchBytes)
	require.True(t, ok)
	assert.Equal(t, []core.RequestID{"a", "b"}, b.FinishedReceiving)
	assert.Equal(t, [2]uint64{0, 2}, [2]uint64{b.Cursor, b.Next})

	// Sending removed nothing: the same batch, under the same cursor.
	again, _, _ := o.next(0, DefaultBatchBytes)
	assert.Equal(t, b, again)

	o.add(recvRound("c"))
	require.NoError(t, o.ack(o.incarnation(), 2))
	b, _, _ = o.next(0, DefaultBatchBytes)
	assert.Equal(t, []core.RequestID{"c"}, b.FinishedReceiving, "an acknowledged report is gone, the rest keeps its cursor")
	assert.Equal(t, [2]uint64{2, 3}, [2]uint64{b.Cursor, b.Next})
	require.NoError(t, o.ack(o.incarnation(), 1), "an old acknowledgement changes nothing")
	assert.Error(t, o.ack(o.incarnation(), 4), "a cursor never issued is refused")
	b, _, _ = o.next(2, DefaultBatchBytes)
	assert.Equal(t, uint64(2), b.Cursor, "a refused acknowledgement removed nothing")
}

// A batch holds whole rounds while they fit; a round that does not fit
// alone is split, and every part but the last says more.
func TestOutboxSplitsOnlyARoundTooLargeForOneBatch(t *testing.T) {
	var o outbox
	o.add(recvRound("a"))
	rd, ids := bigRound(40, 20)
	o.add(rd)
	o.add(recvRound("z"))

	first, _, _ := o.next(0, MinBatchBytes)
	assert.Equal(t, []core.RequestID{"a"}, first.FinishedReceiving, "the small round goes alone, not with part of the big one")
	assert.False(t, first.More)
	var failed, invalid int
	var recv []core.RequestID
	pos, parts := first.Next, 0
	for pos < o.end() {
		b, ok, _ := o.next(pos, MinBatchBytes)
		require.True(t, ok)
		require.LessOrEqual(t, proto.Size(finishedProto(b)), MinBatchBytes, "batch %d", parts)
		require.Equal(t, pos, b.Cursor, "each batch starts where the last ended")
		pos = b.Next
		parts++
		failed += len(b.Failed)
		invalid += len(b.InvalidBlocks)
		recv = append(recv, b.FinishedReceiving...)
		require.Equal(t, pos < o.end()-1, b.More, "batch %d: more is set until the big round ends", parts)
	}
	assert.Greater(t, parts, 1, "the big round was split")
	assert.Equal(t, len(ids), failed)
	assert.Equal(t, len(rd.InvalidBlocks), invalid)
	assert.Equal(t, []core.RequestID{"z"}, recv, "the round after it came once")
}

// GetFinished keeps working for simple clients: it takes what finished and
// acknowledges it, in bounded replies.
func TestGetFinishedTakesAndAcknowledges(t *testing.T) {
	rs := serveReports(t)
	c := rs.dial()
	ctx := context.Background()
	rs.h.rep.add(recvRound("r1"))
	rs.h.rep.add(core.Ready{Failed: []core.Failure{{Request: "s1", Sending: true, Reason: core.ErrHoldCap}}})
	f, err := c.GetFinished(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"r1"}, f.FinishedRecving)
	require.Len(t, f.Failed, 1)
	assert.Equal(t, core.ErrHoldCap.Error(), f.Failed[0].Reason)
	f, err = c.GetFinished(ctx)
	require.NoError(t, err)
	assert.Empty(t, f.FinishedRecving)
	assert.Empty(t, f.Failed)

	// A round over one reply comes in parts, all of it.
	rd, ids := bigRound(1500, 1)
	rs.h.rep.add(rd)
	got := received{}
	parts := 0
	for {
		f, err := c.GetFinished(ctx)
		require.NoError(t, err)
		got.add(f)
		parts++
		if !f.More {
			break
		}
	}
	assert.Greater(t, parts, 1)
	got.exactlyOnce(t, ids...)

	// What GetFinished took, a watch never sees.
	rs.h.rep.add(recvRound("r2"))
	got = received{}
	watchUntil(t, c, got, has("r2"))
	got.exactlyOnce(t, "r2")
}

func TestEngineErrorsCarryTheirCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code codes.Code
	}{
		{fmt.Errorf("read %q: %w", "r", ErrRestarting), codes.Unavailable},
		{fmt.Errorf("post: %w", sdk.Errorf(sdk.CodeBackend, "ucx: endpoint closed")), codes.Internal},
		{fmt.Errorf("post: %w", sdk.Errorf(sdk.CodeTimeout, "call took 5s")), codes.DeadlineExceeded},
		{fmt.Errorf("post: %w", sdk.ErrPluginShutdown), codes.Unavailable},
		{fmt.Errorf("post: %w", core.ErrUnknownOutcome), codes.Unknown},
		{fmt.Errorf("free: %w", sdk.ErrBusy), codes.FailedPrecondition},
		{fmt.Errorf("watch finished: %w", ErrHostRestarted), codes.Aborted},
		{fmt.Errorf("read: %w", core.ErrDuplicate), codes.AlreadyExists},
		{context.Canceled, codes.Canceled},
		{errors.New("alloc 5 blocks of pool 9: no such pool"), codes.InvalidArgument},
	} {
		err := engineErr(tc.err)
		assert.Equal(t, tc.code, status.Code(err), "%v", tc.err)
		assert.Equal(t, tc.err.Error(), status.Convert(err).Message())
	}
}

func TestRequestIDsAreBounded(t *testing.T) {
	s := &engineServer{} // refused before the host is asked
	_, err := s.Read(context.Background(), &enginev1.ReadRequest{RequestId: strings.Repeat("x", maxRequestIDBytes+1), Peer: "p"})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	_, err = s.ExpectSend(context.Background(), &enginev1.ExpectSendRequest{})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
}

// acked returns a channel closed once o acknowledged everything below n.
func (o *outbox) acked(n uint64) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			o.mu.Lock()
			if o.base >= n {
				o.mu.Unlock()
				return
			}
			ch := waitOn(&o.shrank)
			o.mu.Unlock()
			<-ch
		}
	}()
	return done
}

// Every host process draws its own incarnation, never zero, and an outbox
// refuses a cursor of another one, or a bare one past 0, changing nothing.
func TestOutboxRefusesACursorOfAnotherIncarnation(t *testing.T) {
	var o, other outbox
	inc := o.incarnation()
	require.NotZero(t, inc)
	require.NotEqual(t, inc, other.incarnation(), "two host processes drew one incarnation")
	o.add(recvRound("a", "b"))
	for name, tc := range map[string][2]uint64{
		"another incarnation":   {other.incarnation(), 1},
		"a cursor without one":  {0, 1},
		"another, at cursor 0":  {other.incarnation(), 0},
		"another, past the end": {other.incarnation(), 3},
	} {
		err := o.ack(tc[0], tc[1])
		require.ErrorIs(t, err, ErrHostRestarted, name)
		assert.Contains(t, err.Error(), fmt.Sprintf("%#x", inc), "%s: the error names this process's incarnation", name)
		b, _, _ := o.next(0, DefaultBatchBytes)
		assert.Equal(t, [2]uint64{0, 2}, [2]uint64{b.Cursor, b.Next}, "%s: a refused cursor acknowledged something", name)
		assert.Equal(t, inc, b.Incarnation)
	}
	require.NoError(t, o.ack(0, 0), "an engine without an incarnation yet starts at 0")
	require.NoError(t, o.ack(inc, 1))
	b, _, _ := o.next(0, DefaultBatchBytes)
	assert.Equal(t, uint64(1), b.Cursor, "a cursor of this process's acknowledges")
}
