package core

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// What the runtime schedules rounds by (the caller's obligation 4): an
// idle Core is neither Busy nor Retrying and has no deadline, so an idle
// host makes no transport call; each kind of pending work makes it Busy;
// NextDeadline is the earliest lease or hold-cap deadline; Polling holds
// while a round's queries are outstanding.
func TestSchedulingQueries(t *testing.T) {
	idle := func(t *testing.T, s *srig, what string) {
		t.Helper()
		assert.False(t, s.c.Busy(), "Busy %s", what)
		assert.False(t, s.c.Retrying(), "Retrying %s", what)
		assert.False(t, s.c.Polling(), "Polling %s", what)
	}
	// A reported request's deadline is dropped lazily, when it passes: at
	// most one round too many.
	noDeadline := func(t *testing.T, s *srig, what string) {
		t.Helper()
		_, ok := s.c.NextDeadline()
		assert.False(t, ok, "a deadline %s", what)
	}
	t.Run("idle, then a send until its notification", func(t *testing.T) {
		s := newSrig(t, Config{}, nil)
		idle(t, s, "with nothing pending")
		noDeadline(t, s, "with nothing pending")
		s.connect(peerSpec("p", 1))
		idle(t, s, "with a peer connected")
		noDeadline(t, s, "with a peer connected")
		assert.True(t, s.c.Connected("p"))
		assert.False(t, s.c.Connected("q"))

		require.NoError(t, s.c.ExpectSend(s.now, SendSpec{Request: "s", Token: tok("s"), Pool: s.pool, Blocks: mustAlloc(t, s, 1), Consumers: 1, Lease: 10 * time.Second}))
		s.settle()
		assert.True(t, s.c.Busy(), "a send awaits its notification")
		assert.False(t, s.c.Retrying(), "nothing to retry")
		at, ok := s.c.NextDeadline()
		require.True(t, ok)
		assert.Equal(t, s.now.Add(10*time.Second).UnixNano(), at.UnixNano(), "the lease")

		rd := s.c.Poll(s.now)
		require.NotEmpty(t, rd.Work)
		assert.True(t, s.c.Polling(), "the round's queries are outstanding")
		assert.True(t, s.c.Busy())
		s.stash = mergeReady(s.stash, s.drive(rd))
		assert.False(t, s.c.Polling(), "the round's queries are reported")

		s.d.inbox = append(s.d.inbox, sdk.Notification{From: "p0", Message: ConsumedMessage("s", tok("s"))})
		s.poll()
		require.Equal(t, 1, s.seen["s"])
		idle(t, s, "once the send is reported")

		require.NoError(t, s.c.RemovePeer(s.now, "p"))
		s.settle()
		s.poll()
		assert.False(t, s.c.Connected("p"), "a removed peer is not connected")
		idle(t, s, "once the peer is removed")
		s.now = s.now.Add(10 * time.Second)
		s.poll()
		noDeadline(t, s, "once the lease passed")
	})
	t.Run("a hold-cap deadline before a lease", func(t *testing.T) {
		s := newSrig(t, Config{HoldCap: 5 * time.Second}, nil)
		s.connect(peerSpec("p", 1))
		require.NoError(t, s.c.ExpectSend(s.now, SendSpec{Request: "s", Token: tok("s"), Pool: s.pool, Blocks: mustAlloc(t, s, 1), Consumers: 1, Lease: 10 * time.Second}))
		s.settle()
		start := s.now
		s.now = s.now.Add(time.Second)
		s.read("r", "p", 1)
		at, ok := s.c.NextDeadline()
		require.True(t, ok)
		assert.Equal(t, start.Add(6*time.Second).UnixNano(), at.UnixNano(), "the read's hold cap comes before the send's lease")
		s.d.set(s.d.live()[0], sdk.StateDone, nil)
		s.poll()
		s.now = start.Add(6 * time.Second)
		s.poll()
		at, ok = s.c.NextDeadline()
		require.True(t, ok)
		assert.Equal(t, start.Add(10*time.Second).UnixNano(), at.UnixNano(), "the lease, once the hold cap passed")
		assert.True(t, s.c.Busy(), "a handle in flight")
	})
	t.Run("a release to retry", func(t *testing.T) {
		s := newSrig(t, Config{}, nil)
		s.connect(peerSpec("p", 1))
		s.read("r", "p", 1)
		s.d.set(s.d.live()[0], sdk.StateDone, nil)
		s.d.failItem(WorkRelease, 0, errBackend, 1)
		s.poll()
		assert.True(t, s.c.Retrying(), "a failed release is retried without a transport event")
		assert.True(t, s.c.Busy())
		s.poll()
		require.Equal(t, 1, s.seen["r"])
		idle(t, s, "once released and reported")
	})
	t.Run("a fence asked for", func(t *testing.T) {
		s := newSrig(t, Config{}, nil)
		s.connect(peerSpec("p", 1))
		s.d.failWhole(WorkPost, sdk.Errorf(sdk.CodeTimeout, "double: injected"), 1)
		s.read("r", "p", 1)
		s.poll()
		assert.True(t, s.c.Retrying(), "a fence asked for and not reported")
		s.kill(1)
		s.poll()
		require.Equal(t, 1, s.seen["r"])
		assert.False(t, s.c.Retrying())
		assert.False(t, s.c.Busy())
	})
	t.Run("an inbox to drain", func(t *testing.T) {
		s := newSrig(t, Config{}, nil)
		s.c.Inbox().HandshakeFailed("q", errBackend)
		assert.True(t, s.c.Busy(), "the inbox holds work for the owner")
		s.poll()
		assert.False(t, s.c.Busy())
	})
	t.Run("Work outstanding", func(t *testing.T) {
		s := newSrig(t, Config{}, nil)
		require.NoError(t, s.c.ConnectPeer(peerSpec("p", 1)))
		rd := s.c.Ready()
		require.NotEmpty(t, rd.Work)
		assert.True(t, s.c.Busy(), "a handshake's Work is outstanding")
		s.stash = mergeReady(s.stash, s.drive(rd))
		assert.False(t, s.c.Busy())
	})
}

