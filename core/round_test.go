package core

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// A handshake finished in the background (Inbox().HandshakeDone) connects
// its peer and posts the requests that waited for it; one that ConnectPeer
// refuses fails them, and their blocks come back.
func TestHandshakeDoneFromTheInbox(t *testing.T) {
	t.Run("connects", func(t *testing.T) {
		s := newSrig(t, Config{}, nil)
		blocks := s.read("r", "q", 1)
		assert.Equal(t, 1, s.c.Stats().Waiting)
		s.c.Inbox().HandshakeDone(peerSpec("q", 1))
		rd := s.poll()
		assert.False(t, hasAlert(rd, "handshake_failed"))
		assert.True(t, s.c.Connected("q"))
		assert.Equal(t, 1, s.c.Stats().Live, "the waiting read was posted")
		assert.Equal(t, []Owner{OwnerTransfer}, s.owners(blocks))
	})
	t.Run("refused", func(t *testing.T) {
		s := newSrig(t, Config{}, nil)
		blocks := s.read("r", "q", 1)
		s.c.Inbox().HandshakeDone(PeerSpec{Name: "q"}) // no ranks
		rd := s.poll()
		assert.True(t, hasAlert(rd, "handshake_failed"))
		require.Equal(t, []RequestID{"r"}, failedIDs(rd), "the waiting read still waits")
		assert.Equal(t, blocks, rd.InvalidBlocks)
		assert.Equal(t, []Owner{OwnerEngine}, s.owners(blocks))
	})
}

// Rule 1 with a short answer: a Poll that returns fewer states than it was
// given handles leaves the others' state unknown (never terminal): they
// stay held, and are polled again.
func TestPollWithMissingStatesKeepsTheHandles(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 2))
	blocks := s.read("r", "p", 2)
	for _, h := range s.d.live() {
		s.d.set(h, sdk.StateDone, nil)
	}
	s.tamper = func(w Work, res *Result) {
		if w.Kind == WorkPoll {
			require.Len(t, res.States, 2)
			res.States = res.States[:1] // the transport lost one
		}
	}
	s.stash = mergeReady(s.stash, s.drive(s.c.Poll(s.now)))
	s.tamper = nil
	assert.True(t, hasAlert(s.stash, "transfer_poll_failed"))
	assert.Equal(t, 1, s.c.Stats().Live, "a handle without a state was released")
	assert.Zero(t, s.seen["r"])
	assert.Equal(t, repeat(OwnerTransfer, 2), s.owners(blocks))
	s.stash = Ready{}
	rd := s.poll()
	assert.Equal(t, []RequestID{"r"}, rd.FinishedReceiving, "polled again, it finishes")
}

// With an EventSource, a round asks for the changes only. When Events
// fails (a batch may be lost with the reply) the next round polls every
// live handle once, then it goes back to events.
func TestEventsFailureResynchronisesOnce(t *testing.T) {
	for _, tc := range []struct {
		batch, calls int
	}{{1, 2}, {0, 1}} {
		t.Run(fmt.Sprint("batch ", tc.batch), func(t *testing.T) {
			s := newSrig(t, Config{Batch: tc.batch}, func(d *double) { d.desc.Capabilities.Events = true })
			s.connect(peerSpec("p", 2))
			s.read("r", "p", 2)
			s.poll()
			require.Zero(t, s.d.count(WorkPoll), "an event source is polled for events, not handles")
			s.d.failWhole(WorkEvents, errBackend, 1)
			s.poll()
			assert.Zero(t, s.d.count(WorkPoll))
			s.poll()
			assert.Equal(t, tc.calls, s.d.count(WorkPoll), "after a lost batch, every live handle is polled")
			s.poll()
			s.poll()
			assert.Equal(t, tc.calls, s.d.count(WorkPoll), "back to events once resynchronised")
		})
	}
}

// A handle that ends FAILED or CANCELED fails its request, with the
// transport's reason when it gives one and with one naming the handle when
// it gives none: a failure is never reported as a success.
func TestAFailedHandleFailsItsRequestWithOrWithoutAReason(t *testing.T) {
	for _, tc := range []struct {
		name   string
		st     sdk.State
		reason error
		code   sdk.Code
	}{
		{"failed, no reason", sdk.StateFailed, nil, sdk.CodeBackend},
		{"canceled, no reason", sdk.StateCanceled, nil, sdk.CodeBackend},
		{"failed, disconnect", sdk.StateFailed, sdk.Errorf(sdk.CodeRemoteDisconnect, "double: gone"), sdk.CodeRemoteDisconnect},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSrig(t, Config{}, nil)
			s.connect(peerSpec("p", 1))
			blocks := s.read("r", "p", 1)
			s.d.set(s.d.live()[0], tc.st, tc.reason)
			rd := s.poll()
			require.Equal(t, []RequestID{"r"}, failedIDs(rd))
			require.Error(t, rd.Failed[0].Reason)
			assert.Equal(t, tc.code, sdk.CodeOf(rd.Failed[0].Reason))
			assert.Equal(t, blocks, rd.InvalidBlocks)
			assert.Empty(t, rd.FinishedReceiving)
		})
	}
}

