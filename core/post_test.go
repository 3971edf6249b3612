package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// A Post that fails as a whole posted nothing: the request fails, its
// blocks come back invalid in the report, and the peer holds no reference
// for it, so removing the peer releases its native resources at once.
func TestPostFailingAsAWholeFailsTheRequest(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 2))
	s.d.failWhole(WorkPost, errBackend, 1)
	blocks := s.read("r", "p", 2)
	rd := s.poll()
	require.Equal(t, []RequestID{"r"}, failedIDs(rd))
	assert.Equal(t, sdk.CodeBackend, sdk.CodeOf(rd.Failed[0].Reason))
	assert.ElementsMatch(t, blocks, rd.InvalidBlocks)
	assert.Equal(t, repeat(OwnerEngine, 2), s.owners(blocks))
	assert.Empty(t, rd.Fence, "a refused post needs no fence")

	require.NoError(t, s.c.RemovePeer(s.now, "p"))
	s.settle()
	s.poll()
	assert.Zero(t, s.d.held().Peers, "the peer is unloaded: nothing of it runs")
	assert.Equal(t, uint64(1), s.d.held().Dlists, "only the pool's dlist is left")
}

// A Post whose outcome is unknown (it timed out after it took effect) may
// have started transfers core cannot name: the request's blocks stay
// pinned, unreported, until its epoch is fenced; then it fails.
func TestPostOfUnknownOutcomeHoldsUntilTheFence(t *testing.T) {
	for _, code := range []sdk.Code{sdk.CodeTimeout, sdk.CodePluginShutdown} {
		t.Run(code.String(), func(t *testing.T) {
			s := newSrig(t, Config{}, nil)
			s.connect(peerSpec("p", 1))
			s.d.failWhole(WorkPost, sdk.Errorf(code, "double: injected"), 1)
			s.d.faults[0].applied = true
			blocks := s.read("r", "p", 1)
			rd := s.poll()
			assert.Equal(t, []Epoch{1}, rd.Fence, "no fence asked for a post of unknown outcome")
			assert.True(t, hasAlert(rd, "post_outcome_unknown"))
			for range 3 {
				rd = s.poll()
				assert.Zero(t, s.seen["r"], "reported before the fence: %+v", rd)
				assert.Equal(t, repeat(OwnerTransfer, 1), s.owners(blocks), "handed back while a transfer may run")
			}
			s.kill(1)
			rd = s.poll()
			require.Equal(t, []RequestID{"r"}, failedIDs(rd))
			assert.ErrorIs(t, rd.Failed[0].Reason, ErrUnknownOutcome)
			assert.Equal(t, repeat(OwnerEngine, 1), s.owners(blocks))
		})
	}
}

// A Post that answers fewer results than it was given posts: the parts
// without a result fail the request (as a failed post would), the ones with
// one run and are drained before the failure is reported.
func TestPostWithMissingResultsFailsThoseParts(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 2))
	spec := ReadSpec{Request: "r", Token: tok("r"), Peer: "p"}
	var blocks []BlockRef
	for k := range 2 {
		b := mustAlloc(t, s, 1)
		spec.Parts = append(spec.Parts, Part{Pool: s.pool, Local: b, Rank: k, Remote: []uint32{uint32(k)}})
		blocks = append(blocks, BlockRef{s.pool, b[0]})
	}
	require.NoError(t, s.c.Read(s.now, spec))
	rd := s.c.Ready()
	require.Len(t, rd.Work, 1)
	require.Equal(t, WorkPost, rd.Work[0].Kind)
	res, err := s.d.exec(rd.Work[0])
	require.NoError(t, err)
	require.Len(t, res.Posts, 2)
	res.Posts = res.Posts[:1] // the transport lost the second result
	s.c.Done(rd.Work[0].ID, res, nil)
	s.settle()
	assert.Equal(t, 1, s.c.Stats().Live, "the part with a result runs")
	assert.True(t, hasAlert(s.stash, "transfer_setup_failed"))

	rd = s.poll()
	assert.Zero(t, s.seen["r"], "failure reported while a part runs")
	assert.Equal(t, repeat(OwnerTransfer, 2), s.owners(blocks))
	s.d.set(s.d.live()[0], sdk.StateDone, nil)
	rd = s.poll()
	require.Equal(t, []RequestID{"r"}, failedIDs(rd))
	assert.Contains(t, rd.Failed[0].Reason.Error(), "1 results for 2 posts")
	assert.ElementsMatch(t, blocks, rd.InvalidBlocks)
}

