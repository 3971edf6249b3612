package core

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// sendFrom has the agent of rank k of peer p ("p0", ...) send msgs to the
// double: the next round takes them, in order.
func (s *srig) sendFrom(k int, msgs ...[]byte) {
	for _, m := range msgs {
		s.d.inbox = append(s.d.inbox, sdk.Notification{From: fmt.Sprintf("p%d", k), Message: m})
	}
}

// drained runs a round and checks that it took the marker notification
// ConsumedMessage("marker", ...) (kept as an early one), so that every
// notification a rank sent before it was taken too.
func (s *srig) drained(marker RequestID) {
	s.t.Helper()
	s.poll()
	require.NotNil(s.t, s.c.early[marker], "notifications not drained up to %s", marker)
}

// notifyKind is one side of the notification protocol: how a test expects
// a request (pull send or push receive) and which message finishes it.
type notifyKind struct {
	name   string
	msg    func(RequestID, Token) []byte
	expect func(s *srig, id RequestID, token Token, peer string, b []uint32, n int) error
}

var notifyKinds = []notifyKind{
	{"pull send, consumed", ConsumedMessage, func(s *srig, id RequestID, token Token, peer string, b []uint32, n int) error {
		return s.c.ExpectSend(s.now, SendSpec{Request: id, Token: token, Peer: peer, Pool: s.pool, Blocks: b, Consumers: n, Lease: time.Minute})
	}},
	{"push receive, written", WrittenMessage, func(s *srig, id RequestID, token Token, peer string, b []uint32, n int) error {
		return s.c.ExpectReceive(s.now, RecvSpec{Request: id, Token: token, Peer: peer, Pool: s.pool, Blocks: b, Producers: n, Lease: time.Minute})
	}},
}

// Rule 16, exactly once: a notification that arrives after its request was
// reported (late, or a duplicate) never finishes a later request under the
// same id: that one's blocks stay pinned, with nothing written into or read
// from them yet.
func TestLateNotificationNeverFinishesAReusedID(t *testing.T) {
	for _, k := range notifyKinds {
		t.Run(k.name, func(t *testing.T) {
			s := openSrig(t, Config{Escalation: EscalateQuarantine}, nil)
			s.connect(peerSpec("p", 2))
			require.NoError(t, k.expect(s, "x", tok("x"), "p", s.alloc(1), 1))
			s.now = s.now.Add(time.Minute)
			s.reported("x")     // the lease expired first
			delete(s.seen, "x") // the id is reused below
			s.sendFrom(0, k.msg("x", tok("x")), ConsumedMessage("marker", tok("marker")))
			s.drained("marker")
			assert.True(t, hasAlert(s.all, "late_notification_dropped"))
			b := s.alloc(1)
			// The same id and token is a retry of the reported request
			// (retry.go); a new request under the id draws a new token.
			require.ErrorIs(t, k.expect(s, "x", tok("x"), "p", b, 1), ErrDuplicate)
			require.NoError(t, k.expect(s, "x", tok("x again"), "p", b, 1))
			rd := s.poll()
			assert.Empty(t, rd.FinishedSending, "the late notification finished the new request")
			assert.Empty(t, rd.FinishedReceiving, "the late notification finished the new request")
			assert.Equal(t, OwnerTransfer, s.c.Owner(BlockRef{s.pool, b[0]}))
			s.sendFrom(0, k.msg("x", tok("x again"))) // the new request's own notification
			s.reported("x")
			assert.Equal(t, OwnerEngine, s.c.Owner(BlockRef{s.pool, b[0]}))
		})
	}
}

// Notifications kept for a request not registered yet expire by age: a
// stale one neither counts for a request registered later nor takes a
// place that a fresh one needs.
func TestEarlyNotificationsExpire(t *testing.T) {
	for _, k := range notifyKinds {
		t.Run(k.name, func(t *testing.T) {
			s := openSrig(t, Config{MaxEarlyNotifications: 2, EarlyNotificationAge: time.Minute}, nil)
			s.connect(peerSpec("p", 2))
			s.sendFrom(0, k.msg("stale", tok("stale")), ConsumedMessage("marker", tok("marker")))
			s.drained("marker")
			s.now = s.now.Add(time.Minute)
			s.sendFrom(0, k.msg("fresh", tok("fresh")), ConsumedMessage("marker2", tok("marker2")))
			s.drained("marker2")
			assert.False(t, hasAlert(s.all, "early_notification_dropped"), "stale notifications filled the bound")
			b := s.alloc(2)
			require.NoError(t, k.expect(s, "stale", tok("stale"), "p", b[:1], 1))
			require.NoError(t, k.expect(s, "fresh", tok("fresh"), "p", b[1:], 1))
			s.reported("fresh")
			assert.Equal(t, OwnerTransfer, s.c.Owner(BlockRef{s.pool, b[0]}), "a stale notification counted")
			assert.Zero(t, s.seen["stale"])
		})
	}
}

