package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// A read that succeeds reads each rank's block into its own, hands the
// blocks back in the report that finishes it, and notifies each producer
// rank once. (host/coreonfake's copy over the real fake checks the bytes
// that land.)
func TestReadLandsBytesAndNotifiesProducer(t *testing.T) {
	s := openSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 2))
	var posts []sdk.PostSpec
	s.tamper = func(w Work, _ *Result) {
		if w.Kind == WorkPost {
			posts = append(posts, w.Posts...)
		}
	}
	spec, blocks := s.readSpec("ok", "p", 2)
	spec.NotifyProducer = true
	require.NoError(t, s.do(s.c.Read(s.now, spec)))
	assert.Equal(t, repeat(OwnerTransfer, 2), s.owners(blocks))
	require.Len(t, posts, 2)
	for _, p := range posts {
		agent := s.d.peerNames[s.d.dlistPeer[p.Remote]]
		k := int(agent[len(agent)-1] - '0')
		assert.Equal(t, sdk.OpRead, p.Op)
		assert.Equal(t, []uint32{blocks[k].Block}, p.LocalIndices, "rank %d's block goes into its own", k)
		assert.Equal(t, []uint32{uint32(k)}, p.RemoteIndices, "rank %d's block", k)
	}
	s.done()
	rd := s.reported("ok")
	assert.Equal(t, []RequestID{"ok"}, rd.FinishedReceiving)
	assert.Empty(t, rd.InvalidBlocks)
	assert.Equal(t, repeat(OwnerEngine, 2), s.owners(blocks))
	for _, agent := range []string{"p0", "p1"} {
		assert.Equal(t, []string{string(ConsumedMessage("ok", tok("ok")))}, s.d.deliveredTo(agent), "rank %s", agent)
	}
}

// Rule 3, a request fails only after its siblings drain: the first FAILED
// handle fails the request at once, but the failure, and the request's
// blocks as invalid, are reported only when the sibling handle is terminal
// and released, whether it ends DONE or FAILED.
func TestFailureWaitsForSibling(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sibling sdk.State
	}{
		{"sibling ends DONE", sdk.StateDone},
		{"sibling ends FAILED", sdk.StateFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openSrig(t, Config{}, nil)
			s.connect(peerSpec("p", 2))
			blocks := s.read("r", "p", 2)
			hs := s.d.live()
			s.d.set(hs[0], sdk.StateFailed, errBackend)
			rd := s.poll()
			require.True(t, hasAlert(rd, "transfer_failed"), "the first failure")
			require.Equal(t, 1, s.c.Stats().Live, "the sibling must still run when the failure is seen")
			assert.Empty(t, s.all.Failed, "failure reported while a sibling ran")
			assert.Empty(t, s.all.InvalidBlocks)
			assert.Equal(t, repeat(OwnerTransfer, 2), s.owners(blocks))

			var reason error
			if tc.sibling == sdk.StateFailed {
				reason = errBackend
			}
			s.d.set(hs[1], tc.sibling, reason)
			rd = s.reported("r")
			assert.Equal(t, []RequestID{"r"}, failedIDs(rd))
			assert.ElementsMatch(t, blocks, rd.InvalidBlocks, "invalid blocks come with the failure")
			assert.Empty(t, rd.FinishedReceiving)
			assert.Zero(t, s.c.Stats().Live)
		})
	}
}

// Rule 2, a failed Release retains: a failed handle whose Release fails
// keeps the request unreported and its blocks pinned until the Release
// succeeds, retried each round.
func TestFailureWaitsForHandleWhoseReleaseFails(t *testing.T) {
	s := openSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 2))
	blocks := s.read("r", "p", 2)
	hs := s.d.live()
	s.d.failHandle(WorkRelease, hs[0], errBackend, 3)
	s.d.set(hs[0], sdk.StateFailed, errBackend)
	s.d.set(hs[1], sdk.StateDone, nil)
	failures := func() int {
		n := 0
		for _, a := range s.all.Alerts {
			if a.Kind == "transfer_release_failed" {
				n++
			}
		}
		return n
	}
	for range 3 {
		s.poll()
	}
	require.Equal(t, 3, failures(), "three failed releases, one a round")
	assert.Empty(t, s.all.Failed, "reported while its failed handle was still held")
	assert.Empty(t, s.all.InvalidBlocks)
	assert.Equal(t, 1, s.c.Stats().Live, "the handle whose release failed is still tracked")
	assert.Equal(t, repeat(OwnerTransfer, 2), s.owners(blocks))
	rd := s.reported("r")
	assert.Equal(t, 3, failures())
	assert.Equal(t, []RequestID{"r"}, failedIDs(rd))
	assert.ElementsMatch(t, blocks, rd.InvalidBlocks)
}

