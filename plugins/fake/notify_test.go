package fake

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// drainNotes collects n notifications from a, failing if they do not come.
func drainNotes(t testing.TB, a *Transport, n int) []sdk.Notification {
	t.Helper()
	var got []sdk.Notification
	require.Eventually(t, func() bool {
		more, err := a.Notifications(ctx, 0)
		require.NoError(t, err)
		got = append(got, more...)
		return len(got) >= n
	}, wait, 100*time.Microsecond, "got %d of %d notifications", len(got), n)
	return got
}

// TestPostNotification checks that a post's notification reaches the peer
// exactly once, and only after the transfer is DONE.
func TestPostNotification(t *testing.T) {
	p := newPair(t, 1<<20, map[string]string{"chunk": "4096"}, nil)
	h := postOne(t, p.a, p.whole(sdk.OpWrite, []byte("block 7 ready")))
	got := drainNotes(t, p.b, 1)
	// The notification arrived, so the transfer must already be DONE.
	require.Equal(t, sdk.StateDone, poll(t, p.a, h).State)
	require.Equal(t, []sdk.Notification{{From: "a", Message: []byte("block 7 ready")}}, got)
	require.Equal(t, readFile(t, p.aPath), readFile(t, p.bPath))
	// A second transfer's notification is the only other one: the first is
	// not delivered again.
	h2 := postOne(t, p.a, p.whole(sdk.OpWrite, []byte("again")))
	require.Equal(t, []sdk.Notification{{From: "a", Message: []byte("again")}}, drainNotes(t, p.b, 1))
	release(t, p.a, h, h2)
	more, err := p.b.Notifications(ctx, 0)
	require.NoError(t, err)
	require.Empty(t, more)
}

// TestSendNotificationsOrder checks delivery once and in order per sender,
// the max argument, and per-item errors.
func TestSendNotificationsOrder(t *testing.T) {
	p := newPair(t, 4096, nil, nil)
	var msgs []sdk.OutboundNotification
	for i := 0; i < 100; i++ {
		msgs = append(msgs, sdk.OutboundNotification{Peer: p.peer, Message: []byte(fmt.Sprint(i))})
	}
	msgs = append(msgs,
		sdk.OutboundNotification{Peer: 999999999, Message: []byte("x")},
		sdk.OutboundNotification{Peer: p.peer, Message: make([]byte, maxNotificationBytes+1)},
	)
	errs, err := p.a.SendNotifications(ctx, msgs)
	require.NoError(t, err)
	require.Len(t, errs, len(msgs))
	for _, e := range errs[:100] {
		require.NoError(t, e)
	}
	require.ErrorIs(t, errs[100], sdk.ErrInvalidArgument)
	require.ErrorIs(t, errs[101], sdk.ErrInvalidArgument)

	require.Eventually(t, func() bool {
		p.b.mu.Lock()
		defer p.b.mu.Unlock()
		return len(p.b.inbox) == 100
	}, wait, time.Millisecond)
	first, err := p.b.Notifications(ctx, 10)
	require.NoError(t, err)
	require.Len(t, first, 10)
	rest, err := p.b.Notifications(ctx, 0)
	require.NoError(t, err)
	all := append(first, rest...)
	require.Len(t, all, 100)
	for i, n := range all {
		require.Equal(t, sdk.Notification{From: "a", Message: []byte(fmt.Sprint(i))}, n)
	}
}

// TestSendToGonePeer reports REMOTE_DISCONNECT when the peer's socket is
// gone.
func TestSendToGonePeer(t *testing.T) {
	a := open(t, "a", nil)
	b := New()
	require.NoError(t, b.Open(ctx, sdk.OpenRequest{Agent: "b", Params: map[string]string{"dir": t.TempDir()}}))
	id := loadPeer(t, a, b)
	require.NoError(t, b.Close(ctx))
	errs, err := a.SendNotifications(ctx, []sdk.OutboundNotification{{Peer: id, Message: []byte("x")}})
	require.NoError(t, err)
	require.ErrorIs(t, errs[0], sdk.ErrRemoteDisconnect)
	_, _ = a.UnloadPeers(ctx, []sdk.PeerID{id})
}
