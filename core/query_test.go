package core

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// What the runtime schedules rounds by (the caller's obligation 4), the
// Next every Ready carries: an idle Core waits for nothing and has no
// deadline, so an idle host makes no transport call; each kind of pending
// work makes it wait for the transport, or retry; At is the earliest lease
// or hold-cap deadline; WaitResults holds while a round's queries are
// outstanding. when is the schedule a Ready taken now would carry.
func TestSchedule(t *testing.T) {
	when := func(s *srig) Wait { return s.c.next().When }
	// A reported request's deadline is dropped lazily, when it passes: at
	// most one round too many.
	noDeadline := func(t *testing.T, s *srig, what string) {
		t.Helper()
		assert.True(t, s.c.next().At.IsZero(), "a deadline %s", what)
	}
	t.Run("idle, then a send until its notification", func(t *testing.T) {
		s := newSrig(t, Config{}, nil)
		assert.Equal(t, WaitIdle, when(s), "with nothing pending")
		noDeadline(t, s, "with nothing pending")
		s.connect(peerSpec("p", 1))
		assert.Equal(t, WaitIdle, when(s), "with a peer connected")
		noDeadline(t, s, "with a peer connected")
		assert.True(t, s.c.Connected("p"))
		assert.False(t, s.c.Connected("q"))

		require.NoError(t, s.c.ExpectSend(s.now, SendSpec{Request: "s", Token: tok("s"), Pool: s.pool, Blocks: mustAlloc(t, s, 1), Consumers: 1, Lease: 10 * time.Second}))
		rd := s.c.Ready()
		assert.Equal(t, WaitTransport, rd.Next.When, "a send awaits its notification")
		assert.Equal(t, s.now.Add(10*time.Second).UnixNano(), rd.Next.At.UnixNano(), "the lease")
		s.stash = mergeReady(s.stash, s.drive(rd))

		rd = s.c.Poll(s.now)
		require.NotEmpty(t, rd.Work)
		assert.Equal(t, WaitResults, rd.Next.When, "the round's queries are outstanding")
		assert.Equal(t, len(rd.Work), rd.Next.Outstanding)
		s.stash = mergeReady(s.stash, s.drive(rd))
		assert.Equal(t, WaitTransport, when(s), "the round's queries are reported")
		assert.Zero(t, s.c.next().Outstanding)

		s.d.inbox = append(s.d.inbox, sdk.Notification{From: "p0", Message: ConsumedMessage("s", tok("s"))})
		rd = s.poll()
		require.Equal(t, 1, s.seen["s"])
		assert.Equal(t, WaitIdle, rd.Next.When, "once the send is reported")

		require.NoError(t, s.c.RemovePeer(s.now, "p"))
		s.settle()
		s.poll()
		assert.False(t, s.c.Connected("p"), "a removed peer is not connected")
		assert.Equal(t, WaitIdle, when(s), "once the peer is removed")
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
		assert.Equal(t, start.Add(6*time.Second).UnixNano(), s.c.next().At.UnixNano(), "the read's hold cap comes before the send's lease")
		s.d.set(s.d.live()[0], sdk.StateDone, nil)
		s.poll()
		s.now = start.Add(6 * time.Second)
		s.poll()
		assert.Equal(t, start.Add(10*time.Second).UnixNano(), s.c.next().At.UnixNano(), "the lease, once the hold cap passed")
		assert.Equal(t, WaitTransport, when(s), "a send in flight")
	})
	t.Run("a release to retry", func(t *testing.T) {
		s := newSrig(t, Config{}, nil)
		s.connect(peerSpec("p", 1))
		s.read("r", "p", 1)
		assert.Equal(t, WaitTransport, when(s), "a read in flight")
		s.d.set(s.d.live()[0], sdk.StateDone, nil)
		s.d.failItem(WorkRelease, 0, errBackend, 1)
		rd := s.poll()
		assert.Equal(t, WaitRetry, rd.Next.When, "a failed release is retried without a transport event")
		s.poll()
		require.Equal(t, 1, s.seen["r"])
		assert.Equal(t, WaitIdle, when(s), "once released and reported")
	})
	t.Run("a fence asked for", func(t *testing.T) {
		s := newSrig(t, Config{}, nil)
		s.connect(peerSpec("p", 1))
		s.d.failWhole(WorkPost, sdk.Errorf(sdk.CodeTimeout, "double: injected"), 1)
		s.read("r", "p", 1)
		rd := s.poll()
		require.Equal(t, []Epoch{1}, rd.Fence)
		assert.Equal(t, WaitRetry, rd.Next.When, "a fence asked for and not reported")
		s.kill(1)
		s.poll()
		require.Equal(t, 1, s.seen["r"])
		assert.Equal(t, WaitIdle, when(s))
	})
	t.Run("an inbox to drain", func(t *testing.T) {
		s := newSrig(t, Config{}, nil)
		s.c.Inbox().HandshakeFailed("q", errBackend)
		assert.Equal(t, WaitTransport, when(s), "the inbox holds work for the owner")
		s.poll()
		assert.Equal(t, WaitIdle, when(s))
	})
	t.Run("Work outstanding", func(t *testing.T) {
		s := newSrig(t, Config{}, nil)
		require.NoError(t, s.c.ConnectPeer(peerSpec("p", 1)))
		rd := s.c.Ready()
		require.NotEmpty(t, rd.Work)
		assert.Equal(t, WaitTransport, rd.Next.When, "a handshake's Work is outstanding")
		assert.Equal(t, len(rd.Work), rd.Next.Outstanding)
		s.stash = mergeReady(s.stash, s.drive(rd))
		assert.Equal(t, WaitIdle, when(s))
	})
}

// WaitResults holds while any of a round's queries (Notifications, Events,
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
			assert.Equal(t, WaitTransport, post.Next.When, "a Post is not a round's query")
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
			assert.Equal(t, WaitResults, s.c.next().When, "%v is outstanding", query)
			again := s.c.Poll(s.now)
			for _, w := range again.Work {
				assert.NotContains(t, []WorkKind{WorkNotifications, WorkEvents, WorkPoll}, w.Kind, "asked again while a query is outstanding")
			}
			res, err = s.d.exec(kinds[query])
			s.c.Done(kinds[query].ID, res, err)
			assert.NotEqual(t, WaitResults, s.c.Ready().Next.When)
		})
	}
}
