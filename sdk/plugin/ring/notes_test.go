package ring

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/plugins/fake"
	"github.com/custody-dev/custody/sdk"
)

// TestRingPairSendNotifications: SendNotifications travels through the
// rings with the transport's own answer per item, the message reaches the
// peer, and a batch too large for the submission ring goes over gRPC.
func TestRingPairSendNotifications(t *testing.T) {
	pr := newPair(t)
	p, rpc := pr.calls()

	msgs := []sdk.OutboundNotification{{Peer: pr.peer, Message: []byte("hello")}, {Peer: pr.peer + 99, Message: []byte("nobody")}, {Peer: pr.peer}}
	errs, err := p.SendNotifications(context.Background(), msgs)
	require.NoError(t, err)
	require.Len(t, errs, 3)
	assert.NoError(t, errs[0])
	want, werr := pr.impl.SendNotifications(context.Background(), msgs[1:2])
	require.NoError(t, werr)
	require.Error(t, want[0])
	assert.Equal(t, want[0], errs[1], "the transport's own answer to an unknown peer")
	assert.NoError(t, errs[2], "an empty message is allowed")
	assert.Zero(t, rpc.sends.Load(), "nothing went over gRPC")

	var got []sdk.Notification
	deadline := time.After(10 * time.Second)
	for len(got) < 2 {
		ns, err := p.Notifications(context.Background(), 0)
		require.NoError(t, err)
		got = append(got, ns...)
		if len(got) >= 2 {
			break
		}
		select {
		case <-pr.wake:
		case <-deadline:
			t.Fatalf("the notifications sent through the rings did not arrive; got %v", got)
		}
	}
	assert.Equal(t, []sdk.Notification{{From: "a", Message: []byte("hello")}, {From: "a"}}, got)

	huge := []sdk.OutboundNotification{{Peer: pr.peer, Message: make([]byte, pr.host.half)}}
	_, err = p.SendNotifications(context.Background(), huge)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "this call went over gRPC")
	assert.Equal(t, int32(1), rpc.sends.Load(), "a batch past half the arena goes over gRPC")
	assert.Equal(t, int32(0), pr.kills.Load(), "no fence")
}

// TestRingPairPluginRefusesBadNotifications: a SendNotifications
// submission whose payload does not hold the items it counts stops the
// plugin side, which says why, and the host fences; the transport sends
// nothing.
func TestRingPairPluginRefusesBadNotifications(t *testing.T) {
	pr := newPair(t)
	payload := encodeOutNote(nil, sdk.OutboundNotification{Peer: pr.peer, Message: []byte("cut short")})
	payload = payload[:len(payload)-3]
	_, err := pr.host.submit(context.Background(), "SendNotifications", kindSendNotes, kindSendNotesRes, 1, nil, payload)
	require.ErrorIs(t, err, sdk.ErrPluginShutdown)
	assert.Contains(t, err.Error(), "send-notifications call")
	assert.Contains(t, err.Error(), "notification of 9 bytes")
	assert.Equal(t, int32(1), pr.kills.Load(), "the host fenced")
	ns, err := pr.impl.Notifications(context.Background(), 0)
	require.NoError(t, err)
	assert.Empty(t, ns, "nothing was sent")
}

// countNotes counts the pump's notification drains of a fake.
type countNotes struct {
	*fake.Transport
	drains atomic.Int32
}

func (c *countNotes) Notifications(ctx context.Context, max int) ([]sdk.Notification, error) {
	c.drains.Add(1)
	return c.Transport.Notifications(ctx, max)
}

// TestRingPairWakeReasons: for a transport that says what its wake-ups
// were for (sdk.WakeReasoner), the pump drains notifications only when a
// notification may have come: completions alone cost no drain, and a
// notification still reaches the host without the host asking.
func TestRingPairWakeReasons(t *testing.T) {
	var cn *countNotes
	pr := newPairOf(t, func(tr sdk.Transport) sdk.Transport {
		cn = &countNotes{Transport: tr.(*fake.Transport)}
		return cn
	}, 10*time.Second)
	for range 20 {
		res := pr.post(t, 1)
		require.NoError(t, res[0].Err)
		id := res[0].ID
		require.Eventually(t, func() bool {
			pr.host.drain()
			pr.host.mu.Lock()
			defer pr.host.mu.Unlock()
			return pr.host.known[id].terminal
		}, 10*time.Second, 10*time.Microsecond)
		_, err := pr.host.submit(context.Background(), "Release", kindRelease, kindReleaseRes, 1, []sdk.HandleID{id}, encodeIDs(nil, []sdk.HandleID{id}))
		require.NoError(t, err)
	}
	assert.Zero(t, cn.drains.Load(), "completions alone made the pump drain notifications")

	errs, err := pr.impl.SendNotifications(context.Background(), []sdk.OutboundNotification{{Peer: pr.peer, Message: []byte("hi")}})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	deadline := time.After(10 * time.Second)
	for {
		pr.host.drain()
		pr.host.mu.Lock()
		n := len(pr.host.notes)
		pr.host.mu.Unlock()
		if n > 0 {
			break
		}
		select {
		case <-pr.wake:
		case <-deadline:
			t.Fatal("the notification did not reach the host")
		}
	}
	assert.Positive(t, cn.drains.Load())
}

// TestRingPairPromptAsksNothing: when the transport is a Waker (prompt),
// an empty Notifications or Events answers from the rings without a
// drain call, and what the transport receives still arrives after a
// wake-up; without prompt, an empty Notifications asks the transport.
func TestRingPairPromptAsksNothing(t *testing.T) {
	var cn *countNotes
	pr := newPairOf(t, func(tr sdk.Transport) sdk.Transport {
		cn = &countNotes{Transport: tr.(*fake.Transport)}
		return cn
	}, 10*time.Second)
	p, _ := pr.calls()
	ctx := context.Background()

	ns, err := p.Notifications(ctx, 0)
	require.NoError(t, err)
	assert.Empty(t, ns)
	assert.Equal(t, int32(1), cn.drains.Load(), "without prompt an empty queue asks the transport")

	pr.host.prompt = true
	calls := pr.host.nextCall
	for range 10 {
		ns, err := p.Notifications(ctx, 0)
		require.NoError(t, err)
		assert.Empty(t, ns)
		evs, err := pr.host.Events(ctx, 0)
		require.NoError(t, err)
		assert.Empty(t, evs)
	}
	assert.Equal(t, int32(1), cn.drains.Load(), "prompt: nothing asked")
	assert.Equal(t, calls, pr.host.nextCall, "prompt: no drain call submitted")

	errs, err := pr.impl.SendNotifications(ctx, []sdk.OutboundNotification{{Peer: pr.peer, Message: []byte("hi")}})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-pr.wake:
		case <-deadline:
			t.Fatal("the notification did not arrive")
		}
		ns, err := p.Notifications(ctx, 0)
		require.NoError(t, err)
		if len(ns) > 0 {
			assert.Equal(t, []sdk.Notification{{From: "a", Message: []byte("hi")}}, ns)
			break
		}
	}
}