// A Post still outstanding when its epoch is fenced posted nothing that
// still runs: the process died with it. The request fails at once and its
// blocks come back.
func TestPostOutstandingAtAFenceFailsTheRequest(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 1))
	b := mustAlloc(t, s, 1)
	require.NoError(t, s.c.Read(s.now, ReadSpec{Request: "r", Token: tok("r"), Peer: "p", Parts: []Part{{Pool: s.pool, Local: b, Remote: []uint32{0}}}}))
	rd := s.c.Ready()
	require.Len(t, rd.Work, 1)
	s.kill(1) // before the Post is run
	s.c.Done(rd.Work[0].ID, Result{}, sdk.Errorf(sdk.CodePluginShutdown, "epoch 1 is dead"))
	rd = s.poll()
	require.Equal(t, []RequestID{"r"}, failedIDs(rd))
	assert.ErrorIs(t, rd.Failed[0].Reason, ErrFenced)
	assert.Equal(t, []BlockRef{{s.pool, b[0]}}, rd.InvalidBlocks)
	assert.Equal(t, OwnerEngine, s.c.Owner(BlockRef{s.pool, b[0]}))
}

// Rule 3 across batches: with one post per call, a second Post call that
// fails as a whole fails the request, but the failure is reported only
// once the part the first call posted is terminal and released.
func TestPostFailingInALaterBatchWaitsForTheEarlierParts(t *testing.T) {
	s := newSrig(t, Config{Batch: 1}, nil)
	s.connect(peerSpec("p", 3))
	spec := ReadSpec{Request: "r", Token: tok("r"), Peer: "p"}
	var blocks []BlockRef
	for k := range 3 {
		b := mustAlloc(t, s, 1)
		spec.Parts = append(spec.Parts, Part{Pool: s.pool, Local: b, Rank: k, Remote: []uint32{uint32(k)}})
		blocks = append(blocks, BlockRef{s.pool, b[0]})
	}
	require.NoError(t, s.c.Read(s.now, spec))
	rd := s.c.Ready()
	require.Len(t, rd.Work, 3, "one Post call per part")
	for i, w := range rd.Work {
		if i == 0 {
			res, err := s.d.exec(w)
			s.c.Done(w.ID, res, err)
			continue
		}
		s.c.Done(w.ID, Result{}, errBackend)
	}
	s.settle()
	require.Equal(t, 1, s.c.Stats().Live)
	for range 2 {
		rd = s.poll()
		assert.Zero(t, s.seen["r"], "failure reported while part 0 runs: %+v", rd)
		assert.Equal(t, repeat(OwnerTransfer, 3), s.owners(blocks))
	}
	s.d.set(s.d.live()[0], sdk.StateDone, nil)
	rd = s.poll()
	require.Equal(t, []RequestID{"r"}, failedIDs(rd))
	assert.Contains(t, rd.Failed[0].Reason.Error(), "parts 1-1")
	assert.ElementsMatch(t, blocks, rd.InvalidBlocks)
	assert.Zero(t, s.d.held().Handles)
}

