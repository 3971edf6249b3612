package core

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// pushPair is two Cores over doubles that know each other, for push mode:
// the consumer r connects peer "prod" (one rank, agent "prod0"), the
// producer p peer "dec" (one rank, agent "dec0"). A notification one side
// delivers reaches the other only when the pair carries it (round, or
// carryWritten and carryConsumed), so a test holds one for as long as it
// needs (holdWritten, holdConsumed). The producer is shut down before the
// consumer.
type pushPair struct {
	r, p                      *srig
	holdWritten, holdConsumed bool
	written, consumed         int // notifications carried so far, of p's and of r's
}

func newPushPair(t *testing.T, rcfg, pcfg Config, rmod, pmod func(*double)) *pushPair {
	t.Helper()
	r := openSrig(t, rcfg, rmod)
	p := openSrig(t, pcfg, pmod)
	r.connect(peerSpec("prod", 1))
	p.connect(peerSpec("dec", 1))
	return &pushPair{r: r, p: p}
}

// carryWritten hands the consumer what the producer delivered since the
// last carry.
func (pp *pushPair) carryWritten() {
	for _, n := range pp.p.d.delivered[pp.written:] {
		pp.r.d.inbox = append(pp.r.d.inbox, sdk.Notification{From: "prod0", Message: n.Message})
	}
	pp.written = len(pp.p.d.delivered)
}

// carryConsumed hands the producer what the consumer delivered since the
// last carry.
func (pp *pushPair) carryConsumed() {
	for _, n := range pp.r.d.delivered[pp.consumed:] {
		pp.p.d.inbox = append(pp.p.d.inbox, sdk.Notification{From: "dec0", Message: n.Message})
	}
	pp.consumed = len(pp.r.d.delivered)
}

// round polls the consumer and the producer once each, carrying the
// notifications not held.
func (pp *pushPair) round() {
	pp.r.poll()
	if !pp.holdConsumed {
		pp.carryConsumed()
	}
	pp.p.poll()
	if !pp.holdWritten {
		pp.carryWritten()
	}
}

// pushSpec writes the producer's blocks pb into the consumer's blocks cb.
func pushSpec(id RequestID, p *srig, pb, cb []uint32) WriteSpec {
	return WriteSpec{Request: id, Token: tok(id), Peer: "dec", Parts: []Part{{Pool: p.pool, Local: pb, Rank: 0, Remote: cb}}, Consumers: 1, Lease: time.Minute}
}

// expectPush registers the consumer's receive of id into cb, from "prod".
func expectPush(s *srig, id RequestID, cb []uint32, lease time.Duration) error {
	return s.c.ExpectReceive(s.now, RecvSpec{Request: id, Token: tok(id), Peer: "prod", Pool: s.pool, Blocks: cb, Producers: 1, Lease: lease})
}

// sentMessages are the notifications d sent, in order.
func sentMessages(d *double) []string {
	var out []string
	for _, n := range d.sent {
		out = append(out, string(n.Message))
	}
	return out
}

func blockRefs(pool PoolID, bs []uint32) []BlockRef {
	out := make([]BlockRef, len(bs))
	for i, b := range bs {
		out[i] = BlockRef{pool, b}
	}
	return out
}

