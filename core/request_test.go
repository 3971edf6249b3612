package core

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// A read that succeeds lands the producer's bytes, hands the blocks back in
// the report that finishes it, and notifies each producer rank once.
func TestReadLandsBytesAndNotifiesProducer(t *testing.T) {
	r := newRig(t, rigOpts{})
	r.connect("p")
	spec, blocks := r.readSpec("ok", "p", 2)
	spec.NotifyProducer = true
	require.NoError(t, r.read(spec))
	assert.Equal(t, repeat(OwnerTransfer, 2), r.owners(blocks))
	rd := r.reported("ok")
	assert.Equal(t, []RequestID{"ok"}, rd.FinishedReceiving)
	assert.Empty(t, rd.InvalidBlocks)
	assert.Equal(t, repeat(OwnerEngine, 2), r.owners(blocks))
	data, err := os.ReadFile(r.path)
	require.NoError(t, err)
	for k, b := range blocks {
		got := data[int(b.Block)*blockSize : int(b.Block+1)*blockSize]
		assert.True(t, bytes.Equal(got, bytes.Repeat([]byte{byte(k + 1)}, blockSize)), "block of rank %d", k)
	}
	for k, rm := range r.remotes {
		var msgs []string
		require.Eventually(t, func() bool {
			ns, err := rm.tr.Notifications(r.ctx, 0)
			require.NoError(t, err)
			for _, n := range ns {
				msgs = append(msgs, string(n.Message))
			}
			return len(msgs) > 0
		}, wait, time.Millisecond, "rank %d was not notified", k)
		assert.Equal(t, []string{string(ConsumedMessage("ok", tok("ok")))}, msgs)
	}
}

// Seed 001: the first FAILED handle fails the request at once, but the
// failure, and the request's blocks as invalid, are reported only when the
// sibling handle is terminal and released, whether it ends DONE or FAILED.
func TestFailureWaitsForSibling(t *testing.T) {
	skipStallsIfShort(t)
	for _, tc := range []struct {
		name    string
		sibling string
	}{
		{"sibling ends DONE", "stall,post=2,for=1s"},
		{"sibling ends FAILED", "stall,post=2,for=1s;fail,post=2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, rigOpts{local: "fail,post=1;" + tc.sibling})
			r.connect("p")
			spec, blocks := r.readSpec("r", "p", 2)
			require.NoError(t, r.read(spec))
			r.until("the first failure", func(rd Ready) bool { return hasAlert(rd, "transfer_failed") })
			require.Equal(t, 1, r.c.Stats().Live, "the sibling must still run when the failure is seen")
			assert.Empty(t, r.all.Failed, "failure reported while a sibling ran")
			assert.Empty(t, r.all.InvalidBlocks)
			assert.Equal(t, repeat(OwnerTransfer, 2), r.owners(blocks))

			rd := r.reported("r")
			assert.Equal(t, []RequestID{"r"}, failedIDs(rd))
			assert.ElementsMatch(t, blocks, rd.InvalidBlocks, "invalid blocks come with the failure")
			assert.Empty(t, rd.FinishedReceiving)
			assert.Zero(t, r.c.Stats().Live)
		})
	}
}

// Seed 001: a failed handle whose Release fails keeps the request unreported
// and its blocks pinned until the Release succeeds.
func TestFailureWaitsForHandleWhoseReleaseFails(t *testing.T) {
	r := newRig(t, rigOpts{local: "fail,post=1;release-fail,post=1,count=3"})
	r.connect("p")
	spec, blocks := r.readSpec("r", "p", 2)
	require.NoError(t, r.read(spec))
	failures := func() int {
		n := 0
		for _, a := range r.all.Alerts {
			if a.Kind == "transfer_release_failed" {
				n++
			}
		}
		return n
	}
	r.until("three failed releases", func(Ready) bool { return failures() == 3 })
	assert.Empty(t, r.all.Failed, "reported while its failed handle was still held")
	assert.Empty(t, r.all.InvalidBlocks)
	assert.Equal(t, 1, r.c.Stats().Live, "the handle whose release failed is still tracked")
	assert.Equal(t, repeat(OwnerTransfer, 2), r.owners(blocks))
	rd := r.reported("r")
	assert.Equal(t, 3, failures())
	assert.Equal(t, []RequestID{"r"}, failedIDs(rd))
	assert.ElementsMatch(t, blocks, rd.InvalidBlocks)
}

