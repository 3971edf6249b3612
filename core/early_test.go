package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// sendFrom sends msgs from remote rank k to the local agent.
func (r *rig) sendFrom(k int, msgs ...[]byte) {
	r.t.Helper()
	rm := r.loadBack(k)
	var out []sdk.OutboundNotification
	for _, m := range msgs {
		out = append(out, sdk.OutboundNotification{Peer: rm.back, Message: m})
	}
	errs, err := rm.tr.SendNotifications(r.ctx, out)
	require.NoError(r.t, err)
	require.NoError(r.t, firstErr(errs))
}

// drained polls until the local Core has taken the marker notification
// ConsumedMessage("marker", ...) (kept as an early one), so that every
// notification a rank sent before it was drained too.
func (r *rig) drained(marker RequestID) {
	r.t.Helper()
	r.until("notifications drained up to "+string(marker), func(Ready) bool { return r.c.early[marker] != nil })
}

// notifyKind is one side of the notification protocol: how a test expects
// a request (pull send or push receive) and which message finishes it.
type notifyKind struct {
	name   string
	msg    func(RequestID) []byte
	expect func(r *rig, id RequestID, peer string, b []uint32, n int) error
}

var notifyKinds = []notifyKind{
	{"pull send, consumed", func(id RequestID) []byte { return ConsumedMessage(id, tok(id)) }, func(r *rig, id RequestID, peer string, b []uint32, n int) error {
		return r.c.ExpectSend(r.now, SendSpec{Request: id, Token: tok(id), Peer: peer, Pool: r.pool, Blocks: b, Consumers: n, Lease: time.Minute})
	}},
	{"push receive, written", func(id RequestID) []byte { return WrittenMessage(id, tok(id)) }, func(r *rig, id RequestID, peer string, b []uint32, n int) error {
		return r.c.ExpectReceive(r.now, RecvSpec{Request: id, Token: tok(id), Peer: peer, Pool: r.pool, Blocks: b, Producers: n, Lease: time.Minute})
	}},
}

// A notification that arrives after its request was reported (late, or a
// duplicate) never finishes a later request under the same id: that one's
// blocks stay pinned, with nothing written into or read from them yet.
func TestLateNotificationNeverFinishesAReusedID(t *testing.T) {
	for _, k := range notifyKinds {
		t.Run(k.name, func(t *testing.T) {
			r := newRig(t, rigOpts{cfg: Config{Escalation: EscalateQuarantine}})
			r.connect("p")
			require.NoError(t, k.expect(r, "x", "p", r.alloc(1), 1))
			r.now = r.now.Add(time.Minute)
			r.reported("x")     // the lease expired first
			delete(r.seen, "x") // the id is reused below
			r.sendFrom(0, k.msg("x"), ConsumedMessage("marker", tok("marker")))
			r.drained("marker")
			assert.True(t, hasAlert(r.all, "late_notification_dropped"))
			b := r.alloc(1)
			require.NoError(t, k.expect(r, "x", "p", b, 1))
			rd := r.poll()
			assert.Empty(t, rd.FinishedSending, "the late notification finished the new request")
			assert.Empty(t, rd.FinishedReceiving, "the late notification finished the new request")
			assert.Equal(t, OwnerTransfer, r.c.Owner(BlockRef{r.pool, b[0]}))
			r.sendFrom(0, k.msg("x")) // the new request's own notification
			r.reported("x")
			assert.Equal(t, OwnerEngine, r.c.Owner(BlockRef{r.pool, b[0]}))
		})
	}
}

// Notifications kept for a request not registered yet expire by age: a
// stale one neither counts for a request registered later nor takes a
// place that a fresh one needs.
func TestEarlyNotificationsExpire(t *testing.T) {
	for _, k := range notifyKinds {
		t.Run(k.name, func(t *testing.T) {
			r := newRig(t, rigOpts{cfg: Config{MaxEarlyNotifications: 2, EarlyNotificationAge: time.Minute}})
			r.connect("p")
			r.sendFrom(0, k.msg("stale"), ConsumedMessage("marker", tok("marker")))
			r.drained("marker")
			r.now = r.now.Add(time.Minute)
			r.sendFrom(0, k.msg("fresh"), ConsumedMessage("marker2", tok("marker2")))
			r.drained("marker2")
			assert.False(t, hasAlert(r.all, "early_notification_dropped"), "stale notifications filled the bound")
			b := r.alloc(2)
			require.NoError(t, k.expect(r, "stale", "p", b[:1], 1))
			require.NoError(t, k.expect(r, "fresh", "p", b[1:], 1))
			r.poll()
			r.reported("fresh")
			assert.Equal(t, OwnerTransfer, r.c.Owner(BlockRef{r.pool, b[0]}), "a stale notification counted")
			assert.Zero(t, r.seen["stale"])
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
				r := newRig(t, rigOpts{})
				r.connect("p")
				b := r.alloc(1)
				if !early {
					require.NoError(t, k.expect(r, "x", "p", b, 2))
				}
				r.sendFrom(0, k.msg("x"), k.msg("x"), ConsumedMessage("marker", tok("marker")))
				r.drained("marker")
				if early {
					require.NoError(t, k.expect(r, "x", "p", b, 2))
				}
				r.poll()
				assert.Zero(t, r.seen["x"], "a duplicated notification finished the request")
				assert.Equal(t, OwnerTransfer, r.c.Owner(BlockRef{r.pool, b[0]}))
				r.sendFrom(1, k.msg("x"))
				r.reported("x")
				assert.Equal(t, OwnerEngine, r.c.Owner(BlockRef{r.pool, b[0]}))
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
				r := newRig(t, rigOpts{})
				ps := r.spec("p")
				ps.Ranks = ps.Ranks[:1] // pre1 is no rank of p
				require.NoError(t, r.connectPeer(ps))
				b := r.alloc(1)
				if !early {
					require.NoError(t, k.expect(r, "x", "p", b, 1))
				}
				r.sendFrom(1, k.msg("x"), ConsumedMessage("marker", tok("marker")))
				r.drained("marker")
				if early {
					require.NoError(t, k.expect(r, "x", "p", b, 1))
				}
				r.poll()
				assert.True(t, hasAlert(r.all, "notification_from_stranger"))
				assert.Zero(t, r.seen["x"], "a stranger's notification finished the request")
				assert.Equal(t, OwnerTransfer, r.c.Owner(BlockRef{r.pool, b[0]}))
				r.sendFrom(0, k.msg("x"))
				r.reported("x")
				assert.Equal(t, OwnerEngine, r.c.Owner(BlockRef{r.pool, b[0]}))
			})
		}
	}
}

// recentIDs keeps the last max ids and forgets the oldest past it; an id
// added twice is kept until its latest addition is evicted.
func TestRecentIDsIsBounded(t *testing.T) {
	k := func(id RequestID) recentKey { return recentKey{id: id} }
	s := newRecentIDs(3)
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