// Polling holds while any of a round's queries (Notifications, Events,
// Poll) is outstanding, and only then: a round does not ask again while
// one is, and other Work (a Post) is no round query.
func TestPollingCountsTheRoundsQueries(t *testing.T) {
	for _, events := range []bool{false, true} {
		t.Run(fmt.Sprint("events ", events), func(t *testing.T) {
			s := newSrig(t, Config{}, func(d *double) { d.desc.Capabilities.Events = events })
			s.connect(peerSpec("p", 1))
			require.NoError(t, s.c.Read(s.now, ReadSpec{Request: "r", Token: tok("r"), Peer: "p", Parts: []Part{{Pool: s.pool, Local: mustAlloc(t, s, 1), Remote: []uint32{0}}}}))
			post := s.c.Ready()
			require.Len(t, post.Work, 1)
			assert.False(t, s.c.Polling(), "a Post is not a round's query")
			s.stash = mergeReady(s.stash, s.drive(post))

			rd := s.c.Poll(s.now)
			kinds := map[WorkKind]Work{}
			for _, w := range rd.Work {
				kinds[w.Kind] = w
			}
			query := WorkPoll
			if events {
				query = WorkEvents
			}
			require.Contains(t, kinds, WorkNotifications)
			require.Contains(t, kinds, query)
			res, err := s.d.exec(kinds[WorkNotifications])
			s.c.Done(kinds[WorkNotifications].ID, res, err)
			assert.True(t, s.c.Polling(), "%v is outstanding", query)
			again := s.c.Poll(s.now)
			for _, w := range again.Work {
				assert.NotContains(t, []WorkKind{WorkNotifications, WorkEvents, WorkPoll}, w.Kind, "asked again while a query is outstanding")
			}
			res, err = s.d.exec(kinds[query])
			s.c.Done(kinds[query].ID, res, err)
			assert.False(t, s.c.Polling())
		})
	}
}