// LoadPeers answering fewer results than ranks fails the handshake with a
// clear error and rolls back what it loaded; the waiting read fails.
func TestLoadPeersWithMissingResultsFailsTheHandshake(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	blocks := s.read("r", "q", 1)
	require.NoError(t, s.c.ConnectPeer(peerSpec("q", 2)))
	rd := s.c.Ready()
	require.Len(t, rd.Work, 1)
	require.Equal(t, WorkLoadPeers, rd.Work[0].Kind)
	res, err := s.d.exec(rd.Work[0])
	require.NoError(t, err)
	res.PeerResults = res.PeerResults[:1]
	s.c.Done(rd.Work[0].ID, res, nil)
	s.settle()
	rd = s.poll()
	assert.False(t, s.c.Connected("q"))
	require.Equal(t, []RequestID{"r"}, failedIDs(rd))
	assert.Contains(t, rd.Failed[0].Reason.Error(), "1 results for 2 ranks")
	assert.Equal(t, blocks, rd.InvalidBlocks)
	assert.Zero(t, s.c.Stats().Journal)
	assert.Equal(t, 1, s.d.count(WorkUnloadPeers), "the rank that loaded is unloaded")
	assert.Equal(t, uint64(1), s.d.held().Peers, "only the rank the transport never named is left")
}

// Owner names what holds a block, and an unknown value says so.
func TestOwnerNames(t *testing.T) {
	assert.Equal(t, "free", OwnerFree.String())
	assert.Equal(t, "quarantined", OwnerQuarantined.String())
	assert.Equal(t, fmt.Sprintf("Owner(%d)", len(ownerNames)), Owner(len(ownerNames)).String(), "the first value past the names")
	assert.Equal(t, "Owner(255)", Owner(255).String())
}

// A bad PeerSpec is refused with an error naming what is wrong, and makes
// no transport call.
func TestBadPeerSpecsAreRefused(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	calls := len(s.d.calls)
	good := func() PeerSpec {
		ps := peerSpec("p", 2, 1) // rank 1 notification-only: no blocks, no block size
		ps.Ranks[1].BlockSize = 0
		return ps
	}
	for _, tc := range []struct {
		name, want string
		mod        func(*PeerSpec)
	}{
		{"no name", "Name is empty", func(p *PeerSpec) { p.Name = "" }},
		{"no ranks", "no ranks", func(p *PeerSpec) { p.Ranks = nil }},
		{"no agent", "rank 1: Agent is empty", func(p *PeerSpec) { p.Ranks[1].Agent = "" }},
		{"no metadata", "rank 0: Metadata is empty", func(p *PeerSpec) { p.Ranks[0].Metadata = nil }},
		{"blocks without a size", "rank 0: BlockSize is zero", func(p *PeerSpec) { p.Ranks[0].BlockSize = 0 }},
	} {
		ps := good()
		tc.mod(&ps)
		err := s.c.ConnectPeer(ps)
		require.Error(t, err, tc.name)
		assert.Contains(t, err.Error(), tc.want, tc.name)
		assert.False(t, s.c.Handshaking(ps.Name), tc.name)
	}
	assert.Len(t, s.d.calls, calls, "a refused ConnectPeer made a transport call")
	require.NoError(t, s.c.ConnectPeer(good()), "a notification-only rank needs no block size")
	assert.True(t, s.c.Handshaking("p"))
	s.settle()
	assert.False(t, s.c.Handshaking("p"))
	assert.True(t, s.c.Connected("p"))
}

// PrepareDescriptors answering fewer results than lists fails the
// handshake with a clear error and rolls back what it prepared and loaded.
func TestPrepareDescriptorsWithMissingResultsFailsTheHandshake(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	require.NoError(t, s.c.ConnectPeer(peerSpec("q", 2)))
	for work := s.c.Ready().Work; len(work) > 0; {
		for _, w := range work {
			res, err := s.d.exec(w)
			if w.Kind == WorkPrepareDescriptors {
				require.Len(t, res.DlistResults, 2)
				res.DlistResults = res.DlistResults[:1]
			}
			s.c.Done(w.ID, res, err)
		}
		next := s.c.Ready()
		s.stash = mergeReady(s.stash, next)
		work = next.Work
	}
	assert.False(t, s.c.Connected("q"))
	assert.Zero(t, s.c.Stats().Journal)
	assert.Equal(t, uint64(2), s.d.held().Dlists, "the pool's, and the list the transport never named: the named one is released")
	assert.Equal(t, uint64(0), s.d.held().Peers, "the loaded ranks are unloaded")
}

