package core

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// Seed 000: a handshake that fails after some native acquisitions rolls all
// of them back, later ranks' failures included.
func TestHandshakeFailureAfterRegistrationRollsBack(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault string
	}{
		{"load of a later rank fails", "load-peer-fail,rank=1"},
		{"dlist of a later rank fails", "prepare-fail,rank=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, rigOpts{local: tc.fault})
			err := r.connectPeer(r.spec("p"))
			require.ErrorIs(t, err, sdk.ErrBackend)
			res, rerr := r.tr.Resources(r.ctx)
			require.NoError(t, rerr)
			assert.Zero(t, res.Peers, "loaded ranks leaked")
			assert.Equal(t, uint64(1), res.Dlists, "only the pool's local dlist may remain")
			assert.Zero(t, r.c.Stats().Journal)
			assert.Zero(t, r.c.Stats().Peers)
		})
	}
}

// Seed 000: notification-only ranks and ranks loaded before the failing one
// are journaled as soon as they are acquired, so the rollback finds them.
func TestNotificationOnlyPeersAndEarlierRanksAreJournaled(t *testing.T) {
	// Ranks 0 and 2 have blocks, rank 1 is notification-only; the dlist of
	// rank 2 (the second remote dlist) fails.
	r := newRig(t, rigOpts{ranks: 3, local: "prepare-fail,rank=1"})
	err := r.connectPeer(r.spec("p", 1))
	require.ErrorIs(t, err, sdk.ErrBackend)
	res, rerr := r.tr.Resources(r.ctx)
	require.NoError(t, rerr)
	assert.Zero(t, res.Peers, "the notification-only rank or an earlier rank leaked")
	assert.Equal(t, uint64(1), res.Dlists, "rank 0's dlist leaked")
	assert.Len(t, r.tr.unloaded, 3, "all three ranks were unloaded by the rollback")
}

// Seed 000: a rollback whose native release fails keeps its journal entries,
// and the next setup of that peer finishes the rollback first.
func TestRollbackThatFailsKeepsEntriesAndNextSetupFinishesIt(t *testing.T) {
	r := newRig(t, rigOpts{local: "prepare-fail,rank=1,times=1", setup: func(s *spy) { s.failUnloads = 1 }})
	err := r.connectPeer(r.spec("p"))
	require.ErrorIs(t, err, sdk.ErrBackend)
	assert.Equal(t, 2, r.c.Stats().Journal, "both loaded ranks stay journaled after their unload failed")
	res, _ := r.tr.Resources(r.ctx)
	assert.Equal(t, uint64(2), res.Peers)
	assert.Equal(t, uint64(1), res.Dlists, "the dlist release succeeded and left the journal")

	before := len(r.tr.calls)
	require.NoError(t, r.connectPeer(r.spec("p")))
	calls := r.tr.calls[before:]
	require.GreaterOrEqual(t, len(calls), 2)
	assert.Equal(t, []string{"UnloadPeers", "LoadPeers"}, calls[:2], "the leftovers are released before the new setup")
	assert.Zero(t, r.c.Stats().Journal)
	res, _ = r.tr.Resources(r.ctx)
	assert.Equal(t, uint64(2), res.Peers, "only the new setup's ranks are loaded")
	assert.Equal(t, uint64(3), res.Dlists, "the pool's dlist and the new setup's two")
}

// Seed 000: a failed handshake leaves other peers untouched, and the caller
// sees the original handshake error even when the rollback fails too.
func TestHealthyPeersAndTheOriginalErrorSurvive(t *testing.T) {
	r := newRig(t, rigOpts{local: "load-peer-fail,rank=3"})
	r.connect("healthy") // loads items 0 and 1
	r.tr.mu.Lock()
	r.tr.failUnloads = 1
	r.tr.mu.Unlock()
	err := r.connectPeer(r.spec("broken")) // item 2 loads, item 3 fails
	require.Error(t, err)
	assert.ErrorIs(t, err, sdk.ErrBackend)
	assert.Contains(t, err.Error(), "load-peer-fail", "the original error, not the rollback's")
	assert.NotContains(t, err.Error(), "unload failure")
	var se *sdk.Error
	require.True(t, errors.As(err, &se))

	spec, blocks := r.readSpec("after", "healthy", 2)
	require.NoError(t, r.read(spec))
	r.reported("after")
	assert.Equal(t, []RequestID{"after"}, r.all.FinishedReceiving, "the healthy peer still works")
	assert.Equal(t, repeat(OwnerEngine, 2), r.owners(blocks))
}
