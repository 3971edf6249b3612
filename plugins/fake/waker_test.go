package fake

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// clearWake takes a wake-up left waiting on a's channel, if any, so that the
// next one a test receives was sent after this point.
func clearWake(a *Transport) {
	select {
	case <-a.Wake():
	default:
	}
}

// awaitWake waits on a's Wake channel, and after each wake-up asks found
// whether what the test waits for has come; it never looks before the
// first wake-up. The caller cleared the channel (clearWake) before causing
// the change and saw that it had not come yet, so a change that sends no
// wake-up fails the test when the deadline passes: the deadline only bounds
// a failing test, it decides nothing.
func awaitWake(t *testing.T, a *Transport, what string, found func() bool) {
	t.Helper()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		select {
		case <-a.Wake():
		case <-deadline.C:
			t.Fatalf("no wake-up for %s within %v", what, wait)
		}
		if found() {
			return
		}
	}
}

// eventOf returns a found func for awaitWake that drains a's events and
// reports whether h's terminal event came, keeping it in *got.
func eventOf(t *testing.T, a *Transport, h *sdk.HandleID, got *sdk.Event) func() bool {
	return func() bool {
		evs, err := a.Events(ctx, 0)
		require.NoError(t, err)
		for _, e := range evs {
			if e.Handle == *h {
				*got = e
				return true
			}
		}
		return false
	}
}

// TestWakeChannel: Wake is one channel of capacity 1 from New on, the same
// after Open and after Close, and never closed.
func TestWakeChannel(t *testing.T) {
	a := New()
	ch := a.Wake()
	require.Equal(t, 1, cap(ch))
	require.NoError(t, a.Open(ctx, sdk.OpenRequest{Agent: "a", Params: map[string]string{"dir": t.TempDir()}}))
	require.True(t, ch == a.Wake(), "Open changed the channel")
	require.NoError(t, a.Close(ctx))
	require.True(t, ch == a.Wake(), "Close changed the channel")
	select {
	case _, ok := <-ch:
		require.True(t, ok, "Close closed the channel")
	default:
	}
}

// TestWakeTerminal: each way a handle turns terminal (the engine finishes
// it, an injected fault fails it, Cancel stops it, its peer dies) wakes the
// initiator, and the event is there when it looks.
func TestWakeTerminal(t *testing.T) {
	cases := []struct {
		name   string
		params map[string]string
		after  func(p *pair, h sdk.HandleID) // what ends the transfer, after Post
		state  sdk.State
		code   sdk.Code
	}{
		{name: "done", params: map[string]string{"chunk": "4096"}, state: sdk.StateDone},
		{name: "fault", params: map[string]string{"chunk": "4096", "fault": "fail,after=2,code=REMOTE_DISCONNECT"}, state: sdk.StateFailed, code: sdk.CodeRemoteDisconnect},
		{name: "cancel", params: map[string]string{"fault": "stall"}, state: sdk.StateCanceled, code: sdk.CodeCanceled,
			after: func(p *pair, h sdk.HandleID) {
				errs, err := p.a.Cancel(ctx, []sdk.HandleID{h})
				require.NoError(t, err)
				require.NoError(t, errs[0])
			}},
		{name: "peer-loss", params: map[string]string{"fault": "stall"}, state: sdk.StateFailed, code: sdk.CodeRemoteDisconnect,
			after: func(p *pair, _ sdk.HandleID) { p.b.Kill() }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, 64<<10, c.params, nil)
			clearWake(p.a)
			h := postOne(t, p.a, p.whole(sdk.OpWrite, nil))
			if c.after != nil {
				c.after(p, h)
			}
			var got sdk.Event
			awaitWake(t, p.a, "handle "+c.name, eventOf(t, p.a, &h, &got))
			require.Equal(t, c.state, got.State)
			if c.code != 0 {
				require.Equal(t, c.code, sdk.CodeOf(got.Reason), "reason %v", got.Reason)
			}
			release(t, p.a, h)
		})
	}
}

