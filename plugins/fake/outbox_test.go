package fake

import (
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// TestPostNotificationKeptWhenSendFails: a post's notification whose send
// fails for want of room (as one that found the peer's queue full for
// sendTimeout) is not lost: it is tried again and arrives, exactly once.
func TestPostNotificationKeptWhenSendFails(t *testing.T) {
	var failed atomic.Bool
	g := newGatedPair(t, 4096, 4096, nil, func(a *Transport) {
		a.sendFault = func(msg []byte) error {
			if string(msg) == "ready" && failed.CompareAndSwap(false, true) {
				return os.ErrDeadlineExceeded
			}
			return nil
		}
	})
	g.open()
	h := postOne(t, g.a, g.whole(sdk.OpWrite, []byte("ready")))
	require.Equal(t, []sdk.Notification{{From: "a", Message: []byte("ready")}}, drainNotes(t, g.b, 1))
	require.True(t, failed.Load(), "the first send failed")
	require.Equal(t, sdk.StateDone, poll(t, g.a, h).State)
	// Exactly once: the next transfer's notification is the only other.
	h2 := postOne(t, g.a, g.whole(sdk.OpWrite, []byte("next")))
	require.Equal(t, []sdk.Notification{{From: "a", Message: []byte("next")}}, drainNotes(t, g.b, 1))
	release(t, g.a, h, h2)
}

// TestPostNotificationWaitsForRoom: with the peer's queue full, a post's
// notification waits in the outbox while the DMA engine goes on with other
// transfers; a message SendNotifications sends the peer meanwhile goes
// behind it (OK, queued); once the peer drains, both arrive, once and in
// order, after what filled the queue.
func TestPostNotificationWaitsForRoom(t *testing.T) {
	blocked := make(chan struct{})
	// fence=initiated: a copies into b's memory itself, so b's lock, held
	// below to keep b's queue full, does not hold the bytes back too.
	g := newGatedPair(t, 4096, 4096, map[string]string{"fence": "initiated"}, func(a *Transport) {
		a.sendRetryHook = sync.OnceFunc(func() { close(blocked) })
	})
	g.open()
	g.b.mu.Lock() // hold b's receiver: its queue stays full
	resume := sync.OnceFunc(g.b.mu.Unlock)
	t.Cleanup(resume)
	fillers := fillQueue(t, g.b)

	h := postOne(t, g.a, g.whole(sdk.OpWrite, []byte("post")))
	select {
	case <-blocked:
	case <-time.After(wait):
		t.Fatal("the post's notification never found the queue full")
	}
	require.Equal(t, sdk.StateDone, poll(t, g.a, h).State)
	// The engine is not held up by the waiting notification.
	h2 := postOne(t, g.a, g.whole(sdk.OpWrite, nil))
	require.Equal(t, sdk.StateDone, terminal(t, g.a, h2).State)
	errs, err := g.a.SendNotifications(ctx, []sdk.OutboundNotification{{Peer: g.peer, Message: []byte("after")}})
	require.NoError(t, err)
	require.NoError(t, errs[0], "queued behind the post's notification")
	g.a.mu.Lock()
	require.Len(t, g.a.outbox, 2, "both wait while b's queue is full")
	g.a.mu.Unlock()

	resume()
	got := drainNotes(t, g.b, fillers+2)
	require.Len(t, got, fillers+2)
	for _, n := range got[:fillers] {
		require.Equal(t, "filler", n.From)
	}
	require.Equal(t, []sdk.Notification{{From: "a", Message: []byte("post")}, {From: "a", Message: []byte("after")}}, got[fillers:])
	g.a.mu.Lock()
	require.Empty(t, g.a.outbox)
	g.a.mu.Unlock()
	release(t, g.a, h, h2)
}

// TestPostNotificationToDeadPeerDropped: a post's notification to a peer
// whose socket is gone (the peer died; fence=initiated lets the transfer
// end DONE because the peer watch has not noticed) is dropped, not tried
// for ever.
func TestPostNotificationToDeadPeerDropped(t *testing.T) {
	g := newGatedPair(t, 8192, 4096, map[string]string{"fence": "initiated"}, func(a *Transport) {
		a.watch = time.Hour // the watch never notices: the transfer ends DONE
	})
	h := postOne(t, g.a, g.whole(sdk.OpWrite, []byte("to the dead")))
	g.steps(1) // the first chunk lands
	g.b.Kill()
	g.open()
	require.Equal(t, sdk.StateDone, terminal(t, g.a, h).State)
	require.Eventually(t, func() bool {
		g.a.mu.Lock()
		defer g.a.mu.Unlock()
		return len(g.a.outbox) == 0
	}, wait, time.Millisecond, "the notification to the dead peer stays in the outbox")
	release(t, g.a, h)
}