// Seed 001: a read with one failed part never sends the producer the
// consumed notification, even though the other part landed.
func TestMixedReadFailureDoesNotNotifyProducer(t *testing.T) {
	r := newRig(t, rigOpts{local: "fail,post=2"})
	r.connect("p")
	spec, _ := r.readSpec("r", "p", 2)
	spec.NotifyProducer = true
	require.NoError(t, r.read(spec))
	r.reported("r")
	require.Equal(t, []RequestID{"r"}, failedIDs(r.all))
	// A later good read notifies: once its message arrived, an earlier one
	// would have too (delivery is in order per sender).
	spec2, _ := r.readSpec("good", "p", 1)
	spec2.NotifyProducer = true
	require.NoError(t, r.read(spec2))
	r.reported("good")
	var msgs []string
	require.Eventually(t, func() bool {
		ns, err := r.remotes[0].tr.Notifications(r.ctx, 0)
		require.NoError(t, err)
		for _, n := range ns {
			msgs = append(msgs, string(n.Message))
		}
		return len(msgs) > 0
	}, wait, time.Millisecond)
	assert.Equal(t, []string{string(ConsumedMessage("good", tok("good")))}, msgs, "the failed read notified the producer")
}

// Seed 001: a request failed by its handshake, or by its setup, shows its
// invalid blocks only in the report that finishes it, never before.
func TestHandshakeAndSetupFailuresShowInvalidBlocksOnlyInTheirFinishingReport(t *testing.T) {
	t.Run("handshake", func(t *testing.T) {
		r := newRig(t, rigOpts{})
		spec, blocks := r.readSpec("r", "late", 2)
		require.NoError(t, r.read(spec))
		rd := r.poll()
		assert.Empty(t, rd.InvalidBlocks, "nothing is known failed yet")
		assert.Equal(t, 1, r.c.Stats().Waiting)
		r.c.Inbox().HandshakeFailed("late", sdk.Errorf(sdk.CodeRemoteDisconnect, "metadata fetch failed"))
		rd = r.poll()
		assert.Equal(t, []RequestID{"r"}, failedIDs(rd))
		assert.ElementsMatch(t, blocks, rd.InvalidBlocks)
		assert.ErrorIs(t, rd.Failed[0].Reason, sdk.ErrRemoteDisconnect)
		assert.Equal(t, repeat(OwnerEngine, 2), r.owners(blocks))
	})
	t.Run("setup", func(t *testing.T) {
		r := newRig(t, rigOpts{})
		spec, blocks := r.readSpec("r", "p", 2)
		spec.Parts[1].Remote = []uint32{nBlocks + 5} // does not fit the peer, found at setup
		require.NoError(t, r.read(spec))
		r.c.Inbox().HandshakeDone(r.spec("p"))
		assert.Equal(t, repeat(OwnerTransfer, 2), r.owners(blocks), "no block goes back before the report")
		rd := r.poll()
		assert.Equal(t, []RequestID{"r"}, failedIDs(rd))
		assert.ErrorIs(t, rd.Failed[0].Reason, sdk.ErrInvalidArgument)
		assert.ElementsMatch(t, blocks, rd.InvalidBlocks)
		assert.Len(t, r.all.InvalidBlocks, 2, "the invalid blocks were listed once")
	})
}

// Seed 001: a failed push is never reported as finished sending; it keeps
// its state and blocks until its lease expires, then is reported Failed.
func TestFailedPushIsNotReportedDoneSending(t *testing.T) {
	r := newRig(t, rigOpts{local: "fail,post=1"})
	r.connect("p")
	b := r.alloc(1)
	require.NoError(t, r.write(WriteSpec{Request: "w", Token: tok("w"), Peer: "p", Parts: []Part{{Pool: r.pool, Local: b, Rank: 0, Remote: []uint32{0}}}, Consumers: 1, Lease: time.Minute}))
	r.until("the push failed", func(rd Ready) bool { return hasAlert(rd, "transfer_failed") })
	r.until("the failed handle released", func(Ready) bool { return r.c.Stats().Live == 0 })
	r.notifyBack(0, "w") // even a consumer's notification must not finish it
	for i := 0; i < 20; i++ {
		r.poll()
	}
	assert.Empty(t, r.all.FinishedSending)
	assert.Empty(t, r.all.Failed)
	r.now = r.now.Add(time.Minute)
	rd := r.poll()
	assert.Equal(t, []RequestID{"w"}, failedIDs(rd))
	assert.True(t, rd.Failed[0].Sending)
	assert.Empty(t, r.all.FinishedSending)
	assert.Empty(t, rd.InvalidBlocks, "a push's source blocks are intact")
}

