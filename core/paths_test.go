package core

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// These tests drive core through the scripted double: every call can fail,
// whole or per item, at any step, and nothing depends on timing.

var errBackend = sdk.Errorf(sdk.CodeBackend, "double: injected")

// Rule 2: a Release that fails as a whole with NOT_FOUND is a failed call,
// not proof that the handle is gone: the handle and its blocks stay held and
// the release is retried next round.
func TestWholeCallNotFoundOnReleaseRetains(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 1))
	blocks := s.read("r", "p", 1)
	s.d.set(s.d.live()[0], sdk.StateDone, nil)
	s.d.failWhole(WorkRelease, sdk.Errorf(sdk.CodeNotFound, "double: whole call"), 1)
	rd := s.poll()
	assert.Empty(t, rd.FinishedReceiving, "reported before its handle was released")
	assert.True(t, hasAlert(rd, "transfer_release_failed"))
	assert.Equal(t, 1, s.c.Stats().Live)
	assert.Equal(t, []Owner{OwnerTransfer}, s.owners(blocks))
	assert.Equal(t, uint64(1), s.d.held().Handles)

	rd = s.poll()
	assert.Equal(t, []RequestID{"r"}, rd.FinishedReceiving)
	assert.Equal(t, []Owner{OwnerEngine}, s.owners(blocks))
	assert.Zero(t, s.d.held().Handles)
}

// An item-level NOT_FOUND on a release means the handle is already gone (an
// earlier release that timed out took effect): released.
func TestItemNotFoundOnReleaseCountsAsReleased(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 1))
	blocks := s.read("r", "p", 1)
	s.d.set(s.d.live()[0], sdk.StateDone, nil)
	s.d.failItem(WorkRelease, 0, sdk.Errorf(sdk.CodeNotFound, "double: gone"), 1)
	rd := s.poll()
	assert.Equal(t, []RequestID{"r"}, rd.FinishedReceiving)
	assert.Equal(t, []Owner{OwnerEngine}, s.owners(blocks))
}

// Rule 5, handshakes are journaled: a dlist whose release fails during the
// rollback of a failed handshake stays journaled, and so does its rank's
// peer, which stays loaded while the dlist names it (rule 12's order); the
// caller sees the original error, and the next setup of the peer releases
// the dlist, then the peer, before acquiring anything.
func TestDlistReleaseFailingDuringRollback(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.d.failItem(WorkPrepareDescriptors, 1, errBackend, 1) // rank 1's dlist fails
	s.d.failItem(WorkReleaseDescriptors, 0, errBackend, 1) // rank 0's rollback fails
	require.NoError(t, s.c.ConnectPeer(peerSpec("p", 2)))
	s.settle()
	var hsErr error
	for _, a := range s.stash.Alerts {
		if a.Kind == "handshake_failed" {
			hsErr = a.Err
		}
	}
	require.Error(t, hsErr)
	assert.Contains(t, hsErr.Error(), "prepare rank 1", "the original error")
	assert.True(t, hasAlert(s.stash, "handshake_rollback_failed"))
	assert.Equal(t, 2, s.c.Stats().Journal, "the dlist whose release failed stays journaled, with its rank's peer")
	assert.Equal(t, uint64(2), s.d.held().Dlists, "the pool's dlist and the leftover")
	assert.Equal(t, uint64(1), s.d.held().Peers, "rank 1's peer was unloaded, rank 0's is kept for its dlist")
	assert.False(t, s.c.Connected("p"))

	before := len(s.d.calls)
	s.connect(peerSpec("p", 2))
	require.True(t, s.c.Connected("p"))
	calls := s.d.calls[before:]
	require.GreaterOrEqual(t, len(calls), 3)
	assert.Contains(t, calls[0], "ReleaseDescriptors", "the leftover dlist goes first")
	assert.Contains(t, calls[1], "UnloadPeers", "then the peer it named")
	assert.Contains(t, calls[2], "LoadPeers")
	assert.Zero(t, s.c.Stats().Journal)
	assert.Equal(t, uint64(3), s.d.held().Dlists, "the pool's and the new setup's two")
}