// Rule 3 with the notification protocol: a read with one failed part never
// sends the producer the consumed notification, even though the other part
// landed; a later good read's is the only one any rank receives.
func TestMixedReadFailureDoesNotNotifyProducer(t *testing.T) {
	s := openSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 2))
	spec, _ := s.readSpec("r", "p", 2)
	spec.NotifyProducer = true
	require.NoError(t, s.do(s.c.Read(s.now, spec)))
	hs := s.d.live()
	s.d.set(hs[0], sdk.StateDone, nil)
	s.d.set(hs[1], sdk.StateFailed, errBackend)
	s.reported("r")
	require.Equal(t, []RequestID{"r"}, failedIDs(s.all))
	spec2, _ := s.readSpec("good", "p", 1)
	spec2.NotifyProducer = true
	require.NoError(t, s.do(s.c.Read(s.now, spec2)))
	s.done()
	s.reported("good")
	assert.Equal(t, []string{string(ConsumedMessage("good", tok("good")))}, s.d.deliveredTo("p0"), "the failed read notified the producer")
	assert.Empty(t, s.d.deliveredTo("p1"), "the failed read notified the producer")
}

// Rule 3: a request failed by its handshake, or by its setup, shows its
// invalid blocks only in the report that finishes it, never before.
func TestHandshakeAndSetupFailuresShowInvalidBlocksOnlyInTheirFinishingReport(t *testing.T) {
	t.Run("handshake", func(t *testing.T) {
		s := openSrig(t, Config{}, nil)
		blocks := s.read("r", "late", 2)
		rd := s.poll()
		assert.Empty(t, rd.InvalidBlocks, "nothing is known failed yet")
		assert.Equal(t, 1, s.c.Stats().Waiting)
		s.c.Inbox().HandshakeFailed("late", sdk.Errorf(sdk.CodeRemoteDisconnect, "metadata fetch failed"))
		rd = s.poll()
		assert.Equal(t, []RequestID{"r"}, failedIDs(rd))
		assert.ElementsMatch(t, blocks, rd.InvalidBlocks)
		assert.ErrorIs(t, rd.Failed[0].Reason, sdk.ErrRemoteDisconnect)
		assert.Equal(t, repeat(OwnerEngine, 2), s.owners(blocks))
	})
	t.Run("setup", func(t *testing.T) {
		s := openSrig(t, Config{}, nil)
		spec, blocks := s.readSpec("r", "p", 2)
		spec.Parts[1].Remote = []uint32{srigBlocks + 5} // does not fit the peer, found at setup
		require.NoError(t, s.do(s.c.Read(s.now, spec)))
		s.c.Inbox().HandshakeDone(peerSpec("p", 2))
		assert.Equal(t, repeat(OwnerTransfer, 2), s.owners(blocks), "no block goes back before the report")
		rd := s.poll()
		assert.Equal(t, []RequestID{"r"}, failedIDs(rd))
		assert.ErrorIs(t, rd.Failed[0].Reason, sdk.ErrInvalidArgument)
		assert.ElementsMatch(t, blocks, rd.InvalidBlocks)
		assert.Len(t, s.all.InvalidBlocks, 2, "the invalid blocks were listed once")
	})
}

// Rule 4, a push is done only when its consumers say so: a failed push is
// never reported as finished sending, even on a consumer's notification; it
// keeps its state and blocks until its lease expires, then is reported
// Failed.
func TestFailedPushIsNotReportedDoneSending(t *testing.T) {
	s := openSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 2))
	b := s.alloc(1)
	require.NoError(t, s.do(s.c.Write(s.now, WriteSpec{Request: "w", Token: tok("w"), Peer: "p", Parts: []Part{{Pool: s.pool, Local: b, Rank: 0, Remote: []uint32{0}}}, Consumers: 1, Lease: time.Minute})))
	s.d.set(s.d.live()[0], sdk.StateFailed, errBackend)
	rd := s.poll()
	require.True(t, hasAlert(rd, "transfer_failed"), "the push failed")
	require.Zero(t, s.c.Stats().Live, "the failed handle released")
	s.sendFrom(0, ConsumedMessage("w", tok("w"))) // even a consumer's notification must not finish it
	for range 20 {
		s.poll()
	}
	assert.Empty(t, s.all.FinishedSending)
	assert.Empty(t, s.all.Failed)
	s.now = s.now.Add(time.Minute)
	rd = s.poll()
	assert.Equal(t, []RequestID{"w"}, failedIDs(rd))
	assert.True(t, rd.Failed[0].Sending)
	assert.Empty(t, s.all.FinishedSending)
	assert.Empty(t, rd.InvalidBlocks, "a push's source blocks are intact")
}

