package core

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// Rule 8, holding is bounded, with rule 1: a handle that never turns
// terminal is bounded by the hold cap. With a fence the blocks come back
// safe once the epoch is fenced; without one they are quarantined, never
// reused; only an explicit policy hands them back (EscalateReleaseAndReuse).
func TestHandleThatNeverTurnsTerminalIsBoundedByCap(t *testing.T) {
	for _, tc := range []struct {
		policy      EscalationPolicy
		fence       bool
		quarantined bool
	}{
		{EscalateFence, true, false},
		{EscalateQuarantine, false, true},
		{EscalateReleaseAndReuse, false, false},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			s := openSrig(t, Config{HoldCap: time.Minute, Escalation: tc.policy}, nil)
			s.connect(peerSpec("p", 2))
			blocks := s.read("r", "p", 1) // its handle stays IN_PROGRESS
			s.now = s.now.Add(time.Minute - time.Nanosecond)
			rd := s.poll()
			require.True(t, rd.Empty(), "escalated before the cap: %+v", rd)

			s.now = s.now.Add(time.Nanosecond)
			rd = s.poll()
			if tc.fence {
				assert.Equal(t, []Epoch{1}, rd.Fence)
				assert.True(t, hasAlert(rd, "hold_cap_fence"))
				assert.Empty(t, rd.Failed, "reported before the fence")
				assert.Equal(t, OwnerTransfer, s.c.Owner(blocks[0]))
				assert.Equal(t, []Epoch{1}, s.poll().Fence, "the fence is asked every round until done")
				s.dead[1] = true // the host killed the process
				s.c.Inbox().Fenced(1)
				rd = s.poll()
				assert.Empty(t, rd.Fence)
			}
			require.Equal(t, []RequestID{"r"}, failedIDs(rd))
			assert.ErrorIs(t, rd.Failed[0].Reason, ErrHoldCap)
			assert.Contains(t, rd.Failed[0].Reason.Error(), "retained false", "the reason says whether the handle was retained")
			if tc.quarantined {
				assert.Equal(t, blocks, rd.Quarantined)
				assert.Empty(t, rd.InvalidBlocks, "quarantined blocks are not handed back")
				assert.Equal(t, OwnerQuarantined, s.c.Owner(blocks[0]))
				assert.Equal(t, len(blocks), s.c.Stats().Quarantined, "Stats counts the quarantined blocks")
				got, err := s.c.Alloc(s.pool, srigBlocks-1)
				require.NoError(t, err)
				assert.NotContains(t, got, blocks[0].Block)
				_, err = s.c.Alloc(s.pool, 1)
				assert.Error(t, err, "a quarantined block was handed out")
			} else {
				assert.Equal(t, blocks, rd.InvalidBlocks)
				assert.Equal(t, OwnerEngine, s.c.Owner(blocks[0]))
			}
			if !tc.fence {
				assert.True(t, hasAlert(rd, "transfer_force_released"))
				assert.Equal(t, 1, s.c.Stats().Leaked)
				require.ErrorIs(t, s.closeCore(), ErrHeld, "Close stopped a transport that still runs a transfer")
				s.kill(1)
			}
		})
	}
}

// Rules 8 and 14: a retained transfer held past the cap is escalated to a
// fence; after it every handle of the epoch is terminal, a new epoch works,
// and a stale report about the old epoch changes nothing. The double's
// Cancel changes nothing, as UCX's.
func TestRetainedPastTheCapIsFencedAndANewEpochWorks(t *testing.T) {
	s := openSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 2))
	blocks := s.read("r", "p", 1) // its handle stays IN_PROGRESS
	s.now = s.now.Add(DefaultHoldCap / 2)
	require.NoError(t, s.c.RemovePeer(s.now, "p"))
	s.settle()
	s.now = s.now.Add(DefaultHoldCap - time.Second)
	assert.Empty(t, s.poll().Fence, "the cap of a retained handle runs from its retirement")
	s.now = s.now.Add(time.Second)
	assert.Equal(t, []Epoch{1}, s.poll().Fence)
	require.Error(t, s.c.Attach(2, newDouble().desc, true), "attach while epoch 1 is attached")
	s.kill(1)
	rd := s.poll()
	assert.Equal(t, []RequestID{"r"}, failedIDs(rd))
	for _, a := range s.all.Alerts {
		if a.Kind == "hold_cap_fence" {
			assert.ErrorIs(t, a.Err, ErrHoldCap)
			assert.Contains(t, a.Err.Error(), "retained true", "the alert says the handle was retained")
		}
	}
	assert.True(t, hasAlert(s.all, "hold_cap_fence"))
	assert.Equal(t, blocks, rd.InvalidBlocks)
	assert.Zero(t, s.c.Stats().RetiredPeers, "the dead epoch's peer went with it")

	// A new transport process, epoch 2.
	require.Error(t, s.c.Attach(1, newDouble().desc, true), "epochs must grow")
	s.attach(2, nil)
	s.connect(peerSpec("p", 2))
	s.read("r2", "p", 2)
	s.c.Fenced(1) // stale: must not touch epoch 2
	s.done()
	s.reported("r2")
	assert.Equal(t, []RequestID{"r2"}, s.all.FinishedReceiving)
}

// Rule 8 under churn: however many handles came and went before (their
// hold-cap entries are compacted away), a handle that never turns terminal
// is still escalated at its cap.
func TestHoldCapHoldsUnderChurn(t *testing.T) {
	s := newSrig(t, Config{HoldCap: time.Minute, Escalation: EscalateQuarantine}, nil)
	s.connect(peerSpec("p", 1))
	stuck := s.read("stuck", "p", 1)
	for i := range 1500 {
		id := RequestID(fmt.Sprint("r", i))
		b := s.read(id, "p", 1)
		s.d.set(s.d.live()[1], sdk.StateDone, nil)
		s.poll()
		require.Equal(t, 1, s.seen[id])
		require.NoError(t, s.c.Free(b[0].Pool, []uint32{b[0].Block}))
	}
	assert.Less(t, len(s.c.holdQ)-s.c.holdHead, 1500, "entries of released handles are compacted")
	s.now = s.now.Add(time.Minute)
	rd := s.poll()
	assert.Equal(t, []RequestID{"stuck"}, failedIDs(rd), "the stuck handle was not escalated at its cap")
	assert.Equal(t, stuck, rd.Quarantined)
}

// Memory follows what is in flight: hold-cap entries popped as time passes
// do not pile up however many handles come and go.
func TestHoldQueueFollowsWhatIsInFlight(t *testing.T) {
	s := newSrig(t, Config{HoldCap: time.Second}, nil)
	s.connect(peerSpec("p", 1))
	for i := range 1500 {
		id := RequestID(fmt.Sprint("r", i))
		b := s.read(id, "p", 1)
		s.d.set(s.d.live()[0], sdk.StateDone, nil)
		s.poll()
		require.Equal(t, 1, s.seen[id])
		require.NoError(t, s.c.Free(b[0].Pool, []uint32{b[0].Block}))
		s.now = s.now.Add(time.Second)
	}
	s.poll()
	assert.LessOrEqual(t, len(s.c.holdQ), 4, "hold-cap entries of released handles pile up")
	assert.Empty(t, s.all.Failed, "a released handle was escalated")
}
