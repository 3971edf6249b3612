package core

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// Rule 5, handshakes are journaled: a handshake that fails after some
// native acquisitions rolls all of them back, later ranks' failures
// included.
func TestHandshakeFailureAfterRegistrationRollsBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(d *double)
	}{
		{"load of a later rank fails", func(d *double) {
			d.failNth(WorkLoadPeers, 1, sdk.Errorf(sdk.CodeBackend, "double: injected load failure"))
		}},
		{"dlist of a later rank fails", func(d *double) {
			// Item 0 is the pool's local dlist; 2 is rank 1's.
			d.failNth(WorkPrepareDescriptors, 2, sdk.Errorf(sdk.CodeBackend, "double: injected dlist failure"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openSrig(t, Config{}, tc.fail)
			err := s.connectPeer(peerSpec("p", 2))
			require.ErrorIs(t, err, sdk.ErrBackend)
			assert.Zero(t, s.d.held().Peers, "loaded ranks leaked")
			assert.Equal(t, uint64(1), s.d.held().Dlists, "only the pool's local dlist may remain")
			assert.Zero(t, s.c.Stats().Journal)
			assert.Zero(t, s.c.Stats().Peers)
		})
	}
}

// Rule 5: notification-only ranks and ranks loaded before the failing one
// are journaled as soon as they are acquired, so the rollback finds them.
func TestNotificationOnlyPeersAndEarlierRanksAreJournaled(t *testing.T) {
	// Ranks 0 and 2 have blocks, rank 1 is notification-only; the dlist of
	// rank 2 (the second remote dlist, item 2 after the pool's) fails.
	s := openSrig(t, Config{}, func(d *double) {
		d.failNth(WorkPrepareDescriptors, 2, sdk.Errorf(sdk.CodeBackend, "double: injected dlist failure"))
	})
	err := s.connectPeer(peerSpec("p", 3, 1))
	require.ErrorIs(t, err, sdk.ErrBackend)
	assert.Zero(t, s.d.held().Peers, "the notification-only rank or an earlier rank leaked")
	assert.Equal(t, uint64(1), s.d.held().Dlists, "rank 0's dlist leaked")
	assert.Len(t, s.d.unloaded, 3, "all three ranks were unloaded by the rollback")
}

// Rule 5: a rollback whose native release fails keeps its journal entries,
// and the next setup of that peer finishes the rollback first.
func TestRollbackThatFailsKeepsEntriesAndNextSetupFinishesIt(t *testing.T) {
	s := openSrig(t, Config{}, func(d *double) {
		d.failNth(WorkPrepareDescriptors, 2, sdk.Errorf(sdk.CodeBackend, "double: injected dlist failure"))
		d.failEvery(WorkUnloadPeers, sdk.Errorf(sdk.CodeBackend, "double: injected unload failure"), 1)
	})
	err := s.connectPeer(peerSpec("p", 2))
	require.ErrorIs(t, err, sdk.ErrBackend)
	assert.Equal(t, 2, s.c.Stats().Journal, "both loaded ranks stay journaled after their unload failed")
	assert.Equal(t, uint64(2), s.d.held().Peers)
	assert.Equal(t, uint64(1), s.d.held().Dlists, "the dlist release succeeded and left the journal")

	before := len(s.d.calls)
	require.NoError(t, s.connectPeer(peerSpec("p", 2)))
	var calls []string
	for _, c := range s.d.callsSince(before) {
		calls = append(calls, strings.Fields(c)[0])
	}
	require.GreaterOrEqual(t, len(calls), 2)
	assert.Equal(t, []string{"UnloadPeers", "LoadPeers"}, calls[:2], "the leftovers are released before the new setup")
	assert.Zero(t, s.c.Stats().Journal)
	assert.Equal(t, uint64(2), s.d.held().Peers, "only the new setup's ranks are loaded")
	assert.Equal(t, uint64(3), s.d.held().Dlists, "the pool's dlist and the new setup's two")
}

// Rule 5: a failed handshake leaves other peers untouched, and the caller
// sees the original handshake error even when the rollback fails too.
func TestHealthyPeersAndTheOriginalErrorSurvive(t *testing.T) {
	s := openSrig(t, Config{}, func(d *double) {
		d.failNth(WorkLoadPeers, 3, sdk.Errorf(sdk.CodeBackend, "double: injected load-peer-fail"))
	})
	s.connect(peerSpec("healthy", 2)) // loads items 0 and 1
	s.d.failEvery(WorkUnloadPeers, sdk.Errorf(sdk.CodeBackend, "double: injected unload failure"), 1)
	err := s.connectPeer(peerSpec("broken", 2)) // item 2 loads, item 3 fails
	require.Error(t, err)
	assert.ErrorIs(t, err, sdk.ErrBackend)
	assert.Contains(t, err.Error(), "load-peer-fail", "the original error, not the rollback's")
	assert.NotContains(t, err.Error(), "unload failure")
	var se *sdk.Error
	require.True(t, errors.As(err, &se))

	blocks := s.read("after", "healthy", 2)
	for _, h := range s.d.live() {
		s.d.set(h, sdk.StateDone, nil)
	}
	s.poll()
	require.Equal(t, 1, s.seen["after"])
	assert.Equal(t, []RequestID{"after"}, s.all.FinishedReceiving, "the healthy peer still works")
	assert.Equal(t, repeat(OwnerEngine, 2), s.owners(blocks))
}