// Rule 5: leftovers of a failed rollback stay journaled when a later
// handshake of the same peer succeeds while they still cannot be released,
// and are released before the setup after that.
func TestLeftoversOutliveASuccessfulHandshake(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.d.failItem(WorkPrepareDescriptors, 0, errBackend, 1)
	s.d.failItem(WorkUnloadPeers, 0, errBackend, 2) // the rollback, and its retry at the next setup
	require.NoError(t, s.c.ConnectPeer(peerSpec("p", 1)))
	s.settle()
	require.Equal(t, 1, s.c.Stats().Journal)
	s.connect(peerSpec("p", 1))
	require.True(t, s.c.Connected("p"))
	assert.Equal(t, 1, s.c.Stats().Journal, "the leftover was forgotten when the peer was published")
	require.NoError(t, s.c.RemovePeer(s.now, "p"))
	s.settle()
	s.poll()
	s.connect(peerSpec("p", 1))
	assert.Zero(t, s.c.Stats().Journal)
	assert.Equal(t, uint64(1), s.d.held().Peers, "only the new session's peer is loaded")
}

// WorkKind names each kind, and an unknown value says so.
func TestWorkKindNames(t *testing.T) {
	assert.Equal(t, "Post", WorkPost.String())
	assert.Equal(t, "Close", WorkClose.String())
	assert.Equal(t, fmt.Sprintf("WorkKind(%d)", len(workNames)), WorkKind(len(workNames)).String())
	assert.Equal(t, "WorkKind(0)", WorkKind(0).String())
}

// Removing a peer that only requests wait for (no handshake started) fails
// them at once; removing one nothing knows is an error that changes nothing.
func TestRemovingAPeerOnlyRequestsWaitFor(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	blocks := s.read("r", "q", 1)
	require.Error(t, s.c.RemovePeer(s.now, "nobody"))
	assert.Equal(t, 1, s.c.Stats().Waiting)
	require.NoError(t, s.c.RemovePeer(s.now, "q"))
	rd := s.poll()
	require.Equal(t, []RequestID{"r"}, failedIDs(rd))
	assert.ErrorIs(t, rd.Failed[0].Reason, ErrPeerRemoved)
	assert.Equal(t, blocks, rd.InvalidBlocks)
	assert.Zero(t, s.c.Stats().Waiting)
}

// Rule 6/7: removing a peer cancels its running transfers; a Cancel that
// fails is an Alert naming the handle, and the handle stays retained with
// its blocks until it is terminal and released.
func TestACancelThatFailsKeepsTheHandleRetained(t *testing.T) {
	s := newSrig(t, Config{}, func(d *double) { d.cancelTo = sdk.StateCanceled })
	s.connect(peerSpec("p", 1))
	blocks := s.read("r", "p", 1)
	s.d.failItem(WorkCancel, 0, errBackend, 1)
	require.NoError(t, s.c.RemovePeer(s.now, "p"))
	s.settle()
	rd := s.poll()
	assert.True(t, hasAlert(s.all, "transfer_cancel_failed"), "a failed Cancel went unsaid: %v", rd.Alerts)
	assert.Equal(t, []Owner{OwnerRetained}, s.owners(blocks))
	assert.Equal(t, 1, s.c.Stats().Retained)
	s.d.set(s.d.live()[0], sdk.StateDone, nil)
	rd = s.poll()
	require.Equal(t, []RequestID{"r"}, failedIDs(rd))
	assert.Equal(t, []Owner{OwnerEngine}, s.owners(blocks))
}

// Rule 2 with a short answer: a Release that returns fewer results than
// handles leaves the unanswered ones held (their release is unknown), to
// be released again next round.
func TestReleaseWithMissingResultsKeepsTheHandles(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 2))
	blocks := s.read("r", "p", 2)
	for _, h := range s.d.live() {
		s.d.set(h, sdk.StateDone, nil)
	}
	s.tamper = func(w Work, res *Result) {
		if w.Kind == WorkRelease {
			require.Len(t, res.Errs, 2)
			res.Errs = res.Errs[:1]
		}
	}
	s.stash = mergeReady(s.stash, s.drive(s.c.Poll(s.now)))
	s.tamper = nil
	assert.True(t, hasAlert(s.stash, "transfer_release_failed"))
	assert.Zero(t, s.seen["r"], "reported with a release unanswered")
	assert.Equal(t, repeat(OwnerTransfer, 2), s.owners(blocks))
	s.stash = Ready{}
	rd := s.poll()
	assert.Equal(t, []RequestID{"r"}, rd.FinishedReceiving, "released again, it finishes")
}