// Seed 001: a push whose handles are DONE finishes sending only once every
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
			r := newRig(t, rigOpts{})
			r.connect("p")
			b := r.alloc(2)
			parts := []Part{{Pool: r.pool, Local: b[:1], Rank: 0, Remote: []uint32{3}}, {Pool: r.pool, Local: b[1:], Rank: 1, Remote: []uint32{3}}}
			require.NoError(t, r.write(WriteSpec{Request: "w", Token: tok("w"), Peer: "p", Parts: parts, Consumers: 2, Lease: time.Minute}))
			r.until("both writes released", func(Ready) bool { return r.c.Stats().Live == 0 })
			assert.Empty(t, r.all.FinishedSending, "finished at write-handle time, before any consumer")
			for i, k := range tc.notifies {
				r.notifyBack(k, "w")
				if i < len(tc.notifies)-1 || tc.expire {
					r.until("notification counted", func(Ready) bool { return r.c.sends["w"].notified == int32(i+1) })
					assert.Empty(t, r.all.FinishedSending, "finished before every consumer notified")
				}
			}
			if tc.expire {
				r.now = r.now.Add(time.Minute)
			}
			rd := r.reported("w")
			assert.Equal(t, []RequestID{"w"}, rd.FinishedSending)
			assert.Equal(t, tc.expire, hasAlert(rd, "send_lease_expired"))
			assert.Equal(t, repeat(OwnerEngine, 2), r.owners([]BlockRef{{r.pool, b[0]}, {r.pool, b[1]}}))
		})
	}
}

// Seed 001: a failed push keeps the writer's state (request, counters,
// pinned blocks) until its lease expires.
func TestFailedPushKeepsWriterState(t *testing.T) {
	r := newRig(t, rigOpts{local: "fail,post=1"})
	r.connect("p")
	b := r.alloc(1)
	require.NoError(t, r.write(WriteSpec{Request: "w", Token: tok("w"), Peer: "p", Parts: []Part{{Pool: r.pool, Local: b, Rank: 0, Remote: []uint32{0}}}, Consumers: 1, Lease: time.Minute}))
	r.until("the failed handle released", func(Ready) bool { return r.c.Stats().Live == 0 && r.tr.count("Release") > 0 })
	r.notifyBack(0, "w")
	r.until("notification counted", func(Ready) bool { return r.c.sends["w"] != nil && r.c.sends["w"].notified == 1 })
	assert.Equal(t, 1, r.c.Stats().Requests, "the writer's request was evicted")
	assert.Equal(t, OwnerTransfer, r.c.Owner(BlockRef{r.pool, b[0]}))
	r.now = r.now.Add(59 * time.Second)
	r.poll()
	assert.Equal(t, 1, r.c.Stats().Requests)
}

// ExpectSend: the producer's blocks stay pinned until every consumer
// notified, even when a notification comes before the send is registered.
func TestExpectSendCountsConsumers(t *testing.T) {
	r := newRig(t, rigOpts{})
	b := r.alloc(2)
	r.notifyBack(0, "s") // early: before ExpectSend
	r.until("early notification kept", func(Ready) bool { return r.c.early["s"] != nil })
	require.NoError(t, r.c.ExpectSend(r.now, SendSpec{Request: "s", Token: tok("s"), Pool: r.pool, Blocks: b, Consumers: 2, Lease: time.Minute}))
	r.poll()
	assert.Empty(t, r.all.FinishedSending)
	assert.Equal(t, OwnerTransfer, r.c.Owner(BlockRef{r.pool, b[0]}))
	r.notifyBack(1, "s")
	rd := r.reported("s")
	assert.Equal(t, []RequestID{"s"}, rd.FinishedSending)
	assert.Equal(t, OwnerEngine, r.c.Owner(BlockRef{r.pool, b[0]}))
}