// Rules 2 and 8: a terminal handle whose Release keeps failing stays held
// with its blocks; past the hold cap it is escalated to a fence, and only
// the fence hands its blocks back.
func TestReleaseFailingPastTheHoldCap(t *testing.T) {
	s := newSrig(t, Config{HoldCap: time.Minute}, nil)
	s.connect(peerSpec("p", 1))
	blocks := s.read("r", "p", 1)
	s.d.set(s.d.live()[0], sdk.StateDone, nil)
	s.d.failItem(WorkRelease, 0, errBackend, -1)
	for range 3 {
		rd := s.poll()
		assert.Empty(t, rd.FinishedReceiving)
		assert.Empty(t, rd.Fence)
	}
	assert.Equal(t, 3, s.d.count(WorkRelease), "retried every round")
	s.now = s.now.Add(time.Minute)
	rd := s.poll()
	assert.Equal(t, []Epoch{1}, rd.Fence)
	assert.True(t, hasAlert(rd, "hold_cap_fence"))
	assert.Empty(t, failedIDs(rd), "reported before the fence")
	assert.Equal(t, []Owner{OwnerTransfer}, s.owners(blocks))

	s.kill(1)
	rd = s.poll()
	require.Equal(t, []RequestID{"r"}, failedIDs(rd))
	assert.ErrorIs(t, rd.Failed[0].Reason, ErrHoldCap)
	assert.Equal(t, blocks, rd.InvalidBlocks)
	assert.Equal(t, []Owner{OwnerEngine}, s.owners(blocks))
}

// Rules 5 and 14: journal leftovers die with their epoch's process; a
// reconnect on the new epoch never releases the old epoch's ids there.
func TestFenceWithJournalLeftoversThenReconnect(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.d.failItem(WorkPrepareDescriptors, 1, errBackend, 1)
	s.d.failItem(WorkUnloadPeers, 0, errBackend, 1)
	require.NoError(t, s.c.ConnectPeer(peerSpec("p", 2)))
	s.settle()
	require.Equal(t, 1, s.c.Stats().Journal, "one loaded rank could not be unloaded")

	s.kill(1)
	assert.Zero(t, s.c.Stats().Journal, "the fence took the leftovers with the process")
	s.poll()
	s.attach(2, nil)
	ok, err := s.c.PoolReady(s.pool)
	require.NoError(t, err)
	require.True(t, ok, "the pool is registered again in epoch 2")
	s.connect(peerSpec("p", 2))
	require.True(t, s.c.Connected("p"))
	for _, c := range s.ds[2].calls {
		assert.NotContains(t, c, "UnloadPeers", "an id of epoch 1 was released in epoch 2")
		assert.NotContains(t, c, "ReleaseDescriptors")
	}
	blocks := s.read("r", "p", 2)
	for _, h := range s.d.live() {
		s.d.set(h, sdk.StateDone, nil)
	}
	rd := s.poll()
	assert.Equal(t, []RequestID{"r"}, rd.FinishedReceiving)
	assert.Equal(t, repeat(OwnerEngine, 2), s.owners(blocks))
}

// docs/fencing.md: a fence that covers only initiated transfers does not stop a
// consumer reading our blocks, so an ExpectSend keeps them until its lease;
// one that covers incoming transfers hands them back at once.
func TestExpectSendAtAFence(t *testing.T) {
	for _, tc := range []struct {
		scope    sdk.FenceScope
		released bool
	}{{sdk.FenceInitiated, false}, {sdk.FenceInitiatedAndIncoming, true}} {
		t.Run(fmt.Sprint(tc.scope), func(t *testing.T) {
			s := newSrig(t, Config{}, func(d *double) { d.desc.FenceScope = tc.scope })
			b, err := s.c.Alloc(s.pool, 2)
			require.NoError(t, err)
			blocks := []BlockRef{{s.pool, b[0]}, {s.pool, b[1]}}
			require.NoError(t, s.c.ExpectSend(s.now, SendSpec{Request: "s", Token: tok("s"), Pool: s.pool, Blocks: b, Consumers: 1, Lease: 10 * time.Second}))
			s.poll()
			s.kill(1)
			rd := s.poll()
			if tc.released {
				assert.Equal(t, []RequestID{"s"}, failedIDs(rd))
				assert.Equal(t, repeat(OwnerEngine, 2), s.owners(blocks))
				return
			}
			assert.Empty(t, failedIDs(rd))
			assert.Empty(t, rd.FinishedSending)
			assert.Equal(t, repeat(OwnerTransfer, 2), s.owners(blocks), "a consumer may still read them")
			s.now = s.now.Add(10 * time.Second)
			rd = s.poll()
			assert.Len(t, slicesConcat(rd.FinishedSending, failedIDs(rd)), 1, "reported at its lease")
			assert.Equal(t, repeat(OwnerEngine, 2), s.owners(blocks))
		})
	}
}