// Rule 4, push mode end to end, two Cores: the writes being DONE is not
// enough for the consumer, which finishes receiving only once the
// producer's written notification arrives; and a producer whose writes are
// DONE finishes sending only once the consumer's consumed notification
// arrives. (host/coreonfake's copy over the real fake checks the bytes
// that land.)
func TestPushFinishesOnWrittenThenConsumed(t *testing.T) {
	pp := newPushPair(t, Config{}, Config{}, nil, nil)
	r, p := pp.r, pp.p
	pp.holdWritten, pp.holdConsumed = true, true
	cb := r.alloc(2)
	pb := p.alloc(2)
	require.NoError(t, expectPush(r, "x", cb, time.Minute))
	var posts []sdk.PostSpec
	p.tamper = func(w Work, _ *Result) {
		if w.Kind == WorkPost {
			posts = append(posts, w.Posts...)
		}
	}
	require.NoError(t, p.do(p.c.Write(p.now, pushSpec("x", p, pb, cb))))
	require.Len(t, posts, 1)
	assert.Equal(t, sdk.OpWrite, posts[0].Op)
	assert.Equal(t, pb, posts[0].LocalIndices, "the producer's blocks are written")
	assert.Equal(t, cb, posts[0].RemoteIndices, "into the consumer's")

	// The writes land and are released; the written notification is held.
	p.done()
	pp.round()
	require.Zero(t, p.c.Stats().Live, "the producer's writes released")
	require.Len(t, p.d.sent, 1, "the written notification sent (and held)")
	for range 20 {
		pp.round()
	}
	assert.Empty(t, r.all.FinishedReceiving, "finished receiving before the written notification")
	assert.Equal(t, repeat(OwnerTransfer, 2), r.owners(blockRefs(r.pool, cb)))
	assert.Empty(t, p.all.FinishedSending, "finished sending before the consumed notification")

	pp.carryWritten()
	rd := r.reported("x")
	assert.Equal(t, []RequestID{"x"}, rd.FinishedReceiving)
	assert.Empty(t, rd.InvalidBlocks)
	assert.Equal(t, repeat(OwnerEngine, 2), r.owners(blockRefs(r.pool, cb)))
	assert.Equal(t, []string{string(ConsumedMessage("x", tok("x")))}, sentMessages(r.d), "the consumer notifies the producer once")

	// The consumed notification is held: the producer keeps waiting.
	for range 20 {
		p.poll()
	}
	assert.Empty(t, p.all.FinishedSending, "finished sending before the consumed notification")
	assert.Equal(t, repeat(OwnerTransfer, 2), p.owners(blockRefs(p.pool, pb)))
	pp.carryConsumed()
	rd = p.reported("x")
	assert.Equal(t, []RequestID{"x"}, rd.FinishedSending)
	assert.False(t, hasAlert(rd, "send_lease_expired"))
	assert.Equal(t, []string{string(WrittenMessage("x", tok("x")))}, sentMessages(p.d), "the producer notifies the consumer once")
}

// Rule 4 on the push side: a push with a failed part never sends the
// written notification, even though its other part landed, so the consumer
// never takes its undefined bytes as received; a later good push's is the
// only one the producer sends.
func TestFailedPushNeverSendsWritten(t *testing.T) {
	pp := newPushPair(t, Config{}, Config{}, nil, nil)
	r, p := pp.r, pp.p
	cb := r.alloc(2)
	pb := p.alloc(2)
	require.NoError(t, expectPush(r, "x", cb, time.Minute))
	w := WriteSpec{Request: "x", Token: tok("x"), Peer: "dec", Consumers: 1, Lease: time.Minute, Parts: []Part{
		{Pool: p.pool, Local: pb[:1], Rank: 0, Remote: cb[:1]},
		{Pool: p.pool, Local: pb[1:], Rank: 0, Remote: cb[1:]},
	}}
	require.NoError(t, p.do(p.c.Write(p.now, w)))
	hs := p.d.live()
	p.d.set(hs[0], sdk.StateDone, nil)
	p.d.set(hs[1], sdk.StateFailed, errBackend)
	pp.round()
	require.True(t, p.c.Stats().Live == 0 && hasAlert(p.all, "transfer_failed"), "both parts released")
	for range 20 {
		pp.round()
	}
	assert.Empty(t, p.d.sent, "a failed push sent the written notification")
	assert.Empty(t, r.all.FinishedReceiving)
	assert.Equal(t, repeat(OwnerTransfer, 2), r.owners(blockRefs(r.pool, cb)))

	cb2 := r.alloc(1)
	pb2 := p.alloc(1)
	require.NoError(t, expectPush(r, "y", cb2, time.Minute))
	require.NoError(t, p.do(p.c.Write(p.now, pushSpec("y", p, pb2, cb2))))
	p.done()
	pp.round() // the producer's write released, its written notification carried
	pp.round() // the consumer takes it
	require.Equal(t, 1, r.seen["y"], "y received")
	assert.Equal(t, []RequestID{"y"}, r.all.FinishedReceiving, "the failed push finished a receive")
	assert.Equal(t, []string{string(WrittenMessage("y", tok("y")))}, sentMessages(p.d))
}