// Rule 4: a push whose handles are DONE finishes sending only once every
// consumer notified, or when its lease expires.
func TestCompletedPushWaitsForConsumerNotification(t *testing.T) {
	for _, tc := range []struct {
		name     string
		notifies []int // remote ranks that notify
		expire   bool
	}{
		{"both consumers notify", []int{0, 1}, false},
		{"one consumer notifies, the lease expires", []int{0}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openSrig(t, Config{}, nil)
			s.connect(peerSpec("p", 2))
			b := s.alloc(2)
			parts := []Part{{Pool: s.pool, Local: b[:1], Rank: 0, Remote: []uint32{3}}, {Pool: s.pool, Local: b[1:], Rank: 1, Remote: []uint32{3}}}
			require.NoError(t, s.do(s.c.Write(s.now, WriteSpec{Request: "w", Token: tok("w"), Peer: "p", Parts: parts, Consumers: 2, Lease: time.Minute})))
			s.done()
			s.poll()
			require.Zero(t, s.c.Stats().Live, "both writes released")
			assert.Empty(t, s.all.FinishedSending, "finished at write-handle time, before any consumer")
			for i, k := range tc.notifies {
				s.sendFrom(k, ConsumedMessage("w", tok("w")))
				if i < len(tc.notifies)-1 || tc.expire {
					s.poll()
					require.Equal(t, int32(i+1), s.c.sends["w"].notified, "notification counted")
					assert.Empty(t, s.all.FinishedSending, "finished before every consumer notified")
				}
			}
			if tc.expire {
				s.now = s.now.Add(time.Minute)
			}
			rd := s.reported("w")
			assert.Equal(t, []RequestID{"w"}, rd.FinishedSending)
			assert.Equal(t, tc.expire, hasAlert(rd, "send_lease_expired"))
			assert.Equal(t, repeat(OwnerEngine, 2), s.owners([]BlockRef{{s.pool, b[0]}, {s.pool, b[1]}}))
		})
	}
}

// Rule 4: a failed push keeps the writer's state (request, counters,
// pinned blocks) until its lease expires.
func TestFailedPushKeepsWriterState(t *testing.T) {
	s := openSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 2))
	b := s.alloc(1)
	require.NoError(t, s.do(s.c.Write(s.now, WriteSpec{Request: "w", Token: tok("w"), Peer: "p", Parts: []Part{{Pool: s.pool, Local: b, Rank: 0, Remote: []uint32{0}}}, Consumers: 1, Lease: time.Minute})))
	s.d.set(s.d.live()[0], sdk.StateFailed, errBackend)
	s.poll()
	require.True(t, s.c.Stats().Live == 0 && s.d.count(WorkRelease) > 0, "the failed handle released")
	s.sendFrom(0, ConsumedMessage("w", tok("w")))
	s.poll()
	require.True(t, s.c.sends["w"] != nil && s.c.sends["w"].notified == 1, "notification counted")
	assert.Equal(t, 1, s.c.Stats().Requests, "the writer's request was evicted")
	assert.Equal(t, OwnerTransfer, s.c.Owner(BlockRef{s.pool, b[0]}))
	s.now = s.now.Add(59 * time.Second)
	s.poll()
	assert.Equal(t, 1, s.c.Stats().Requests)
}

// Rule 4, ExpectSend: the producer's blocks stay pinned until every
// consumer notified, even when a notification comes before the send is
// registered.
func TestExpectSendCountsConsumers(t *testing.T) {
	s := openSrig(t, Config{}, nil)
	b := s.alloc(2)
	s.sendFrom(0, ConsumedMessage("s", tok("s"))) // early: before ExpectSend
	s.poll()
	require.NotNil(t, s.c.early["s"], "early notification kept")
	require.NoError(t, s.c.ExpectSend(s.now, SendSpec{Request: "s", Token: tok("s"), Pool: s.pool, Blocks: b, Consumers: 2, Lease: time.Minute}))
	s.poll()
	assert.Empty(t, s.all.FinishedSending)
	assert.Equal(t, OwnerTransfer, s.c.Owner(BlockRef{s.pool, b[0]}))
	s.sendFrom(1, ConsumedMessage("s", tok("s")))
	rd := s.reported("s")
	assert.Equal(t, []RequestID{"s"}, rd.FinishedSending)
	assert.Equal(t, OwnerEngine, s.c.Owner(BlockRef{s.pool, b[0]}))
}
