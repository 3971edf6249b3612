package core

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// A notification names its request's registration by token: one of an
// earlier request under the same id, arriving late (after the id was
// reported and registered again), never counts for the new registration, so
// a producer never hands back blocks a consumer of the new request is still
// reading, and a consumer never takes as written blocks the new producer has
// not written. Each case registers id "x" with token 1, lets its lease
// expire (reported), registers "x" again with token 2, then delivers the old
// registration's notification: the new one must stay pinned until its own
// notification (token 2) arrives. Scripted over the double: no timing.
func TestLateNotificationOfAnEarlierRegistrationNeverCounts(t *testing.T) {
	const old, fresh Token = 1, 2
	type side struct {
		name string
		// register registers request x with token tok on blocks b and
		// drives it until it only waits for its notification.
		register func(s *srig, tok Token, b []uint32)
		msg      func(tok Token) []byte
		from     string // the agent that notifies
	}
	sides := []side{
		{"pull send, consumed", func(s *srig, tok Token, b []uint32) {
			require.NoError(t, s.c.ExpectSend(s.now, SendSpec{Request: "x", Token: tok, Peer: "p", Pool: s.pool, Blocks: b, Consumers: 1, Lease: time.Minute}))
		}, func(tok Token) []byte { return ConsumedMessage("x", tok) }, "p0"},
		{"push receive, written", func(s *srig, tok Token, b []uint32) {
			require.NoError(t, s.c.ExpectReceive(s.now, RecvSpec{Request: "x", Token: tok, Peer: "p", Pool: s.pool, Blocks: b, Producers: 1, Lease: time.Minute}))
		}, func(tok Token) []byte { return WrittenMessage("x", tok) }, "p0"},
		{"push write, consumed", func(s *srig, tok Token, b []uint32) {
			require.NoError(t, s.c.Write(s.now, WriteSpec{Request: "x", Token: tok, Peer: "p", Parts: []Part{{Pool: s.pool, Local: b, Remote: []uint32{0}}}, Consumers: 1, Lease: time.Minute}))
			s.settle()
			for h := range s.d.handles {
				s.d.handles[h] = sdk.StateDone
			}
			s.poll() // DONE, released, the written notification sent
			require.Zero(t, s.c.Stats().Live)
		}, func(tok Token) []byte { return ConsumedMessage("x", tok) }, "p0"},
	}
	for _, sd := range sides {
		for _, kept := range []bool{false, true} {
			name := sd.name + ", late after the new registration"
			if kept {
				name = sd.name + ", late before it (kept as early)"
			}
			t.Run(name, func(t *testing.T) {
				// MaxEarlyNotifications 1: one later report pushes x out
				// of the recently reported ids, so its late notification is
				// kept as an early one for the next registration of x.
				s := newSrig(t, Config{MaxEarlyNotifications: 1, Escalation: EscalateReleaseAndReuse}, nil)
				s.connect(peerSpec("p", 1))
				sd.register(s, old, mustAlloc(t, s, 1))
				s.now = s.now.Add(time.Minute)
				s.poll()
				require.Equal(t, 1, s.seen["x"], "the first registration's lease expired: reported")
				delete(s.seen, "x") // the id is reused below

				if kept {
					require.NoError(t, s.c.ExpectSend(s.now, SendSpec{Request: "y", Token: tok("y"), Pool: s.pool, Blocks: mustAlloc(t, s, 1), Consumers: 1, Lease: time.Second}))
					s.now = s.now.Add(time.Second)
					s.poll()
					require.Equal(t, 1, s.seen["y"])
					s.d.inbox = append(s.d.inbox, sdk.Notification{From: sd.from, Message: sd.msg(old)})
					s.poll()
					require.Equal(t, 1, s.c.earlyCount(), "the late notification is kept as an early one")
				}
				b := mustAlloc(t, s, 1)
				sd.register(s, fresh, b)
				if !kept {
					s.d.inbox = append(s.d.inbox, sdk.Notification{From: sd.from, Message: sd.msg(old)})
				}
				rd := s.poll()
				assert.Zero(t, s.seen["x"], "the old registration's notification finished the new one: %+v", rd)
				assert.Equal(t, OwnerTransfer, s.c.Owner(BlockRef{s.pool, b[0]}), "blocks handed back on a notification of the old registration")
				assert.True(t, hasAlert(s.all, "stale_notification_dropped"), "no alert for the stale notification")

				s.d.inbox = append(s.d.inbox, sdk.Notification{From: sd.from, Message: sd.msg(fresh)})
				rd = s.poll()
				assert.Equal(t, 1, s.seen["x"], "the new registration's own notification finishes it")
				assert.Contains(t, append(rd.FinishedSending, rd.FinishedReceiving...), RequestID("x"))
				assert.Empty(t, rd.Failed)
			})
		}
	}
}

