package ucx_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/plugins/ucx"
	"github.com/custody-dev/custody/sdk"
)

// wakeDeadline only bounds a test that would otherwise hang: the tests
// below decide by wake-ups, never by time.
const wakeDeadline = 30 * time.Second

// awaitWake waits for one wake-up on tr's channel, failing after
// wakeDeadline.
func awaitWake(t *testing.T, tr *ucx.Transport, what string) {
	t.Helper()
	select {
	case <-tr.Wake():
	case <-time.After(wakeDeadline):
		t.Fatalf("no wake-up in %v: %s", wakeDeadline, what)
	}
}

// TestWakeAfterPostSeesDone: a WRITE posted while nobody polls (the
// progress threads sleep, their safety net an hour away) wakes the
// initiator's Wake channel, and the caller, looking only after wake-ups
// and only at Events (which drives no progress), sees DONE.
func TestWakeAfterPostSeesDone(t *testing.T) {
	for _, tls := range tlsSettings {
		t.Run(tls, func(t *testing.T) {
			defer ucx.SetSleepMax(time.Hour)()
			const size = 256 << 10
			p := newPair(t, tls, size)
			for i := range size {
				p.memA[i] = byte(i*17 + 3)
			}
			local, remote := p.dlists(t, 1, size)
			ctx := context.Background()
			res, err := p.a.Post(ctx, []sdk.PostSpec{{Op: sdk.OpWrite, Local: local, LocalIndices: []uint32{0}, Remote: remote, RemoteIndices: []uint32{0}}})
			require.NoError(t, err)
			require.NoError(t, res[0].Err)
			var ev *sdk.Event
			for ev == nil {
				awaitWake(t, p.a, "the WRITE's completion")
				evs, err := p.a.Events(ctx, 0)
				require.NoError(t, err)
				for i := range evs {
					if evs[i].Handle == res[0].ID {
						ev = &evs[i]
					}
				}
			}
			require.Equal(t, sdk.StateDone, ev.State, "reason: %v", ev.Reason)
			assert.True(t, bytes.Equal(p.memA, p.memB), "the bytes arrived")
			settle(t, p.a, []sdk.HandleID{res[0].ID})
		})
	}
}

// TestWakeOnNotification: a notification from another agent wakes the
// receiver's Wake channel, and the receiver, looking only after
// wake-ups, gets it.
func TestWakeOnNotification(t *testing.T) {
	for _, tls := range tlsSettings {
		t.Run(tls, func(t *testing.T) {
			defer ucx.SetSleepMax(time.Hour)()
			p := newPair(t, tls, 4096)
			ctx := context.Background()
			errs, err := p.a.SendNotifications(ctx, []sdk.OutboundNotification{{Peer: p.peer, Message: []byte("ready")}})
			require.NoError(t, err)
			require.NoError(t, errs[0])
			var got []sdk.Notification
			for len(got) == 0 {
				awaitWake(t, p.b, "the notification's arrival")
				ns, err := p.b.Notifications(ctx, 0)
				require.NoError(t, err)
				got = append(got, ns...)
			}
			require.Len(t, got, 1)
			assert.Equal(t, "a", got[0].From)
			assert.Equal(t, "ready", string(got[0].Message))
		})
	}
}

// TestWakeChannelLifetime: Wake is one channel from New to after Close,
// never closed, and Close sends a wake-up (every call now answers that
// the agent is closed). goleak (TestMain) checks that the goroutine behind
// it ended.
func TestWakeChannelLifetime(t *testing.T) {
	ctx := context.Background()
	tr := ucx.New()
	ch := tr.Wake()
	require.NoError(t, tr.Open(ctx, sdk.OpenRequest{Agent: "w"}))
	require.Equal(t, ch, tr.Wake(), "the same channel after Open")
	for drained := false; !drained; {
		select {
		case <-ch:
		default:
			drained = true
		}
	}
	require.NoError(t, tr.Close(ctx))
	select {
	case _, ok := <-ch:
		require.True(t, ok, "the channel is never closed")
	default:
		t.Fatal("Close sent no wake-up")
	}
	require.Equal(t, ch, tr.Wake(), "the same channel after Close")
	select {
	case <-ch:
		t.Fatal("a second wake-up after Close, with nothing changed since")
	default:
	}
}

// TestWakeReasons: a wake-up says what it was for. A WRITE's completion
// wakes the initiator for states and not for notifications; a
// notification wakes the receiver for notifications, and the receiver,
// draining its notifications only when the reasons say one came, gets it.
func TestWakeReasons(t *testing.T) {
	for _, tls := range tlsSettings {
		t.Run(tls, func(t *testing.T) {
			defer ucx.SetSleepMax(time.Hour)()
			p := newPair(t, tls, 4096)
			ctx := context.Background()
			local, remote := p.dlists(t, 1, 4096)
			p.a.WakeReasons()
			res, err := p.a.Post(ctx, []sdk.PostSpec{{Op: sdk.OpWrite, Local: local, LocalIndices: []uint32{0}, Remote: remote, RemoteIndices: []uint32{0}}})
			require.NoError(t, err)
			require.NoError(t, res[0].Err)
			var states, notes, done bool
			for !done {
				awaitWake(t, p.a, "the WRITE's completion")
				s, n := p.a.WakeReasons()
				states, notes = states || s, notes || n
				evs, err := p.a.Events(ctx, 0)
				require.NoError(t, err)
				for _, ev := range evs {
					done = done || ev.Handle == res[0].ID
				}
			}
			require.True(t, states, "a completion is a state change")
			require.False(t, notes, "a WRITE without a notification brings none")
			settle(t, p.a, []sdk.HandleID{res[0].ID})

			p.b.WakeReasons()
			errs, err := p.a.SendNotifications(ctx, []sdk.OutboundNotification{{Peer: p.peer, Message: []byte("ready")}})
			require.NoError(t, err)
			require.NoError(t, errs[0])
			var got []sdk.Notification
			for len(got) == 0 {
				awaitWake(t, p.b, "the notification's arrival, by its reason")
				if _, n := p.b.WakeReasons(); !n {
					continue
				}
				ns, err := p.b.Notifications(ctx, 0)
				require.NoError(t, err)
				got = append(got, ns...)
			}
			require.Len(t, got, 1)
			assert.Equal(t, "ready", string(got[0].Message))
		})
	}
}
