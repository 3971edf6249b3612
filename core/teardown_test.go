package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// cancelNone models UCX, whose Cancel cannot stop a posted put or get.
func cancelNone(s *spy) { s.cancelNone = true }

// Seed 002 and rule 12: closing cancels the session's transfers in wait
// mode; one that still runs is retained with its blocks pinned, Close
// refuses to stop the transport while it runs, and its blocks come back only
// when it stops.
func TestCloseCancelsInWaitModeAndRetainsRunningTransfers(t *testing.T) {
	skipStallsIfShort(t)
	r := newRig(t, rigOpts{local: "stall,post=1,for=300ms", setup: cancelNone})
	r.connect("p")
	spec, blocks := r.readSpec("r", "p", 2)
	require.NoError(t, r.read(spec))
	r.until("the second part released", func(Ready) bool { return r.c.Stats().Live == 1 })

	err := r.close()
	require.ErrorIs(t, err, ErrHeld)
	assert.Len(t, r.tr.canceled, 1, "the running handle was canceled")
	assert.Empty(t, r.tr.releasedEarly, "a running handle was released")
	assert.Equal(t, 1, r.c.Stats().Retained)
	assert.Equal(t, OwnerRetained, r.c.Owner(blocks[0]), "the running part's block is pinned")
	res, rerr := r.tr.Resources(r.ctx)
	require.NoError(t, rerr, "the transport must still be open")
	assert.Equal(t, uint64(1), res.Handles)
	assert.Equal(t, uint64(2), res.Peers, "the running handle's peer stays loaded")
	rd := r.poll()
	assert.Empty(t, rd.Failed, "reported while a handle ran")

	rd = r.reported("r")
	assert.ErrorIs(t, rd.Failed[0].Reason, ErrPeerRemoved)
	assert.ElementsMatch(t, blocks, rd.InvalidBlocks)
	assert.Equal(t, repeat(OwnerEngine, 2), r.owners(blocks))
	require.NoError(t, r.close())
}

// Seed 002: removing a peer frees its dlists and native peer handles at once
// when no transfer uses them, and not before the last running one stops
// when one does (poll_retired).
func TestRemovePeerKeepsDlistsAndPeerHandlesARunningTransferUses(t *testing.T) {
	skipStallsIfShort(t)
	t.Run("none running: freed at once", func(t *testing.T) {
		r := newRig(t, rigOpts{})
		r.connect("p")
		require.NoError(t, r.removePeer("p"))
		res, err := r.tr.Resources(r.ctx)
		require.NoError(t, err)
		assert.Zero(t, res.Peers)
		assert.Equal(t, uint64(1), res.Dlists, "only the pool's local dlist")
		assert.Zero(t, r.c.Stats().RetiredPeers)
	})
	t.Run("one running: freed when it stops", func(t *testing.T) {
		r := newRig(t, rigOpts{local: "stall,post=1,for=300ms", setup: cancelNone})
		r.connect("p")
		spec, blocks := r.readSpec("r", "p", 1)
		require.NoError(t, r.read(spec))
		require.NoError(t, r.removePeer("p"))
		assert.Zero(t, r.tr.count("ReleaseDescriptors"), "a dlist a running transfer uses was released")
		assert.Zero(t, r.tr.count("UnloadPeers"), "a peer a running transfer uses was unloaded")
		assert.Equal(t, 1, r.c.Stats().RetiredPeers)
		assert.Equal(t, OwnerRetained, r.c.Owner(blocks[0]))
		rd := r.until("the retired peer released", func(Ready) bool { return r.c.Stats().RetiredPeers == 0 })
		assert.Equal(t, []RequestID{"r"}, failedIDs(r.all))
		assert.NotEmpty(t, rd.Failed, "the request is reported in the round its handle is released")
		res, err := r.tr.Resources(r.ctx)
		require.NoError(t, err)
		assert.Zero(t, res.Peers)
		assert.Equal(t, uint64(1), res.Dlists)
	})
}

// Seed 002 and rule 7: a completion of a retired transfer never reaches a new
// session under the same peer id: it finishes only its own failed request,
// and does not notify the producer.
func TestReconnectNeverReceivesARetiredCompletion(t *testing.T) {
	skipStallsIfShort(t)
	r := newRig(t, rigOpts{local: "stall,post=1,for=300ms", setup: cancelNone})
	r.connect("p")
	old, oldBlocks := r.readSpec("old", "p", 1)
	old.NotifyProducer = true
	require.NoError(t, r.read(old))
	require.NoError(t, r.removePeer("p"))
	r.connect("p")
	fresh, _ := r.readSpec("new", "p", 1)
	fresh.NotifyProducer = true
	require.NoError(t, r.read(fresh))
	r.reported("new")
	r.reported("old")
	assert.Equal(t, []RequestID{"new"}, r.all.FinishedReceiving, "the retired transfer's DONE finished a request")
	assert.Equal(t, []RequestID{"old"}, failedIDs(r.all))
	assert.ElementsMatch(t, oldBlocks, r.all.InvalidBlocks)
	var msgs []string
	require.Eventually(t, func() bool {
		ns, err := r.remotes[0].tr.Notifications(r.ctx, 0)
		require.NoError(t, err)
		for _, n := range ns {
			msgs = append(msgs, string(n.Message))
		}
		return len(msgs) > 0
	}, wait, time.Millisecond)
	// Wait for the retired handle's release round to pass, then recheck.
	r.until("old session released", func(Ready) bool { return r.c.Stats().RetiredPeers == 0 })
	ns, err := r.remotes[0].tr.Notifications(r.ctx, 0)
	require.NoError(t, err)
	for _, n := range ns {
		msgs = append(msgs, string(n.Message))
	}
	assert.Equal(t, []string{string(ConsumedMessage("new", tok("new")))}, msgs)
}

