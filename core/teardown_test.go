package core

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// Rule 6, teardown retains, and rule 12: closing cancels the session's
// transfers in wait mode; one that still runs is retained with its blocks
// pinned, Close refuses to stop the transport while it runs, and its blocks
// come back only when it stops. The double's Cancel changes nothing, as
// UCX's cannot stop a posted put or get.
func TestCloseCancelsInWaitModeAndRetainsRunningTransfers(t *testing.T) {
	s := openSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 2))
	blocks := s.read("r", "p", 2)
	hs := s.d.live()
	s.d.set(hs[1], sdk.StateDone, nil) // the second part ends, the first runs on
	s.poll()
	require.Equal(t, 1, s.c.Stats().Live, "the second part released")

	err := s.closeCore()
	require.ErrorIs(t, err, ErrHeld)
	assert.Equal(t, []sdk.HandleID{hs[0]}, s.d.canceled, "the running handle was canceled")
	assert.Empty(t, s.d.releasedEarly, "a running handle was released")
	assert.Equal(t, 1, s.c.Stats().Retained)
	assert.Equal(t, OwnerRetained, s.c.Owner(blocks[0]), "the running part's block is pinned")
	assert.False(t, s.d.closed, "the transport must still be open")
	assert.Equal(t, uint64(1), s.d.held().Handles)
	assert.Equal(t, uint64(2), s.d.held().Peers, "the running handle's peer stays loaded")
	rd := s.poll()
	assert.Empty(t, rd.Failed, "reported while a handle ran")

	s.d.set(hs[0], sdk.StateDone, nil) // it stops
	rd = s.reported("r")
	assert.ErrorIs(t, rd.Failed[0].Reason, ErrPeerRemoved)
	assert.ElementsMatch(t, blocks, rd.InvalidBlocks)
	assert.Equal(t, repeat(OwnerEngine, 2), s.owners(blocks))
	require.NoError(t, s.closeCore())
}

// Rule 7, removing a peer retires its in-flight entries: its dlists and
// native peer handles are freed at once when no transfer uses them, and not
// before the last running one stops when one does (poll_retired).
func TestRemovePeerKeepsDlistsAndPeerHandlesARunningTransferUses(t *testing.T) {
	t.Run("none running: freed at once", func(t *testing.T) {
		s := openSrig(t, Config{}, nil)
		s.connect(peerSpec("p", 2))
		require.NoError(t, s.do(s.c.RemovePeer(s.now, "p")))
		assert.Zero(t, s.d.held().Peers)
		assert.Equal(t, uint64(1), s.d.held().Dlists, "only the pool's local dlist")
		assert.Zero(t, s.c.Stats().RetiredPeers)
	})
	t.Run("one running: freed when it stops", func(t *testing.T) {
		s := openSrig(t, Config{}, nil)
		s.connect(peerSpec("p", 2))
		blocks := s.read("r", "p", 1)
		require.NoError(t, s.do(s.c.RemovePeer(s.now, "p")))
		assert.Zero(t, s.d.count(WorkReleaseDescriptors), "a dlist a running transfer uses was released")
		assert.Zero(t, s.d.count(WorkUnloadPeers), "a peer a running transfer uses was unloaded")
		assert.Equal(t, 1, s.c.Stats().RetiredPeers)
		assert.Equal(t, OwnerRetained, s.c.Owner(blocks[0]))
		s.poll()
		require.Equal(t, 1, s.c.Stats().RetiredPeers, "released while its transfer runs")
		s.done() // it stops
		rd := s.poll()
		require.Zero(t, s.c.Stats().RetiredPeers, "the retired peer released")
		assert.Equal(t, []RequestID{"r"}, failedIDs(s.all))
		assert.NotEmpty(t, rd.Failed, "the request is reported in the round its handle is released")
		assert.Zero(t, s.d.held().Peers)
		assert.Equal(t, uint64(1), s.d.held().Dlists)
	})
}

// Rule 7: a completion of a retired transfer never reaches a new session
// under the same peer id: it finishes only its own failed request, and
// does not notify the producer, not even its old session.
func TestReconnectNeverReceivesARetiredCompletion(t *testing.T) {
	s := openSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 2))
	old, oldBlocks := s.readSpec("old", "p", 1)
	old.NotifyProducer = true
	require.NoError(t, s.do(s.c.Read(s.now, old)))
	hOld := s.d.live()[0]
	require.NoError(t, s.do(s.c.RemovePeer(s.now, "p")))
	s.connect(peerSpec("p", 2))
	fresh, _ := s.readSpec("new", "p", 1)
	fresh.NotifyProducer = true
	require.NoError(t, s.do(s.c.Read(s.now, fresh)))
	hs := s.d.live()
	hNew := hs[len(hs)-1]
	s.d.set(hNew, sdk.StateDone, nil)
	s.reported("new")
	s.d.set(hOld, sdk.StateDone, nil) // the retired transfer ends after all
	s.reported("old")
	assert.Equal(t, []RequestID{"new"}, s.all.FinishedReceiving, "the retired transfer's DONE finished a request")
	assert.Equal(t, []RequestID{"old"}, failedIDs(s.all))
	assert.ElementsMatch(t, oldBlocks, s.all.InvalidBlocks)
	assert.Zero(t, s.c.Stats().RetiredPeers, "old session released")
	assert.Equal(t, []string{string(ConsumedMessage("new", tok("new")))}, s.d.deliveredTo("p0"))
}