// A request waiting for n notifications counts n distinct agents, whether
// they come before or after it is registered: one rank notifying twice
// does not stand for another.
func TestNotificationsCountDistinctSenders(t *testing.T) {
	for _, k := range notifyKinds {
		for _, early := range []bool{false, true} {
			name := k.name + ", after the request"
			if early {
				name = k.name + ", before the request"
			}
			t.Run(name, func(t *testing.T) {
				s := openSrig(t, Config{}, nil)
				s.connect(peerSpec("p", 2))
				b := s.alloc(1)
				if !early {
					require.NoError(t, k.expect(s, "x", tok("x"), "p", b, 2))
				}
				s.sendFrom(0, k.msg("x", tok("x")), k.msg("x", tok("x")), ConsumedMessage("marker", tok("marker")))
				s.drained("marker")
				if early {
					require.NoError(t, k.expect(s, "x", tok("x"), "p", b, 2))
				}
				s.poll()
				assert.Zero(t, s.seen["x"], "a duplicated notification finished the request")
				assert.Equal(t, OwnerTransfer, s.c.Owner(BlockRef{s.pool, b[0]}))
				s.sendFrom(1, k.msg("x", tok("x")))
				s.reported("x")
				assert.Equal(t, OwnerEngine, s.c.Owner(BlockRef{s.pool, b[0]}))
			})
		}
	}
}

// A request tied to a peer counts only notifications from that peer's
// ranks, whether they come before or after it is registered.
func TestNotificationsFromStrangersAreIgnored(t *testing.T) {
	for _, k := range notifyKinds {
		for _, early := range []bool{false, true} {
			name := k.name + ", after the request"
			if early {
				name = k.name + ", before the request"
			}
			t.Run(name, func(t *testing.T) {
				s := openSrig(t, Config{}, nil)
				ps := peerSpec("p", 2)
				ps.Ranks = ps.Ranks[:1] // p1 is no rank of p
				require.NoError(t, s.connectPeer(ps))
				b := s.alloc(1)
				if !early {
					require.NoError(t, k.expect(s, "x", tok("x"), "p", b, 1))
				}
				s.sendFrom(1, k.msg("x", tok("x")), ConsumedMessage("marker", tok("marker")))
				s.drained("marker")
				if early {
					require.NoError(t, k.expect(s, "x", tok("x"), "p", b, 1))
				}
				s.poll()
				assert.True(t, hasAlert(s.all, "notification_from_stranger"))
				assert.Zero(t, s.seen["x"], "a stranger's notification finished the request")
				assert.Equal(t, OwnerTransfer, s.c.Owner(BlockRef{s.pool, b[0]}))
				s.sendFrom(0, k.msg("x", tok("x")))
				s.reported("x")
				assert.Equal(t, OwnerEngine, s.c.Owner(BlockRef{s.pool, b[0]}))
			})
		}
	}
}

// recentIDs keeps the last max ids and forgets the oldest past it; an id
// added twice is kept until its latest addition is evicted.
func TestRecentIDsIsBounded(t *testing.T) {
	k := func(id RequestID) recentKey { return recentKey{id: id} }
	s := newRecentIDs[recentKey](3)
	for _, id := range []RequestID{"a", "a", "b"} {
		s.add(k(id))
	}
	s.add(k("c")) // evicts the first a: the second keeps it
	assert.True(t, s.has(k("a")), "forgotten while a later addition is kept")
	assert.False(t, s.has(recentKey{id: "a", written: true}), "a send's id taken for a receive's")
	s.add(k("d")) // evicts the second a
	assert.False(t, s.has(k("a")), "kept past the bound")
	for _, id := range []RequestID{"b", "c", "d"} {
		assert.True(t, s.has(k(id)), id)
	}
	assert.Len(t, s.m, 3)
	assert.Len(t, s.ring, 3)
}
