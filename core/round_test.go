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
	rd := s.c.Poll(s.now)
	s.stash = mergeReady(s.stash, rd)
	for work := rd.Work; len(work) > 0; {
		for _, w := range work {
			res, err := s.d.exec(w)
			if w.Kind == WorkPoll {
				require.Len(t, res.States, 2)
				res.States = res.States[:1] // the transport lost one
			}
			s.c.Done(w.ID, res, err)
		}
		next := s.c.Ready()
		s.stash = mergeReady(s.stash, next)
		work = next.Work
	}
	assert.True(t, hasAlert(s.stash, "transfer_poll_failed"))
	assert.Equal(t, 1, s.c.Stats().Live, "a handle without a state was released")
	assert.Zero(t, s.seen["r"])
	assert.Equal(t, repeat(OwnerTransfer, 2), s.owners(blocks))
	s.stash = Ready{}
	rd = s.poll()
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