// Calls respect the transport's limit on items per call (Describe's
// MaxItemsPerCall) when Config.Batch leaves the batch to it.
func TestCallsRespectTheTransportsItemLimit(t *testing.T) {
	s := newSrig(t, Config{}, func(d *double) { d.desc.Limits.MaxItemsPerCall = 2 })
	s.connect(peerSpec("p", 3))
	b := mustAlloc(t, s, 3)
	spec := ReadSpec{Request: "r", Token: tok("r"), Peer: "p"}
	for k := range 3 {
		spec.Parts = append(spec.Parts, Part{Pool: s.pool, Local: b[k : k+1], Rank: k, Remote: []uint32{uint32(k)}})
	}
	require.NoError(t, s.c.Read(s.now, spec))
	rd := s.c.Ready()
	var sizes []int
	var remote []uint32
	for _, w := range rd.Work {
		require.Equal(t, WorkPost, w.Kind)
		sizes = append(sizes, len(w.Posts))
		for _, p := range w.Posts {
			remote = append(remote, p.RemoteIndices...)
		}
	}
	assert.Equal(t, []int{2, 1}, sizes, "posts per call")
	assert.Equal(t, []uint32{0, 1, 2}, remote, "each part posted once")
	s.stash = mergeReady(s.stash, s.drive(rd))
	assert.Equal(t, 3, s.c.Stats().Live)
}

// Owner of a block that does not exist is OwnerFree, not a crash.
func TestOwnerOfABlockOutOfRange(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	assert.Equal(t, OwnerEngine, s.c.Owner(BlockRef{s.pool, mustAlloc(t, s, 1)[0]}))
	for _, b := range []BlockRef{{s.pool, 8}, {s.pool, 1 << 31}, {s.pool + 1, 0}, {0, 0}} {
		assert.NotPanics(t, func() { assert.Equal(t, OwnerFree, s.c.Owner(b), "%v", b) })
	}
}

// Rule 8 without a fence: a handle held past the cap under
// EscalateQuarantine is forgotten without release (leaked: the transport
// still holds it) and its blocks are quarantined; once its epoch is fenced
// the process died with it, and nothing of it is held any more.
func TestAFenceEndsTheLeakedHandlesOfItsEpoch(t *testing.T) {
	s := newSrig(t, Config{HoldCap: 5 * time.Second, Escalation: EscalateQuarantine}, nil)
	s.connect(peerSpec("p", 1))
	blocks := s.read("r", "p", 1)
	s.now = s.now.Add(5 * time.Second)
	rd := s.poll()
	require.Equal(t, []RequestID{"r"}, failedIDs(rd))
	assert.Equal(t, blocks, rd.Quarantined)
	assert.Equal(t, 1, s.c.Stats().Leaked, "the handle is forgotten, not released")
	assert.Equal(t, uint64(1), s.d.held().Handles)
	s.kill(1)
	s.poll()
	assert.Zero(t, s.c.Stats().Leaked, "the fenced process held the leaked handle")
}

// Bad input to Write and ExpectSend is an error naming what was wrong, and
// changes nothing.
func TestBadSendSpecsAreRefused(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 1))
	b := mustAlloc(t, s, 1)
	part := []Part{{Pool: s.pool, Local: b, Remote: []uint32{0}}}
	w := func(consumers int, lease time.Duration) error {
		return s.c.Write(s.now, WriteSpec{Request: "w", Token: 1, Peer: "p", Parts: part, Consumers: consumers, Lease: lease})
	}
	x := func(consumers int, lease time.Duration) error {
		return s.c.ExpectSend(s.now, SendSpec{Request: "s", Token: 1, Pool: s.pool, Blocks: b, Consumers: consumers, Lease: lease})
	}
	for name, err := range map[string]error{
		"write, no consumers":       w(0, time.Second),
		"write, lease zero":         w(1, 0),
		"write, lease negative":     w(1, -time.Second),
		"send, no consumers":        x(0, time.Second),
		"send, lease zero":          x(1, 0),
		"send, no blocks":           s.c.ExpectSend(s.now, SendSpec{Request: "s", Token: 1, Pool: s.pool, Consumers: 1, Lease: time.Second}),
		"send, unknown pool":        s.c.ExpectSend(s.now, SendSpec{Request: "s", Token: 1, Pool: 9, Blocks: b, Consumers: 1, Lease: time.Second}),
		"send, unknown peer":        s.c.ExpectSend(s.now, SendSpec{Request: "s", Token: 1, Peer: "q", Pool: s.pool, Blocks: b, Consumers: 1, Lease: time.Second}),
		"send, empty id":            s.c.ExpectSend(s.now, SendSpec{Token: 1, Pool: s.pool, Blocks: b, Consumers: 1, Lease: time.Second}),
		"receive, no producers":     s.c.ExpectReceive(s.now, RecvSpec{Request: "v", Token: 1, Peer: "p", Pool: s.pool, Blocks: b, Producers: 0, Lease: time.Second}),
		"receive, lease zero":       s.c.ExpectReceive(s.now, RecvSpec{Request: "v", Token: 1, Peer: "p", Pool: s.pool, Blocks: b, Producers: 1}),
		"receive, unknown peer":     s.c.ExpectReceive(s.now, RecvSpec{Request: "v", Token: 1, Peer: "q", Pool: s.pool, Blocks: b, Producers: 1, Lease: time.Second}),
		"receive, not the engine's": s.c.ExpectReceive(s.now, RecvSpec{Request: "v", Token: 1, Peer: "p", Pool: s.pool, Blocks: []uint32{7}, Producers: 1, Lease: time.Second}),
	} {
		assert.Error(t, err, name)
	}
	assert.Equal(t, OwnerEngine, s.c.Owner(BlockRef{s.pool, b[0]}))
	assert.Zero(t, s.c.Stats().Requests)
	require.NoError(t, w(1, time.Nanosecond), "the smallest good values")
}