// vLLM #61667's class of bug, rules 1 and 6: a receive that fails while its
// producer may still write (its lease expires, its peer is removed, or the
// Core closes) never hands its blocks back to the engine until the
// producer is proven stopped. Where the fence covers incoming transfers, a
// lease expiry or peer removal asks for a fence and hands the blocks back,
// invalid, only once fenced; Close hands them back once it deregistered the
// pool. Where it covers only what we initiated, they are quarantined for
// good. Either way the failure is reported once, with its blocks, in one
// Ready.
func TestFailedReceiveNeverHandsBackBlocksAProducerMayWrite(t *testing.T) {
	for _, tc := range []struct {
		name   string
		scope  sdk.FenceScope
		cause  string
		reason error
	}{
		{"lease expiry, incoming fence", sdk.FenceInitiatedAndIncoming, "lease", ErrLeaseExpired},
		{"peer removal, incoming fence", sdk.FenceInitiatedAndIncoming, "remove", ErrPeerRemoved},
		{"close, incoming fence", sdk.FenceInitiatedAndIncoming, "close", ErrPeerRemoved},
		{"lease expiry, initiated fence", sdk.FenceInitiated, "lease", ErrLeaseExpired},
		{"peer removal, initiated fence", sdk.FenceInitiated, "remove", ErrPeerRemoved},
		{"close, initiated fence", sdk.FenceInitiated, "close", ErrPeerRemoved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			incoming := tc.scope == sdk.FenceInitiatedAndIncoming
			scope := func(d *double) { d.desc.FenceScope = tc.scope }
			pp := newPushPair(t, Config{}, Config{}, scope, scope)
			r, p := pp.r, pp.p
			// The producer's write runs on, and its written notification
			// is held should it end: the producer may write throughout.
			pp.holdWritten = true
			cb := r.alloc(2)
			blocks := blockRefs(r.pool, cb)
			pb := p.alloc(2)
			require.NoError(t, expectPush(r, "x", cb, time.Minute))
			require.NoError(t, p.do(p.c.Write(p.now, pushSpec("x", p, pb, cb))))
			pp.round()

			var rd Ready
			switch tc.cause {
			case "lease":
				r.now = r.now.Add(time.Minute)
				rd = r.poll()
			case "remove":
				require.NoError(t, r.do(r.c.RemovePeer(r.now, "prod")))
				rd = r.poll()
			case "close":
				// Close returns nil only once the receive is reported (rule
				// 16): call it again after the round that reports it.
				err := r.closeCore()
				rd = r.poll()
				if err != nil {
					require.ErrorIs(t, err, ErrHeld)
					require.NoError(t, r.closeCore())
					rd = mergeReady(rd, r.poll())
				}
			}
			if incoming && tc.cause != "close" {
				assert.Equal(t, []Epoch{1}, rd.Fence)
				assert.True(t, hasAlert(rd, "receive_fence"))
				assert.Empty(t, rd.Failed, "reported before the fence")
				assert.Equal(t, repeat(OwnerTransfer, 2), r.owners(blocks), "handed back before the fence")
				assert.Equal(t, []Epoch{1}, r.poll().Fence, "the fence is asked every round until done")
				assert.Empty(t, r.all.Failed)
				r.dead[1] = true // the host killed the process
				r.c.Inbox().Fenced(1)
				rd = r.poll()
				assert.Empty(t, rd.Fence)
			}
			require.Equal(t, []RequestID{"x"}, failedIDs(rd))
			assert.False(t, rd.Failed[0].Sending)
			assert.ErrorIs(t, rd.Failed[0].Reason, tc.reason)
			if incoming {
				assert.ElementsMatch(t, blocks, rd.InvalidBlocks, "the invalid blocks come with the failure")
				assert.Empty(t, rd.Quarantined)
				assert.Equal(t, repeat(OwnerEngine, 2), r.owners(blocks))
			} else {
				assert.Empty(t, r.all.Fence, "the fence cannot stop the producer: no use asking")
				assert.True(t, hasAlert(rd, "receive_quarantined"))
				assert.ElementsMatch(t, blocks, rd.Quarantined, "the quarantined blocks come with the failure")
				assert.Empty(t, rd.InvalidBlocks)
				assert.Equal(t, repeat(OwnerQuarantined, 2), r.owners(blocks))
			}
			for range 5 {
				r.poll()
			}
			assert.Len(t, r.all.Failed, 1, "reported once")
			assert.Empty(t, r.all.FinishedReceiving)
		})
	}
}

