package host

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/custody-dev/custody/client"
	"github.com/custody-dev/custody/sdk/plugin"
)

// pull runs one pull request: the prefill side pins n blocks of random
// bytes, the decode side reads them and notifies the producer.
func pull(t *testing.T, prefill, decode *testHost, id string, n int) (src [][]byte, dst []uint32) {
	t.Helper()
	pb, err := prefill.c.Alloc(prefill.ctx(), prefill.poolID, n)
	require.NoError(t, err)
	src = prefill.fill(pb)
	token := client.NewToken()
	require.NoError(t, prefill.c.ExpectSend(prefill.ctx(), id, token, "", prefill.poolID, pb, 1, 30*time.Second))
	dst, err = decode.c.Alloc(decode.ctx(), decode.poolID, n)
	require.NoError(t, err)
	require.NoError(t, decode.c.Read(decode.ctx(), id, token, "prefill", true, client.Part{Pool: decode.poolID, Local: dst, Remote: pb}))
	return src, dst
}

func TestPullMovesEveryByteAndFinishesBothSides(t *testing.T) {
	prefill := startHost(t, "prefill", 16, nil)
	decode := startHost(t, "decode", 16, nil)
	decode.connect("prefill", prefill)

	src, dst := pull(t, prefill, decode, "r1", 4)
	f := decode.waitFinished("r1")
	assert.Equal(t, []string{"r1"}, f.FinishedRecving)
	assert.Empty(t, f.Failed)
	sameBlocks(t, src, decode.read(dst), "r1")

	f = prefill.waitFinished("r1")
	assert.Equal(t, []string{"r1"}, f.FinishedSending, "the consumed notification finished the send")

	// Over the rings the host runs release at terminal: core's Release of
	// a DONE handle does not cross to the transport process.
	var rings, atTerminal bool
	require.NoError(t, decode.h.do(decode.ctx(), func(context.Context) error {
		if p, ok := decode.h.tp.(*plugin.Plugin); ok {
			rings, atTerminal = p.Rings(), p.ReleasesAtTerminal()
		}
		return nil
	}))
	assert.Equal(t, os.Getenv("CUSTODY_TRANSPORT_RINGS") != "off", rings, "rings attached")
	assert.Equal(t, rings, atTerminal, "rings attached %v, release at terminal %v", rings, atTerminal)
}

func TestPushFinishesBothSidesOnTheirNotifications(t *testing.T) {
	prefill := startHost(t, "prefill", 16, nil)
	decode := startHost(t, "decode", 16, nil)
	prefill.connect("decode", decode)
	decode.connect("prefill", prefill)

	db, err := decode.c.Alloc(decode.ctx(), decode.poolID, 3)
	require.NoError(t, err)
	token := client.NewToken()
	require.Eventually(t, func() bool {
		err = decode.c.ExpectReceive(decode.ctx(), "w1", token, "prefill", decode.poolID, db, 1, 30*time.Second)
		return status.Code(err) != codes.Unavailable // the handshake runs
	}, 10*time.Second, time.Millisecond)
	require.NoError(t, err)
	pb, err := prefill.c.Alloc(prefill.ctx(), prefill.poolID, 3)
	require.NoError(t, err)
	src := prefill.fill(pb)
	require.NoError(t, prefill.c.Write(prefill.ctx(), "w1", token, "decode", 1, 30*time.Second, client.Part{Pool: prefill.poolID, Local: pb, Remote: db}))

	// Both finish long before the 30 s leases: on the written and the
	// consumed notification.
	f := decode.waitFinished("w1")
	assert.Equal(t, []string{"w1"}, f.FinishedRecving)
	assert.Empty(t, f.Failed)
	sameBlocks(t, src, decode.read(db), "w1")
	f = prefill.waitFinished("w1")
	assert.Equal(t, []string{"w1"}, f.FinishedSending)
	assert.Empty(t, f.Failed)
}