// Rule 7: poll_retired releases the retained handles that stopped, and
// only those, each round; rule 8's cap ends the one that never stops.
func TestPollRetiredReleasesWhatStopped(t *testing.T) {
	s := openSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 2))
	blocks := s.read("r", "p", 2)
	hs := s.d.live()
	require.NoError(t, s.do(s.c.RemovePeer(s.now, "p")))
	require.Equal(t, 2, s.c.Stats().Retained)
	s.d.set(hs[0], sdk.StateDone, nil) // the first stops; the second never does
	s.poll()
	require.Equal(t, 1, s.c.Stats().Live, "the first retained handle released")
	assert.Equal(t, OwnerRetained, s.c.Owner(blocks[1]), "the one still running stays pinned")
	assert.Empty(t, s.d.releasedEarly, "a handle was released before it was seen terminal")
	assert.Empty(t, s.all.Failed)
	// The second one never stops by itself: the hold cap ends it (fence).
	s.now = s.now.Add(DefaultHoldCap)
	rd := s.poll()
	assert.Equal(t, []Epoch{1}, rd.Fence)
	s.kill(1)
	rd = s.poll()
	assert.Equal(t, []RequestID{"r"}, failedIDs(rd))
	assert.ElementsMatch(t, blocks, rd.InvalidBlocks)
}

// Rule 12 with docs/fencing.md: a send that Close fails keeps its blocks
// while a consumer may still read them: until Close deregistered its pool
// where the fence covers incoming transfers, else until its lease; and
// Close returns nil only once it is reported (rule 16).
func TestCloseHandsBackSendBlocksOnlyOnceUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		scope sdk.FenceScope
		lease bool
	}{
		{"incoming fence: once deregistered", sdk.FenceInitiatedAndIncoming, false},
		{"initiated fence: at its lease", sdk.FenceInitiated, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openSrig(t, Config{}, func(d *double) { d.desc.FenceScope = tc.scope })
			s.connect(peerSpec("p", 2))
			s.read("read", "p", 1)
			h := s.d.live()[0]
			b := s.alloc(1)
			sb := BlockRef{s.pool, b[0]}
			leaseAt := s.now.Add(time.Hour)
			require.NoError(t, s.c.ExpectSend(s.now, SendSpec{Request: "s", Token: tok("s"), Pool: s.pool, Blocks: b, Consumers: 1, Lease: time.Hour}))
			require.ErrorIs(t, s.closeCore(), ErrHeld, "the stalled read keeps Close refused")
			reported := false
			for round := 0; ; round++ {
				rd := s.poll()
				if slices.Contains(failedIDs(rd), RequestID("s")) {
					reported = true
					assert.Zero(t, s.d.held().Regions, "reported while its pool was registered")
					if tc.lease {
						assert.False(t, s.now.Before(leaseAt), "reported before its lease where the fence does not stop readers")
					}
					assert.Equal(t, OwnerEngine, s.c.Owner(sb))
				} else if !reported {
					require.Equal(t, OwnerTransfer, s.c.Owner(sb))
				}
				if s.closeCore() == nil {
					break
				}
				require.Less(t, round, 6, "Close still refused")
				switch {
				case round == 1:
					s.d.set(h, sdk.StateDone, nil) // the stalled read ends
				case round == 3 && tc.lease:
					s.now = leaseAt
				}
			}
			if slices.Contains(failedIDs(s.poll()), RequestID("s")) {
				reported = true // in the Ready Close's last Work left
			}
			assert.True(t, reported, "Close returned nil with the send not reported")
			assert.Equal(t, OwnerEngine, s.c.Owner(sb))
		})
	}
}

// Close with no transport attached (its epoch fenced, none attached again)
// still fails the requests waiting for a handshake, so they are reported
// and their blocks come back.
func TestCloseWithoutTransportFailsWaitingRequests(t *testing.T) {
	s := openSrig(t, Config{}, nil)
	blocks := s.read("r", "q", 1) // q never connects
	s.kill(1)
	require.ErrorIs(t, s.closeCore(), ErrHeld, "Close returned nil before the failed request was reported")
	rd := s.poll()
	require.NoError(t, s.closeCore())
	require.Equal(t, []RequestID{"r"}, failedIDs(rd))
	assert.ErrorIs(t, rd.Failed[0].Reason, ErrPeerRemoved)
	assert.Equal(t, blocks, rd.InvalidBlocks)
	assert.Equal(t, OwnerEngine, s.c.Owner(blocks[0]))
	assert.Zero(t, s.c.Stats().Requests)
}