// Written notifications that arrive before ExpectReceive count once it is
// made, and are kept only up to MaxEarlyNotifications requests.
func TestEarlyWrittenNotifications(t *testing.T) {
	t.Run("a push that finished before ExpectReceive", func(t *testing.T) {
		pp := newPushPair(t, Config{}, Config{}, nil, nil)
		r, p := pp.r, pp.p
		cb := r.alloc(1)
		pb := p.alloc(1)
		require.NoError(t, p.do(p.c.Write(p.now, pushSpec("x", p, pb, cb))))
		p.done()
		p.poll() // DONE, released: the written notification goes out
		pp.carryWritten()
		r.poll()
		require.NotNil(t, r.c.earlyW["x"], "the early written notification kept")
		assert.Empty(t, r.all.FinishedReceiving)
		require.NoError(t, expectPush(r, "x", cb, time.Minute))
		assert.Empty(t, r.c.earlyW, "the early notification was used")
		rd := r.poll()
		assert.Equal(t, []RequestID{"x"}, rd.FinishedReceiving)
		pp.carryConsumed()
		p.reported("x")
		assert.Equal(t, []RequestID{"x"}, p.all.FinishedSending)
	})
	t.Run("bounded", func(t *testing.T) {
		s := openSrig(t, Config{MaxEarlyNotifications: 1}, nil)
		s.connect(peerSpec("prod", 1))
		for _, id := range []RequestID{"a", "b", "a"} {
			s.d.inbox = append(s.d.inbox, sdk.Notification{From: "prod0", Message: WrittenMessage(id, tok(id))})
		}
		s.poll()
		require.True(t, hasAlert(s.all, "early_notification_dropped") && s.c.earlyW["a"] != nil, "both kept or dropped")
		assert.Nil(t, s.c.earlyW["b"], "kept past the bound")
		assert.Equal(t, []earlyFrom{{"prod0", tok("a")}}, s.c.earlyW["a"].from, "a sender counted twice")
		b := s.alloc(2)
		require.NoError(t, expectPush(s, "a", b[:1], time.Minute))
		require.NoError(t, expectPush(s, "b", b[1:], time.Minute))
		rd := s.poll()
		assert.Equal(t, []RequestID{"a"}, rd.FinishedReceiving)
		assert.Equal(t, OwnerTransfer, s.c.Owner(BlockRef{s.pool, b[1]}), "a dropped notification counted")
		s.d.inbox = append(s.d.inbox, sdk.Notification{From: "prod0", Message: WrittenMessage("b", tok("b"))})
		s.reported("b")
		assert.Equal(t, []RequestID{"a", "b"}, s.all.FinishedReceiving)
	})
}

// ExpectReceive refuses bad input and changes nothing.
func TestExpectReceiveRefusesBadInput(t *testing.T) {
	s := openSrig(t, Config{}, nil)
	s.connect(peerSpec("p", 2))
	b := s.alloc(2)
	require.NoError(t, s.c.ExpectReceive(s.now, RecvSpec{Request: "taken", Token: tok("taken"), Peer: "p", Pool: s.pool, Blocks: s.alloc(1), Producers: 1, Lease: time.Minute}))
	good := RecvSpec{Request: "x", Token: tok("x"), Peer: "p", Pool: s.pool, Blocks: b, Producers: 1, Lease: time.Minute}
	for _, tc := range []struct {
		name string
		edit func(*RecvSpec)
		want string
	}{
		{"no producers", func(s *RecvSpec) { s.Producers = 0 }, "Producers 0"},
		{"no lease", func(s *RecvSpec) { s.Lease = 0 }, "Lease 0s"},
		{"no blocks", func(s *RecvSpec) { s.Blocks = nil }, "no blocks"},
		{"empty id", func(s *RecvSpec) { s.Request = "" }, "empty"},
		{"id in flight", func(s *RecvSpec) { s.Request = "taken" }, "still in flight"},
		{"unknown pool", func(s *RecvSpec) { s.Pool = 9 }, "pool 9"},
		{"block not the engine's", func(s *RecvSpec) { s.Blocks = []uint32{b[0], srigBlocks - 1} }, "not the engine"},
		{"block twice", func(s *RecvSpec) { s.Blocks = []uint32{b[0], b[0]} }, "twice"},
		{"peer not connected", func(s *RecvSpec) { s.Peer = "nobody" }, "not connected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := good
			spec.Blocks = slices.Clone(good.Blocks)
			tc.edit(&spec)
			before := s.c.Stats()
			err := s.c.ExpectReceive(s.now, spec)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, before, s.c.Stats())
			assert.Equal(t, repeat(OwnerEngine, 2), s.owners(blockRefs(s.pool, b)))
		})
	}
}