// Seed 002: poll_retired releases the retained handles that stopped, and
// only those, each round.
func TestPollRetiredReleasesWhatStopped(t *testing.T) {
	skipStallsIfShort(t)
	r := newRig(t, rigOpts{local: "stall,post=1,for=200ms;stall,post=2;crash,at=release,n=2", setup: cancelNone})
	r.connect("p")
	spec, blocks := r.readSpec("r", "p", 2)
	require.NoError(t, r.read(spec))
	require.NoError(t, r.removePeer("p"))
	require.Equal(t, 2, r.c.Stats().Retained)
	r.until("the first retained handle released", func(Ready) bool { return r.c.Stats().Live == 1 })
	assert.Equal(t, OwnerRetained, r.c.Owner(blocks[1]), "the one still running stays pinned")
	assert.Empty(t, r.tr.releasedEarly, "a handle was released before it was seen terminal")
	assert.Empty(t, r.all.Failed)
	// The second one never stops by itself: the hold cap ends it (fence).
	r.now = r.now.Add(DefaultHoldCap)
	rd := r.poll()
	assert.Equal(t, []Epoch{1}, rd.Fence)
	r.kill()
	r.c.Fenced(1)
	rd = r.poll()
	assert.Equal(t, []RequestID{"r"}, failedIDs(rd))
	assert.ElementsMatch(t, blocks, rd.InvalidBlocks)
}

// kill ends the local agent as the runtime's fence would: every native
// resource and transfer of it is gone. The in-process fake has no kill
// call, so a crash rule on Release (crash,at=release,n=N) stands in for it:
// the test counts Releases so that the N-th is this one.
func (r *rig) kill() {
	r.t.Helper()
	_, err := r.tr.Transport.Release(r.ctx, nil)
	require.ErrorIs(r.t, err, sdk.ErrPluginShutdown, "the rig needs fault crash,at=release,n=1 to kill")
}

// Rule 12 with docs/fencing.md: a send that Close fails keeps its blocks while a
// consumer may still read them: until Close deregistered its pool where the
// fence covers incoming transfers, else until its lease.
func TestCloseHandsBackSendBlocksOnlyOnceUnreachable(t *testing.T) {
	skipStallsIfShort(t)
	for _, tc := range []struct {
		name, fence string
		lease       bool
	}{
		{"incoming fence: once deregistered", "", false},
		{"initiated fence: at its lease", "initiated", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, rigOpts{local: "stall,post=1,for=300ms", setup: cancelNone, fence: tc.fence})
			r.connect("p")
			spec, _ := r.readSpec("read", "p", 1)
			require.NoError(t, r.read(spec))
			b := r.alloc(1)
			sb := BlockRef{r.pool, b[0]}
			require.NoError(t, r.c.ExpectSend(r.now, SendSpec{Request: "s", Token: tok("s"), Pool: r.pool, Blocks: b, Consumers: 1, Lease: time.Hour}))
			require.ErrorIs(t, r.close(), ErrHeld, "the stalled read keeps Close refused")
			deadline := time.Now().Add(wait)
			for {
				rd := r.poll()
				require.NotContains(t, failedIDs(rd), RequestID("s"), "reported while its pool was registered")
				require.Equal(t, OwnerTransfer, r.c.Owner(sb))
				if r.close() == nil {
					break
				}
				require.True(t, time.Now().Before(deadline), "Close still refused")
				time.Sleep(time.Millisecond) // pacing of the poll loop, not synchronisation
			}
			rd := r.poll()
			if tc.lease {
				assert.NotContains(t, failedIDs(rd), RequestID("s"), "reported before its lease where the fence does not stop readers")
				assert.Equal(t, OwnerTransfer, r.c.Owner(sb))
				r.now = r.now.Add(time.Hour)
				rd = r.poll()
			}
			assert.Contains(t, failedIDs(rd), RequestID("s"))
			assert.Equal(t, OwnerEngine, r.c.Owner(sb))
		})
	}
}

// Close with no transport attached (its epoch fenced, none attached again)
// still fails the requests waiting for a handshake, so they are reported
// and their blocks come back.
func TestCloseWithoutTransportFailsWaitingRequests(t *testing.T) {
	r := newRig(t, rigOpts{local: "crash,at=release,n=1"})
	spec, blocks := r.readSpec("r", "q", 1) // q never connects
	require.NoError(t, r.read(spec))
	r.kill()
	r.c.Fenced(1)
	require.NoError(t, r.close())
	rd := r.poll()
	require.Equal(t, []RequestID{"r"}, failedIDs(rd))
	assert.ErrorIs(t, rd.Failed[0].Reason, ErrPeerRemoved)
	assert.Equal(t, blocks, rd.InvalidBlocks)
	assert.Equal(t, OwnerEngine, r.c.Owner(blocks[0]))
	assert.Zero(t, r.c.Stats().Requests)
}
