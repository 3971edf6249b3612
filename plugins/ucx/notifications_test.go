package ucx_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// TestReadCarriesConsumedNotification: a one-part READ with a
// Notification (the consumer telling the producer its blocks were
// consumed) is one Post; the notification reaches the peer once, after the
// READ's bytes arrived, with no separate SendNotifications call.
func TestReadCarriesConsumedNotification(t *testing.T) {
	for _, tls := range tlsSettings {
		t.Run(tls, func(t *testing.T) {
			const size = 64 << 10
			p := newPair(t, tls, 1<<20)
			for i := range size {
				p.memB[i] = byte(i*13 + 5)
			}
			local, remote := p.dlists(t, 1, size)
			ctx := context.Background()
			res, err := p.a.Post(ctx, []sdk.PostSpec{{Op: sdk.OpRead, Local: local, LocalIndices: []uint32{0}, Remote: remote, RemoteIndices: []uint32{0}, Notification: []byte("consumed")}})
			require.NoError(t, err)
			require.NoError(t, res[0].Err)
			sts := settle(t, p.a, []sdk.HandleID{res[0].ID})
			require.Equal(t, sdk.StateDone, sts[0].State, "reason: %v", sts[0].Reason)
			assert.True(t, bytes.Equal(p.memA[:size], p.memB[:size]), "the READ's bytes arrived")
			var got []sdk.Notification
			require.Eventually(t, func() bool {
				ns, err := p.b.Notifications(ctx, 0)
				require.NoError(t, err)
				got = append(got, ns...)
				return len(got) > 0
			}, 10*time.Second, 50*time.Microsecond)
			require.Len(t, got, 1)
			assert.Equal(t, "a", got[0].From)
			assert.Equal(t, "consumed", string(got[0].Message))
		})
	}
}

// TestNotificationLostToMemoryIsReported: a received notification the
// transport cannot copy (out of memory) is not dropped silently: the
// receiver's next Notifications fails with BACKEND saying how many were
// lost, and the messages after it are still delivered, in order.
func TestNotificationLostToMemoryIsReported(t *testing.T) {
	p := newPair(t, "posix,sysv,cma", 1<<20)
	ctx := context.Background()
	p.b.FailMsgAllocs(1)
	errs, err := p.a.SendNotifications(ctx, []sdk.OutboundNotification{{Peer: p.peer, Message: []byte("lost")}, {Peer: p.peer, Message: []byte("kept")}})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	var lossErr error
	require.Eventually(t, func() bool {
		ns, err := p.b.Notifications(ctx, 0)
		if err != nil {
			lossErr = err
			return true
		}
		require.Empty(t, ns, "a message was delivered before the loss of an earlier one was reported")
		return false
	}, 10*time.Second, 50*time.Microsecond)
	require.ErrorIs(t, lossErr, sdk.ErrBackend)
	assert.Contains(t, lossErr.Error(), "dropped 1 received notifications")
	var got []sdk.Notification
	require.Eventually(t, func() bool {
		ns, err := p.b.Notifications(ctx, 0)
		require.NoError(t, err, "the loss is reported once")
		got = append(got, ns...)
		return len(got) > 0
	}, 10*time.Second, 50*time.Microsecond)
	require.Len(t, got, 1)
	assert.Equal(t, "kept", string(got[0].Message))
}