// Rule 12: Close with a receive waiting, while another transfer keeps Close
// refused: the receive's blocks stay pinned, and no fence is asked (the
// engine is going away), until Close deregistered the pool; then the
// receive is reported failed with its blocks invalid.
func TestCloseHandsBackReceiveBlocksOnlyOnceDeregistered(t *testing.T) {
	pp := newPushPair(t, Config{}, Config{}, nil, nil)
	r, p := pp.r, pp.p
	pp.holdWritten = true
	r.connect(peerSpec("p", 2))
	r.read("read", "p", 1) // it runs on; the double's Cancel cannot stop it
	hRead := r.d.live()[0]
	cb := r.alloc(1)
	pb := p.alloc(1)
	require.NoError(t, expectPush(r, "x", cb, time.Hour))
	require.NoError(t, p.do(p.c.Write(p.now, pushSpec("x", p, pb, cb)))) // runs on too

	require.ErrorIs(t, r.closeCore(), ErrHeld, "the running read keeps Close refused")
	rd := r.poll()
	assert.Empty(t, rd.Fence, "closing asked for a fence")
	assert.NotContains(t, failedIDs(rd), RequestID("x"), "reported while its pool was registered")
	assert.Equal(t, OwnerTransfer, r.c.Owner(BlockRef{r.pool, cb[0]}))
	for round := 0; r.closeCore() != nil; round++ {
		rd = r.poll()
		assert.NotContains(t, failedIDs(rd), RequestID("x"), "reported while its pool was registered")
		require.Less(t, round, 3, "Close still refused")
		if round == 1 {
			r.d.set(hRead, sdk.StateDone, nil) // the read ends
		}
	}
	rd = r.poll()
	assert.Contains(t, failedIDs(rd), RequestID("x"))
	assert.Contains(t, rd.InvalidBlocks, BlockRef{r.pool, cb[0]})
	assert.Empty(t, r.all.Fence)
}

// docs/fencing.md's other proof: a receive waiting for its fence after its
// lease expired hands its blocks back (invalid, the receive failed) as
// soon as its producer reports its writes done after all.
func TestLateWrittenEndsTheWaitForTheFence(t *testing.T) {
	pp := newPushPair(t, Config{}, Config{}, nil, nil)
	r, p := pp.r, pp.p
	pp.holdWritten = true
	cb := r.alloc(1)
	pb := p.alloc(1)
	require.NoError(t, expectPush(r, "x", cb, time.Minute))
	require.NoError(t, p.do(p.c.Write(p.now, pushSpec("x", p, pb, cb))))
	r.now = r.now.Add(time.Minute)
	require.Equal(t, []Epoch{1}, r.poll().Fence)
	p.done() // the producer's write ends
	pp.round()
	require.True(t, p.c.Stats().Live == 0 && len(p.d.sent) == 1, "the producer's write released")
	assert.Empty(t, r.all.Failed, "reported before the fence or the producer's report")
	pp.carryWritten()
	rd := r.reported("x")
	require.Equal(t, []RequestID{"x"}, failedIDs(rd))
	assert.ErrorIs(t, rd.Failed[0].Reason, ErrLeaseExpired)
	assert.Equal(t, []BlockRef{{r.pool, cb[0]}}, rd.InvalidBlocks)
	assert.Equal(t, OwnerEngine, r.c.Owner(BlockRef{r.pool, cb[0]}))
}