// The token travels in the message text; a malformed message is not core's
// and counts for nothing.
func TestNotificationMessagesCarryTheToken(t *testing.T) {
	msg := ConsumedMessage("a b", 0xab)
	assert.Equal(t, "custody/2 consumed 00000000000000ab a b", string(msg))
	id, tk, ok := parseConsumed(msg)
	assert.True(t, ok)
	assert.Equal(t, RequestID("a b"), id)
	assert.Equal(t, Token(0xab), tk)
	_, _, ok = parseWritten(msg)
	assert.False(t, ok, "a consumed message parsed as written")
	id, tk, ok = parseWritten(WrittenMessage("w", 1<<63))
	assert.True(t, ok)
	assert.Equal(t, RequestID("w"), id)
	assert.Equal(t, Token(1<<63), tk)
	for _, bad := range []string{
		"custody/2 consumed 00000000000000ab",      // no id
		"custody/2 consumed 00000000000000ab ",     // empty id
		"custody/2 consumed 0000000000000000 x",    // token zero
		"custody/2 consumed 00000000000000zz x",    // not hex
		"custody/2 consumed 000000000000000ab x",   // 17 digits
		"custody/2 consumed 00000000000000a x",     // 15 digits
		"custody/1 consumed x",                     // the tokenless format
		"custody/2 consumedx00000000000000ab x",    // no space after the prefix
		"xustody/2 consumed 00000000000000ab x",    // another prefix
		"custody/2 consumed -000000000000001 x",    // a sign
		"custody/2 consumed 00000000000000ab\tx y", // no space after the token
	} {
		_, _, ok := parseConsumed([]byte(bad))
		assert.False(t, ok, "%q parsed", bad)
	}
}

// A registration that sends or counts notifications needs a token: without
// one it is refused and nothing changes.
func TestRegistrationsWithoutATokenAreRefused(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 1))
	b := mustAlloc(t, s, 1)
	part := []Part{{Pool: s.pool, Local: b, Remote: []uint32{0}}}
	for name, call := range map[string]func() error{
		"ExpectSend": func() error {
			return s.c.ExpectSend(s.now, SendSpec{Request: "x", Pool: s.pool, Blocks: b, Consumers: 1, Lease: time.Minute})
		},
		"ExpectReceive": func() error {
			return s.c.ExpectReceive(s.now, RecvSpec{Request: "x", Peer: "p", Pool: s.pool, Blocks: b, Producers: 1, Lease: time.Minute})
		},
		"Write": func() error {
			return s.c.Write(s.now, WriteSpec{Request: "x", Peer: "p", Parts: part, Consumers: 1, Lease: time.Minute})
		},
		"Read, notifies": func() error {
			return s.c.Read(s.now, ReadSpec{Request: "x", Peer: "p", Parts: part, NotifyProducer: true})
		},
	} {
		err := call()
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "oken", name)
		assert.Equal(t, OwnerEngine, s.c.Owner(BlockRef{s.pool, b[0]}), name)
		assert.Zero(t, s.c.Stats().Requests, name)
	}
	require.NoError(t, s.c.Read(s.now, ReadSpec{Request: "x", Peer: "p", Parts: part}), "a Read that notifies no one needs no token")
}

// Notifications kept for requests not registered yet are bounded in number
// and age, and so is what core keeps to expire them: a steady trickle of
// notifications nobody registers for does not grow core's memory.
func TestEarlyNotificationsKeepBoundedMemory(t *testing.T) {
	s := newSrig(t, Config{MaxEarlyNotifications: 4, EarlyNotificationAge: time.Minute}, nil)
	for i := range 100 {
		id := RequestID(fmt.Sprint("never-", i))
		s.d.inbox = append(s.d.inbox, sdk.Notification{From: "a", Message: ConsumedMessage(id, tok(id))})
		s.poll()
		require.Equal(t, 1, s.c.earlyCount(), "round %d", i)
		s.now = s.now.Add(time.Minute)
	}
	s.poll()
	assert.Zero(t, s.c.earlyCount(), "expired notifications are dropped")
	assert.LessOrEqual(t, len(s.c.earlyQ), 4, "the expiry queue keeps what expired")
	assert.False(t, hasAlert(s.all, "early_notification_dropped"), "expired notifications took places")
}
