package client

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	enginev1 "github.com/custody-dev/custody/api/engine/v1"
)

// watchHost is an engine server that hands each WatchFinished stream to the
// test, which plays the host on it.
type watchHost struct {
	enginev1.UnimplementedEngineServer
	streams chan enginev1.Engine_WatchFinishedServer
	end     chan struct{}
}

func (w *watchHost) WatchFinished(st enginev1.Engine_WatchFinishedServer) error {
	w.streams <- st
	select {
	case <-w.end:
	case <-st.Context().Done():
	}
	return nil
}

const testInc = 7

var errBoom = errors.New("boom: fn refused the report")

// ackRig is a client watching a test-played host, with the ack delay's
// timer in the test's hands: each timer the acker arms arrives on armed.
type ackRig struct {
	t       *testing.T
	host    *watchHost
	c       *Client
	armed   chan chan time.Time
	got     chan string
	noted   chan uint64
	cancel  context.CancelFunc
	watched chan error
}

func newAckRig(t *testing.T, opts ...Option) *ackRig {
	sock := filepath.Join(t.TempDir(), "engine.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	r := &ackRig{t: t, host: &watchHost{streams: make(chan enginev1.Engine_WatchFinishedServer, 1), end: make(chan struct{})}, armed: make(chan chan time.Time, 1), got: make(chan string, 16), noted: make(chan uint64, 16)}
	gs := grpc.NewServer()
	enginev1.RegisterEngineServer(gs, r.host)
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(ln) }()
	r.c, err = Dial(sock, opts...)
	require.NoError(t, err)
	r.c.ackAfter = func(time.Duration) (<-chan time.Time, func() bool) {
		fire := make(chan time.Time, 1)
		r.armed <- fire
		return fire, func() bool { return true }
	}
	r.c.ackNoted = func(cursor uint64) { r.noted <- cursor }
	t.Cleanup(func() {
		r.stopWatch()
		r.c.Close()
		close(r.host.end)
		gs.Stop()
		<-served
	})
	return r
}

// watch starts a WatchFinished and returns the stream the host got, with
// the opening request read.
func (r *ackRig) watch() (enginev1.Engine_WatchFinishedServer, *enginev1.WatchFinishedRequest) {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.watched = cancel, make(chan error, 1)
	go func() {
		r.watched <- r.c.WatchFinished(ctx, func(f Finished) error {
			for _, id := range f.FinishedRecving {
				r.got <- id
				if id == "boom" {
					return errBoom
				}
			}
			return nil
		})
	}()
	st := <-r.host.streams
	open, err := st.Recv()
	require.NoError(r.t, err)
	return st, open
}

func (r *ackRig) stopWatch() {
	if r.cancel != nil {
		r.cancel()
		require.ErrorIs(r.t, <-r.watched, context.Canceled)
		r.cancel = nil
	}
}

// report sends the report of id at position at, and waits until fn has
// it and, with a delay, the acker noted it processed.
func (r *ackRig) report(st enginev1.Engine_WatchFinishedServer, at uint64, id string) {
	require.NoError(r.t, st.Send(&enginev1.Finished{FinishedRecving: []string{id}, Cursor: at, Next: at + 1, Incarnation: testInc}))
	require.Equal(r.t, id, next(r.t, r.got))
	if r.c.ackDelay > 0 {
		require.Equal(r.t, at+1, next(r.t, r.noted))
	}
}

// next is the next value on ch. The bound only turns a value that never
// comes (the code under test broken) into a failure instead of a hang.
func next[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("nothing came on %T", ch)
		panic("unreachable")
	}
}

// ack is the next acknowledgement the host receives on st.
func ack(t *testing.T, st enginev1.Engine_WatchFinishedServer) uint64 {
	t.Helper()
	reqs := make(chan *enginev1.WatchFinishedRequest, 1)
	go func() {
		req, err := st.Recv()
		if err == nil {
			reqs <- req
		}
	}()
	req := next(t, reqs)
	require.Equal(t, uint64(testInc), req.GetIncarnation(), "the acknowledgement names the host process")
	return req.GetCursor()
}

// One acknowledgement covers every report processed within the ack delay,
// and a delay that finds nothing new sends nothing.
func TestWatchFinishedAcknowledgesOnceForReportsWithinTheDelay(t *testing.T) {
	r := newAckRig(t)
	st, _ := r.watch()
	r.report(st, 0, "a")
	first := next(t, r.armed) // the acker waits the delay after "a"
	r.report(st, 1, "b")
	r.report(st, 2, "c")
	first <- time.Now()
	require.Equal(t, uint64(3), ack(t, st), "one acknowledgement for a, b and c")

	// b and c kicked the acker while it waited: it waits once more, finds
	// nothing new, and sends nothing; the next acknowledgement is d's.
	next(t, r.armed) <- time.Now()
	r.report(st, 3, "d")
	next(t, r.armed) <- time.Now()
	require.Equal(t, uint64(4), ack(t, st))
}

// Without a delay each report is acknowledged as soon as fn processed it.
func TestWatchFinishedAcknowledgesAtOnceWithoutDelay(t *testing.T) {
	r := newAckRig(t, WithAckDelay(0))
	st, _ := r.watch()
	for i, id := range []string{"a", "b", "c"} {
		r.report(st, uint64(i), id)
		require.Equal(t, uint64(i+1), ack(t, st))
	}
	select {
	case <-r.armed:
		t.Fatal("an ack timer was armed without a delay")
	default:
	}
}

// A watch that ends before its acknowledgement was sent loses nothing: the
// next stream opens at the client's cursor, which acknowledges it.
func TestWatchFinishedEndingBeforeItsAcknowledgementLosesNothing(t *testing.T) {
	r := newAckRig(t)
	st, _ := r.watch()
	r.report(st, 0, "a")
	r.report(st, 1, "b")
	next(t, r.armed) // never fires
	r.stopWatch()

	_, open := r.watch()
	require.Equal(t, uint64(2), open.GetCursor(), "the next stream opens after a and b")
	require.Equal(t, uint64(testInc), open.GetIncarnation())
}

// An acknowledgement blocked in Send (a host that stopped reading: gRPC's
// Send then waits until the stream ends) does not keep WatchFinished from
// returning fn's error.
func TestWatchFinishedReturnsWhileAnAcknowledgementIsBlocked(t *testing.T) {
	r := newAckRig(t)
	blocked := make(chan struct{})
	r.c.ackSend = func(st enginev1.Engine_WatchFinishedClient, _ *enginev1.WatchFinishedRequest) error {
		close(blocked)
		<-st.Context().Done()
		return st.Context().Err()
	}
	st, _ := r.watch()
	r.report(st, 0, "a")
	next(t, r.armed) <- time.Now()
	next(t, blocked)
	require.NoError(t, st.Send(&enginev1.Finished{FinishedRecving: []string{"boom"}, Cursor: 1, Next: 2, Incarnation: testInc}))
	require.Equal(t, "boom", next(t, r.got))
	require.ErrorIs(t, next(t, r.watched), errBoom)
	r.cancel = nil // the watch ended
}

func TestDialRefusesABadAckDelay(t *testing.T) {
	for _, d := range []time.Duration{-time.Millisecond, 2 * time.Second} {
		_, err := Dial(filepath.Join(t.TempDir(), "engine.sock"), WithAckDelay(d))
		require.ErrorContains(t, err, "ack delay")
	}
}