// Parts name ranks that exist, at most 65536 of them.
func TestPartsOutOfRangeAreRefused(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 2))
	b := mustAlloc(t, s, 1)
	err := s.c.Read(s.now, ReadSpec{Request: "r", Peer: "p", Parts: []Part{{Pool: s.pool, Local: b, Rank: 2, Remote: []uint32{0}}}})
	require.Error(t, err, "rank 2 of a peer of 2 ranks")
	assert.Contains(t, err.Error(), "rank 2 does not exist")
	err = s.c.Read(s.now, ReadSpec{Request: "r", Peer: "p", Parts: []Part{{Pool: s.pool, Local: []uint32{8}, Remote: []uint32{0}}}})
	require.Error(t, err, "local block 8 of a pool of 8")
	assert.Contains(t, err.Error(), "block 8 does not exist")
	many := make([]Part, 1<<16)
	for i := range many {
		many[i] = Part{Pool: s.pool, Local: b, Remote: []uint32{0}}
	}
	err = s.c.Read(s.now, ReadSpec{Request: "r", Peer: "p", Parts: many})
	require.Error(t, err) // the same block in every part
	assert.NotContains(t, err.Error(), "at most 65536", "65536 parts are allowed")
	err = s.c.Read(s.now, ReadSpec{Request: "r", Peer: "p", Parts: append(many, many[0])})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "65537 parts; at most 65536")
	assert.Equal(t, OwnerEngine, s.c.Owner(BlockRef{s.pool, b[0]}))
}

// A handle whose Release failed, and whose epoch is then fenced, is gone
// with the process: no Release of it is made again, nothing is left to
// retry, and its request is reported once.
func TestAFenceDropsReleasesToRetry(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 1))
	s.read("r", "p", 1)
	s.d.set(s.d.live()[0], sdk.StateDone, nil)
	s.d.failItem(WorkRelease, 0, errBackend, -1)
	s.poll()
	require.True(t, s.c.retrying(), "the failed release is to be retried")
	s.kill(1)
	s.poll()
	assert.Equal(t, 1, s.seen["r"])
	assert.False(t, s.c.retrying(), "a release of a fenced epoch is retried")
	assert.False(t, s.c.busy())
	s.attach(2, nil)
	s.poll()
	assert.Zero(t, s.d.count(WorkRelease), "a Release of a fenced epoch's handle on the new one: %v", s.d.calls)
}

// A stale fence report (an epoch fenced before) changes nothing: a handle
// of the new epoch whose Release is being retried is still released and
// its request reported.
func TestAStaleFenceLeavesTheNewEpochsReleases(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.kill(1)
	s.attach(2, nil)
	s.connect(peerSpec("p", 1))
	s.read("r", "p", 1)
	s.d.set(s.d.live()[0], sdk.StateDone, nil)
	s.d.failItem(WorkRelease, 0, errBackend, 1)
	s.poll()
	require.True(t, s.c.retrying())
	s.c.Fenced(1) // reported again, late
	s.poll()
	assert.Equal(t, 1, s.seen["r"], "the retried release was dropped")
	assert.Zero(t, s.d.held().Handles)
}