// TestWakeNotification: a notification another agent sends wakes the
// receiver, and it is in the inbox when the receiver looks; so does a
// post's notification.
func TestWakeNotification(t *testing.T) {
	p := newPair(t, 4096, nil, nil)
	var got []sdk.Notification
	inbox := func() bool {
		more, err := p.b.Notifications(ctx, 0)
		require.NoError(t, err)
		got = append(got, more...)
		return len(got) > 0
	}
	clearWake(p.b)
	errs, err := p.a.SendNotifications(ctx, []sdk.OutboundNotification{{Peer: p.peer, Message: []byte("hello")}})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	awaitWake(t, p.b, "a sent notification", inbox)
	require.Equal(t, []sdk.Notification{{From: "a", Message: []byte("hello")}}, got)

	got = nil
	clearWake(p.b)
	h := postOne(t, p.a, p.whole(sdk.OpWrite, []byte("posted")))
	awaitWake(t, p.b, "a post's notification", inbox)
	require.Equal(t, []sdk.Notification{{From: "a", Message: []byte("posted")}}, got)
	terminal(t, p.a, h)
	release(t, p.a, h)
}

// TestWakeDeath: the agent's death (Kill, or a crash fault) wakes it, so
// that a caller sleeping on Wake learns that every call now answers
// PLUGIN_SHUTDOWN.
func TestWakeDeath(t *testing.T) {
	shutdown := func(a *Transport) func() bool {
		return func() bool {
			_, err := a.Events(ctx, 0)
			return sdk.CodeOf(err) == sdk.CodePluginShutdown
		}
	}
	t.Run("kill", func(t *testing.T) {
		a := New()
		require.NoError(t, a.Open(ctx, sdk.OpenRequest{Agent: "a", Params: map[string]string{"dir": t.TempDir()}}))
		clearWake(a)
		a.Kill()
		awaitWake(t, a, "Kill", shutdown(a))
	})
	t.Run("crash", func(t *testing.T) {
		a := New()
		require.NoError(t, a.Open(ctx, sdk.OpenRequest{Agent: "a", Params: map[string]string{"dir": t.TempDir(), "fault": "crash,at=poll"}}))
		clearWake(a)
		_, err := a.Poll(ctx, nil)
		require.ErrorIs(t, err, sdk.ErrPluginShutdown)
		awaitWake(t, a, "a crash fault", shutdown(a))
	})
}

// TestWakeReasons: a wake-up says what it was for. A transfer's end wakes
// its initiator for states and not for notifications; a notification
// wakes its receiver for notifications and not for states, and the
// receiver, draining its inbox only when the reasons say a notification
// came, gets it.
func TestWakeReasons(t *testing.T) {
	p := newPair(t, 4096, nil, nil)
	var states, notes bool
	reasons := func(a *Transport) {
		s, n := a.WakeReasons()
		states, notes = states || s, notes || n
	}
	clearWake(p.a)
	p.a.WakeReasons()
	h := postOne(t, p.a, p.whole(sdk.OpWrite, nil))
	var ev sdk.Event
	found := eventOf(t, p.a, &h, &ev)
	awaitWake(t, p.a, "the write's end", func() bool { reasons(p.a); return found() })
	require.True(t, states, "a transfer's end is a state change")
	require.False(t, notes, "a transfer without a notification brings none")
	release(t, p.a, h)

	var got []sdk.Notification
	inbox := func() bool {
		reasons(p.b)
		if !notes {
			return false
		}
		more, err := p.b.Notifications(ctx, 0)
		require.NoError(t, err)
		got = append(got, more...)
		return len(got) > 0
	}
	clearWake(p.b)
	p.b.WakeReasons()
	states, notes = false, false
	errs, err := p.a.SendNotifications(ctx, []sdk.OutboundNotification{{Peer: p.peer, Message: []byte("hello")}})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	awaitWake(t, p.b, "a notification, by its reason", inbox)
	require.False(t, states, "a notification changes no handle's state")
	require.Equal(t, []sdk.Notification{{From: "a", Message: []byte("hello")}}, got)

	clearWake(p.a)
	p.a.Kill()
	awaitWake(t, p.a, "Kill", func() bool { s, n := p.a.WakeReasons(); return s && n })
}
