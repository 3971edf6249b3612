package core

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// The consumed notification of a one-part read rides with its transfer once
// a notification to the rank went through: no SendNotifications call of its
// own, delivered when the read is DONE, never when it fails; the first one
// to a rank travels on its own (rule 15 watches it), and so does a read of
// several parts.
func TestConsumedNotificationRidesWithAOnePartRead(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 2))

	s.finish("a", s.readNotify("a"))
	require.Len(t, s.d.sent, 1, "the first notification to the rank travels on its own")
	assert.Empty(t, s.d.carried)

	sends := s.d.count(WorkSendNotifications)
	s.finish("b", s.readNotify("b"))
	assert.Equal(t, sends, s.d.count(WorkSendNotifications), "no call of its own")
	require.Equal(t, [][]byte{ConsumedMessage("b", tok("b"))}, s.d.carried, "it rode with the read and arrived once the read was DONE")

	// A read that fails carries nothing and sends nothing.
	h := s.readNotify("c")
	s.d.set(h, sdk.StateFailed, sdk.Errorf(sdk.CodeRemoteDisconnect, "double: lost"))
	rd := s.poll()
	require.Equal(t, []RequestID{"c"}, failedIDs(rd))
	assert.Len(t, s.d.carried, 1)
	assert.Len(t, s.d.sent, 1)

	// Two parts, on two ranks: one notification per rank, on their own; the
	// second rank's is its first.
	rides := s.d.rides
	require.NoError(t, s.c.Read(s.now, ReadSpec{Request: "d", Token: tok("d"), Peer: "p", NotifyProducer: true,
		Parts: []Part{{Pool: s.pool, Local: s.alloc(1), Rank: 0, Remote: []uint32{0}}, {Pool: s.pool, Local: s.alloc(1), Rank: 1, Remote: []uint32{1}}}}))
	s.settle()
	for _, h := range s.d.live() {
		s.d.set(h, sdk.StateDone, nil)
	}
	require.Contains(t, s.poll().FinishedReceiving, RequestID("d"))
	assert.Equal(t, rides, s.d.rides, "a read of two parts carries no notification")
	assert.Len(t, s.d.sent, 3)
	assert.Len(t, s.d.carried, 1)
}

// alloc takes n blocks of the rig's pool.
func (s *srig) alloc(n int) []uint32 {
	s.t.Helper()
	b, err := s.c.Alloc(s.pool, n)
	require.NoError(s.t, err)
	return b
}

// A ridden consumed notification is delivered at its transfer's DONE, so
// the read may still be reported failed after it: here its peer is removed
// between the DONE and the round that would have seen it. The producer was
// told at the DONE, when nothing read its blocks any more, which is what
// makes its reuse safe; the read fails with its block invalid, and nothing
// more is sent to the producer (engine API, notify_producer).
func TestARiddenNotificationMayPrecedeAFailedRead(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 1))
	s.finish("a", s.readNotify("a")) // the rank is proven: the next rides

	h := s.readNotify("b")
	s.d.set(h, sdk.StateDone, nil)
	require.Equal(t, [][]byte{ConsumedMessage("b", tok("b"))}, s.d.carried, "delivered at the DONE")
	require.NoError(t, s.c.RemovePeer(s.now, "p"))
	rd := s.reported("b")
	require.Equal(t, []RequestID{"b"}, failedIDs(rd))
	assert.ErrorIs(t, rd.Failed[0].Reason, ErrPeerRemoved)
	assert.Len(t, rd.Failed[0].Invalid, 1, "the consumer's block is invalid, as for any failed read")
	assert.Len(t, s.d.sent, 1, "nothing more is sent to the producer")
	assert.Len(t, s.d.carried, 1)
}