// Rule 7 with a Post outstanding: a removed peer's natives are released
// only once no handle of it may run. When its last Post then fails, they
// are released at once (results reported with Done are acted on at once);
// while a part posted by an earlier batch still runs they stay.
func TestARemovedPeersNativesWaitForItsPosts(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{{"refused", errBackend}, {"unknown outcome", sdk.Errorf(sdk.CodeTimeout, "double: injected")}} {
		t.Run(tc.name+", last post", func(t *testing.T) {
			s := newSrig(t, Config{}, nil)
			s.connect(peerSpec("p", 1))
			b := mustAlloc(t, s, 1)
			require.NoError(t, s.c.Read(s.now, ReadSpec{Request: "r", Token: tok("r"), Peer: "p", Parts: []Part{{Pool: s.pool, Local: b, Remote: []uint32{0}}}}))
			rd := s.c.Ready()
			require.Len(t, rd.Work, 1)
			require.NoError(t, s.c.RemovePeer(s.now, "p"))
			s.settle()
			assert.Equal(t, uint64(1), s.d.held().Peers, "unloaded under an outstanding Post")
			s.c.Done(rd.Work[0].ID, Result{}, tc.err)
			s.settle()
			assert.Zero(t, s.d.held().Peers, "the peer's natives wait for a round")
			assert.Zero(t, s.c.Stats().RetiredPeers)
		})
		t.Run(tc.name+", a later batch", func(t *testing.T) {
			s := newSrig(t, Config{Batch: 1}, nil)
			s.connect(peerSpec("p", 3))
			b := mustAlloc(t, s, 3)
			spec := ReadSpec{Request: "r", Token: tok("r"), Peer: "p"}
			for k := range 3 {
				spec.Parts = append(spec.Parts, Part{Pool: s.pool, Local: b[k : k+1], Rank: k, Remote: []uint32{uint32(k)}})
			}
			require.NoError(t, s.c.Read(s.now, spec))
			rd := s.c.Ready()
			require.Len(t, rd.Work, 3)
			require.NoError(t, s.c.RemovePeer(s.now, "p"))
			for i, w := range rd.Work {
				if i == 0 {
					res, err := s.d.exec(w)
					s.c.Done(w.ID, res, err)
					continue
				}
				s.c.Done(w.ID, Result{}, tc.err)
			}
			s.settle()
			s.poll()
			require.Equal(t, uint64(1), s.d.held().Handles)
			assert.Equal(t, uint64(3), s.d.held().Peers, "a peer unloaded while a handle of it runs")
			assert.Equal(t, 1, s.c.Stats().RetiredPeers)
			s.d.set(s.d.live()[0], sdk.StateCanceled, nil)
			s.poll()
			assert.Zero(t, s.d.held().Peers)
			assert.Zero(t, s.c.Stats().RetiredPeers)
		})
	}
}

// Rule 5 and a stale fence: a handshake's leftovers in the journal (its
// rollback failed) stay listed when an earlier epoch is reported fenced
// again, and are released before the next setup of that peer.
func TestAStaleFenceKeepsTheJournal(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.kill(1)
	s.attach(2, nil)
	s.d.failItem(WorkPrepareDescriptors, 0, errBackend, 1)
	s.d.failItem(WorkUnloadPeers, 0, errBackend, 1)
	require.NoError(t, s.c.ConnectPeer(peerSpec("p", 1)))
	s.settle()
	require.False(t, s.c.Connected("p"))
	require.Equal(t, 1, s.c.Stats().Journal, "the loaded peer whose unload failed")
	s.c.Fenced(1) // reported again, late
	assert.Equal(t, 1, s.c.Stats().Journal, "a stale fence dropped the journal of the attached epoch")
	s.connect(peerSpec("p", 1))
	assert.True(t, s.c.Connected("p"))
	assert.Zero(t, s.c.Stats().Journal)
	assert.Equal(t, uint64(1), s.d.held().Peers, "the leftover was unloaded before the new setup")
}
