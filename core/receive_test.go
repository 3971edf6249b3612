package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// A push receive, scripted: it finishes on its producers' written
// notifications, then tells them it holds the bytes; one whose lease
// expires first keeps its blocks until the producer is proven stopped
// (docs/fencing.md): a fence where the fence covers incoming transfers and the
// policy fences, else quarantine, or reuse with an error where the policy
// says so. A written notification that comes after all proves the writes
// over, and ends the wait for the fence.
func TestPushReceiveOutcomes(t *testing.T) {
	type outcome int
	const (
		finished outcome = iota
		fenced
		quarantined
		reused
	)
	for _, tc := range []struct {
		name   string
		scope  sdk.FenceScope
		policy EscalationPolicy
		late   bool // the written notification comes after the lease
		want   outcome
	}{
		{"written in time", sdk.FenceInitiatedAndIncoming, EscalateFence, false, finished},
		{"lease, incoming fence", sdk.FenceInitiatedAndIncoming, EscalateFence, false, fenced},
		{"lease, incoming fence, written late", sdk.FenceInitiatedAndIncoming, EscalateFence, true, finished},
		{"lease, initiated fence", sdk.FenceInitiated, EscalateFence, false, quarantined},
		{"lease, quarantine policy", sdk.FenceInitiatedAndIncoming, EscalateQuarantine, false, quarantined},
		{"lease, reuse policy", sdk.FenceInitiated, EscalateReleaseAndReuse, false, reused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSrig(t, Config{Escalation: tc.policy}, func(d *double) { d.desc.FenceScope = tc.scope })
			s.connect(peerSpec("p", 2))
			b := mustAlloc(t, s, 2)
			blocks := []BlockRef{{s.pool, b[0]}, {s.pool, b[1]}}
			require.NoError(t, s.c.ExpectReceive(s.now, RecvSpec{Request: "x", Token: tok("x"), Peer: "p", Pool: s.pool, Blocks: b, Producers: 2, Lease: time.Minute}))
			written := func(from string) {
				s.d.inbox = append(s.d.inbox, sdk.Notification{From: from, Message: WrittenMessage("x", tok("x"))})
			}
			written("p1")
			written("p1") // a producer counts once
			rd := s.poll()
			assert.Zero(t, s.seen["x"], "finished on one of two producers: %+v", rd)
			assert.Equal(t, repeat(OwnerTransfer, 2), s.owners(blocks))

			if tc.want == finished && !tc.late {
				written("p0")
				rd = s.poll()
				assert.Equal(t, []RequestID{"x"}, rd.FinishedReceiving)
				assert.Equal(t, repeat(OwnerEngine, 2), s.owners(blocks))
				var sent []string
				for _, n := range s.d.sent {
					sent = append(sent, string(n.Message))
				}
				assert.Equal(t, []string{string(ConsumedMessage("x", tok("x"))), string(ConsumedMessage("x", tok("x")))}, sent, "the consumed notification goes back to both producers")
				return
			}
			s.now = s.now.Add(time.Minute)
			rd = s.poll()
			switch {
			case tc.want == fenced || tc.late:
				assert.Equal(t, []Epoch{1}, rd.Fence, "a fence is what stops the producer")
				assert.True(t, hasAlert(rd, "receive_fence"))
				assert.Zero(t, s.seen["x"], "reported before the producer is proven stopped")
				assert.Equal(t, repeat(OwnerTransfer, 2), s.owners(blocks))
				if tc.late {
					written("p0")
					rd = s.poll()
					assert.Equal(t, []RequestID{"x"}, failedIDs(rd), "the lease expired: the receive failed")
					assert.ElementsMatch(t, blocks, rd.InvalidBlocks, "every producer reported its writes: the blocks are safe")
					return
				}
				s.kill(1)
				rd = s.poll()
				assert.Equal(t, []RequestID{"x"}, failedIDs(rd))
				assert.ElementsMatch(t, blocks, rd.InvalidBlocks)
				assert.Equal(t, repeat(OwnerEngine, 2), s.owners(blocks))
			case tc.want == quarantined:
				assert.Empty(t, rd.Fence)
				assert.Equal(t, []RequestID{"x"}, failedIDs(rd))
				assert.ErrorIs(t, rd.Failed[0].Reason, ErrLeaseExpired)
				assert.ElementsMatch(t, blocks, rd.Quarantined)
				assert.Empty(t, rd.InvalidBlocks)
				assert.Equal(t, repeat(OwnerQuarantined, 2), s.owners(blocks))
				assert.True(t, hasAlert(rd, "receive_quarantined"))
			case tc.want == reused:
				assert.Equal(t, []RequestID{"x"}, failedIDs(rd))
				assert.ElementsMatch(t, blocks, rd.InvalidBlocks)
				assert.Equal(t, repeat(OwnerEngine, 2), s.owners(blocks))
				assert.True(t, hasAlert(rd, "receive_blocks_reused"))
			}
			assert.Empty(t, s.d.sent, "a failed receive sent the consumed notification")
		})
	}
}

// A finished receive tells the producer ranks that wrote (sent a written
// notification) that it holds the bytes, not the others; each send that
// fails is an Alert of its own, and one that succeeds none, however the
// sends are batched.
func TestConsumedNotificationGoesToTheRanksThatWrote(t *testing.T) {
	s := newSrig(t, Config{Batch: 1}, nil)
	s.connect(peerSpec("p", 3))
	ranks := map[sdk.PeerID]string{}
	for id, name := range s.d.peers {
		ranks[id] = name
	}
	b := mustAlloc(t, s, 1)
	require.NoError(t, s.c.ExpectReceive(s.now, RecvSpec{Request: "x", Token: tok("x"), Peer: "p", Pool: s.pool, Blocks: b, Producers: 2, Lease: time.Minute}))
	for _, from := range []string{"p2", "p1"} {
		s.d.inbox = append(s.d.inbox, sdk.Notification{From: from, Message: WrittenMessage("x", tok("x"))})
	}
	s.d.failItem(WorkSendNotifications, 0, errBackend, 1) // the first of the two sends
	rd := s.poll()
	require.Equal(t, []RequestID{"x"}, rd.FinishedReceiving)
	var to []string
	for _, n := range s.d.sent {
		to = append(to, ranks[n.Peer])
	}
	require.Len(t, to, 1, "one send failed, one went out")
	assert.Contains(t, []string{"p1", "p2"}, to[0], "the consumed notification went to a rank that did not write")
	n := 0
	for _, a := range rd.Alerts {
		if a.Kind == "consumed_notification_failed" {
			n++
			assert.ErrorIs(t, a.Err, errBackend, "the alert names the send's error")
		}
	}
	assert.Equal(t, 1, n, "one alert per failed send, none for one that went out: %v", rd.Alerts)
}