// The engine learns of a finished pull from the stream, with no call of its
// own, and the report is gone from the host once processed.
func TestPullIsReportedOnTheStream(t *testing.T) {
	prefill := startHost(t, "prefill", 16, nil)
	decode := startHost(t, "decode", 16, nil)
	decode.connect("prefill", prefill)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // bounds a failure
	defer cancel()
	reports := make(chan client.Finished)
	watched := make(chan error, 1)
	go func() {
		watched <- decode.c.WatchFinished(ctx, func(f client.Finished) error {
			select {
			case reports <- f:
			case <-ctx.Done():
			}
			return nil
		})
	}()
	src, dst := pull(t, prefill, decode, "s1", 2)
	var f client.Finished
	select {
	case f = <-reports:
	case err := <-watched:
		t.Fatalf("watch ended: %v", err)
	}
	assert.Equal(t, []string{"s1"}, f.FinishedRecving)
	assert.Empty(t, f.Failed)
	sameBlocks(t, src, decode.read(dst), "s1")
	cancel()
	require.ErrorIs(t, <-watched, context.Canceled)

	// The next watch resumes after what was processed: s1 never again.
	pull(t, prefill, decode, "s2", 1)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Second) // bounds a failure
	defer cancel2()
	var seen []string
	err := decode.c.WatchFinished(ctx2, func(f client.Finished) error {
		seen = append(seen, f.FinishedRecving...)
		if slices.Contains(f.FinishedRecving, "s2") {
			cancel2()
		}
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, []string{"s2"}, seen)
}

// Over the gRPC fallback (rings off) the plugin's Waker only ticks; the host
// polls while work is in flight instead of waking on those ticks (so an idle
// host makes no call), and a pull and a push still finish on both sides.
func TestPullAndPushOverTheGRPCFallback(t *testing.T) {
	t.Setenv("CUSTODY_TRANSPORT_RINGS", "off") // the transport processes inherit it
	t.Run("pull", TestPullMovesEveryByteAndFinishesBothSides)
	t.Run("push", TestPushFinishesBothSidesOnTheirNotifications)
}

type ringsStub struct{ on bool }

func (r ringsStub) Rings() bool { return r.on }

func TestOffRings(t *testing.T) {
	assert.True(t, offRings(ringsStub{on: false}), "a plugin process without rings")
	assert.False(t, offRings(ringsStub{on: true}), "a plugin process with rings wakes the host")
	assert.False(t, offRings(struct{}{}), "a transport that is no plugin process keeps its own Waker")
}

// A Read repeated with its id and token after its report (the retry of a
// call whose reply was lost) is refused AlreadyExists (client.ErrDuplicate)
// and moves nothing: the decode's blocks, which the engine already uses,
// are never written again. A new token is a new request.
func TestARetriedReadAfterItsReportMovesNothing(t *testing.T) {
	prefill := startHost(t, "prefill", 16, nil)
	decode := startHost(t, "decode", 16, nil)
	decode.connect("prefill", prefill)

	pb, err := prefill.c.Alloc(prefill.ctx(), prefill.poolID, 2)
	require.NoError(t, err)
	src := prefill.fill(pb)
	token := client.NewToken()
	require.NoError(t, prefill.c.ExpectSend(prefill.ctx(), "r", token, "", prefill.poolID, pb, 1, 30*time.Second))
	dst, err := decode.c.Alloc(decode.ctx(), decode.poolID, 2)
	require.NoError(t, err)
	part := client.Part{Pool: decode.poolID, Local: dst, Remote: pb}
	require.NoError(t, decode.c.Read(decode.ctx(), "r", token, "prefill", true, part))
	assert.Equal(t, []string{"r"}, decode.waitFinished("r").FinishedRecving)
	assert.Equal(t, []string{"r"}, prefill.waitFinished("r").FinishedSending)

	// The engine uses its blocks now; the prefill reuses its own.
	other := prefill.fill(pb)
	err = decode.c.Read(decode.ctx(), "r", token, "prefill", true, part)
	require.ErrorIs(t, err, client.ErrDuplicate, "%v", err)
	assert.Equal(t, codes.AlreadyExists, status.Code(err))
	sameBlocks(t, src, decode.read(dst), "the retry wrote nothing")

	require.NoError(t, prefill.c.ExpectSend(prefill.ctx(), "r", token+1, "", prefill.poolID, pb, 1, 30*time.Second))
	require.NoError(t, decode.c.Read(decode.ctx(), "r", token+1, "prefill", true, part), "a new token: a new request")
	assert.Equal(t, []string{"r"}, decode.waitFinished("r").FinishedRecving)
	sameBlocks(t, other, decode.read(dst), "r again")
}