func slicesConcat(a, b []RequestID) []RequestID { return append(append([]RequestID(nil), a...), b...) }

// Rule 12: a pool whose dlist release fails at Close keeps Close from
// stopping the transport; Close says so once, and the next Close retries.
func TestPoolReleaseFailingAtClose(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.d.failItem(WorkReleaseDescriptors, 0, errBackend, 1)
	err := s.closeCore()
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrHeld)
	assert.Contains(t, err.Error(), "local dlist")
	assert.False(t, s.d.closed, "the transport was closed with a pool's dlist held")
	assert.Equal(t, uint64(1), s.d.held().Dlists)
	assert.Equal(t, uint64(1), s.d.held().Regions, "a region deregistered under its live dlist")

	require.NoError(t, s.closeCore())
	assert.True(t, s.d.closed)
	assert.True(t, s.d.held().Zero())
}

// closeCore calls Close, running its Work, until it returns nil, another
// error than ErrHeld, or ErrHeld with nothing left to run.
func (s *srig) closeCore() error {
	for range maxWorkSteps {
		err := s.c.Close(s.now)
		rd := s.c.Ready()
		if err == nil || !errors.Is(err, ErrHeld) || len(rd.Work) == 0 {
			s.stash = mergeReady(s.stash, s.drive(rd))
			return err
		}
		s.stash = mergeReady(s.stash, s.drive(rd))
	}
	require.FailNow(s.t, "Close keeps handing out Work and returning ErrHeld")
	return nil
}

// A Done for a Work that is not outstanding (reported twice) is an Alert and
// changes nothing: no second report, no crash.
func TestWorkReportedTwiceIsIgnored(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 1))
	require.NoError(t, s.c.Read(s.now, ReadSpec{Request: "r", Token: tok("r"), Peer: "p", Parts: []Part{{Pool: s.pool, Local: mustAlloc(t, s, 1), Remote: []uint32{0}}}}))
	rd := s.c.Ready()
	require.Len(t, rd.Work, 1)
	w := rd.Work[0]
	res, err := s.d.exec(w)
	s.c.Done(w.ID, res, err)
	s.c.Done(w.ID, res, err)
	rd = s.c.Ready()
	assert.True(t, hasAlert(rd, "work_unknown"))
	assert.Equal(t, 1, s.c.Stats().Live, "the second report posted nothing more")
	s.d.set(s.d.live()[0], sdk.StateDone, nil)
	s.poll()
	assert.Equal(t, 1, s.seen["r"])
}

// A request finished twice (a bug) is caught by whoever counts reports:
// removing it from the index twice must not crash first.
func TestRequestIndexRemoveTwiceDoesNotCrash(t *testing.T) {
	ix := newReqIndex()
	r := &request{id: "x"}
	ix.add(r)
	ix.remove(r)
	require.NotPanics(t, func() { ix.remove(r) })
	assert.Zero(t, ix.len())
	assert.Nil(t, ix.get("x"))
}

func mustAlloc(t *testing.T, s *srig, n int) []uint32 {
	t.Helper()
	b, err := s.c.Alloc(s.pool, n)
	require.NoError(t, err)
	return b
}

// A transport whose calls keep timing out is wedged: after WedgedAfter
// consecutive timeouts core asks for a fence; a success in between resets
// the count.
func TestWedgedTransportIsFenced(t *testing.T) {
	timeout := sdk.Errorf(sdk.CodeTimeout, "double: call timed out")
	s := newSrig(t, Config{WedgedAfter: 3}, nil)
	s.connect(peerSpec("p", 1))
	s.read("r", "p", 1)
	s.c.events = false
	s.d.failWhole(WorkPoll, timeout, 2)
	s.d.failWhole(WorkNotifications, timeout, 2)
	rd := s.poll() // Notifications and Poll time out: 2
	assert.Empty(t, rd.Fence)
	rd = s.poll() // Notifications times out (3) then Poll too (4)
	assert.Equal(t, []Epoch{1}, rd.Fence)
	assert.True(t, hasAlert(rd, "transport_wedged"))

	s2 := newSrig(t, Config{WedgedAfter: 3}, nil)
	s2.connect(peerSpec("p", 1))
	s2.read("r", "p", 1)
	s2.c.events = false
	s2.d.failWhole(WorkPoll, timeout, 3) // Notifications succeeds in between
	for range 3 {
		assert.Empty(t, s2.poll().Fence, "a success in between resets the count")
	}
}

// Rule 6: a Post whose peer is removed while it is outstanding: its handles
// are retained (blocks pinned) and canceled when its result arrives.
func TestPostOutstandingWhenThePeerIsRemoved(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 1))
	b := mustAlloc(t, s, 1)
	require.NoError(t, s.c.Read(s.now, ReadSpec{Request: "r", Token: tok("r"), Peer: "p", Parts: []Part{{Pool: s.pool, Local: b, Remote: []uint32{0}}}}))
	rd := s.c.Ready()
	require.Len(t, rd.Work, 1)
	require.NoError(t, s.c.RemovePeer(s.now, "p"))
	s.stash = mergeReady(s.stash, s.drive(rd))
	blocks := []BlockRef{{s.pool, b[0]}}
	assert.Equal(t, []Owner{OwnerRetained}, s.owners(blocks))
	assert.Equal(t, 1, s.d.count(WorkCancel), "the late handle was canceled")
	assert.Equal(t, 1, s.c.Stats().RetiredPeers, "the peer's natives wait for the handle")
	s.d.set(s.d.live()[0], sdk.StateCanceled, nil)
	rd = s.poll()
	assert.Equal(t, []RequestID{"r"}, failedIDs(rd))
	assert.Equal(t, []Owner{OwnerEngine}, s.owners(blocks))
	assert.Zero(t, s.c.Stats().RetiredPeers)
	assert.Equal(t, uint64(1), s.d.held().Dlists, "only the pool's dlist is left")
	assert.Zero(t, s.d.held().Peers)
}

// Rule 14: a fence while a Post is outstanding: its result never arrives
// (the process died with it), the request fails and its blocks come back.
func TestFenceWhilePostOutstanding(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 1))
	b := mustAlloc(t, s, 1)
	require.NoError(t, s.c.Read(s.now, ReadSpec{Request: "r", Token: tok("r"), Peer: "p", Parts: []Part{{Pool: s.pool, Local: b, Remote: []uint32{0}}}}))
	rd := s.c.Ready()
	require.Len(t, rd.Work, 1)
	s.kill(1)
	s.stash = mergeReady(s.stash, s.drive(rd)) // reported after the fence: ignored
	rd = s.poll()
	require.Equal(t, []RequestID{"r"}, failedIDs(rd))
	assert.ErrorIs(t, rd.Failed[0].Reason, ErrFenced)
	assert.Equal(t, []Owner{OwnerEngine}, s.owners([]BlockRef{{s.pool, b[0]}}))
	assert.False(t, hasAlert(s.all, "work_unknown"), "a late report of a fenced epoch is expected, not an anomaly")
}

// Rule 1, nothing is released while it may still be touched: a Post whose
// outcome is unknown (timed out) keeps the request's blocks until its epoch
// is fenced.
func TestPostTimeoutPinsUntilFence(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 1))
	s.d.failWhole(WorkPost, sdk.Errorf(sdk.CodeTimeout, "double: post timed out"), 1)
	s.d.faults[len(s.d.faults)-1].applied = true
	blocks := s.read("r", "p", 1)
	rd := s.poll()
	assert.Equal(t, []Epoch{1}, rd.Fence)
	assert.Empty(t, failedIDs(rd))
	assert.Equal(t, []Owner{OwnerTransfer}, s.owners(blocks))
	s.kill(1)
	rd = s.poll()
	assert.Equal(t, []RequestID{"r"}, failedIDs(rd))
	assert.Equal(t, []Owner{OwnerEngine}, s.owners(blocks))
}
