package core

import (
	"bytes"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/plugins/fake"
	"github.com/custody-dev/custody/sdk"
)

// fill is every byte of the producer's pool.
const fill = 0xAB

// newProducer makes a second Core, a push producer, over its own spied fake
// agent "prod" with one pool whose every byte is fill, and connects the two
// Cores to each other: the rig's Core knows it as peer "prod", it knows the
// rig's Core as peer "dec". It is closed before the rig.
func newProducer(t *testing.T, r *rig, o rigOpts) *rig {
	t.Helper()
	params := map[string]string{"dir": r.dir}
	if o.local != "" {
		params["fault"] = o.local
	}
	if o.fence != "" {
		params["fence"] = o.fence
	}
	tr := &spy{Transport: fake.New(), terminal: map[sdk.HandleID]bool{}}
	if o.setup != nil {
		o.setup(tr)
	}
	require.NoError(t, tr.Open(r.ctx, sdk.OpenRequest{Agent: "prod", Params: params}))
	c, err := New(o.cfg)
	require.NoError(t, err)
	p := &rig{t: t, ctx: r.ctx, dir: r.dir, tr: tr, c: c, now: r.now, seen: map[RequestID]int{}, trs: map[Epoch]sdk.Transport{}}
	require.NoError(t, p.attach(tr, 1))
	p.path = r.regionFile(fill)
	p.pool, err = p.registerPool(PoolSpec{Path: p.path, BlockSize: blockSize, Blocks: nBlocks})
	require.NoError(t, err)

	decMD, err := r.tr.LocalMetadata(r.ctx)
	require.NoError(t, err)
	decRegion, _, err := r.c.PoolRegion(r.pool)
	require.NoError(t, err)
	require.NoError(t, p.connectPeer(PeerSpec{Name: "dec", Ranks: []RankSpec{{Agent: "dec", Metadata: decMD, Region: decRegion, BlockSize: blockSize, Blocks: nBlocks}}}))
	prodMD, err := tr.LocalMetadata(r.ctx)
	require.NoError(t, err)
	prodRegion, _, err := c.PoolRegion(p.pool)
	require.NoError(t, err)
	require.NoError(t, r.connectPeer(PeerSpec{Name: "prod", Ranks: []RankSpec{{Agent: "prod", Metadata: prodMD, Region: prodRegion, BlockSize: blockSize, Blocks: nBlocks}}}))
	t.Cleanup(func() {
		deadline := time.Now().Add(wait)
		for {
			err := p.close()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("producer Close still refused: %v", err)
				return
			}
			p.poll()
			time.Sleep(time.Millisecond) // pacing of the poll loop, not synchronisation
		}
		res, err := tr.Resources(p.ctx)
		if err == nil {
			assert.True(t, res.Zero(), "producer agent still holds %+v", res)
		}
	})
	return p
}

// pushUntil polls the consumer (r) and the producer (p) once each, until
// cond holds, bounded by wait.
func pushUntil(r, p *rig, what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(wait)
	for {
		r.poll()
		p.poll()
		if cond() {
			return
		}
		require.True(r.t, time.Now().Before(deadline), "timed out waiting for %s; consumer %+v, producer %+v", what, r.c.Stats(), p.c.Stats())
		time.Sleep(time.Millisecond) // pacing of the poll loop, not synchronisation
	}
}

// pushSpec writes the producer's blocks pb into the consumer's blocks cb.
func pushSpec(id RequestID, p *rig, pb, cb []uint32) WriteSpec {
	return WriteSpec{Request: id, Token: tok(id), Peer: "dec", Parts: []Part{{Pool: p.pool, Local: pb, Rank: 0, Remote: cb}}, Consumers: 1, Lease: time.Minute}
}

func isWritten(msg []byte) bool { _, _, ok := parseWritten(msg); return ok }

func isConsumed(msg []byte) bool { _, _, ok := parseConsumed(msg); return ok }

func blockRefs(pool PoolID, bs []uint32) []BlockRef {
	out := make([]BlockRef, len(bs))
	for i, b := range bs {
		out[i] = BlockRef{pool, b}
	}
	return out
}

// Push mode end to end, two Cores over two fake agents: the bytes landing is
// not enough for the consumer, which finishes receiving only once the
// producer's written notification arrives; and a producer whose writes are
// DONE finishes sending only once the consumer's consumed notification
// arrives.
func TestPushFinishesOnWrittenThenConsumed(t *testing.T) {
	r := newRig(t, rigOpts{setup: func(s *spy) { s.holdNote = isConsumed }})
	p := newProducer(t, r, rigOpts{setup: func(s *spy) { s.holdNote = isWritten }})
	cb := r.alloc(2)
	pb, err := p.c.Alloc(p.pool, 2)
	require.NoError(t, err)
	require.NoError(t, r.c.ExpectReceive(r.now, RecvSpec{Request: "x", Token: tok("x"), Peer: "prod", Pool: r.pool, Blocks: cb, Producers: 1, Lease: time.Minute}))
	require.NoError(t, p.write(pushSpec("x", p, pb, cb)))

	// The writes land and are released; the written notification is held.
	pushUntil(r, p, "the producer's writes released", func() bool { return p.c.Stats().Live == 0 && len(p.tr.held) == 1 })
	data, err := os.ReadFile(r.path)
	require.NoError(t, err)
	for _, b := range cb {
		require.True(t, bytes.Equal(data[int(b)*blockSize:int(b+1)*blockSize], bytes.Repeat([]byte{fill}, blockSize)), "block %d: the bytes did not land", b)
	}
	for i := 0; i < 20; i++ {
		r.poll()
		p.poll()
	}
	assert.Empty(t, r.all.FinishedReceiving, "finished receiving before the written notification")
	assert.Equal(t, repeat(OwnerTransfer, 2), r.owners(blockRefs(r.pool, cb)))
	assert.Empty(t, p.all.FinishedSending, "finished sending before the consumed notification")

	p.tr.flushNotes(t, p.ctx)
	rd := r.reported("x")
	assert.Equal(t, []RequestID{"x"}, rd.FinishedReceiving)
	assert.Empty(t, rd.InvalidBlocks)
	assert.Equal(t, repeat(OwnerEngine, 2), r.owners(blockRefs(r.pool, cb)))
	assert.Equal(t, []string{string(ConsumedMessage("x", tok("x")))}, r.tr.sentNotes(), "the consumer notifies the producer once")

	// The consumed notification is held: the producer keeps waiting.
	for i := 0; i < 20; i++ {
		p.poll()
	}
	assert.Empty(t, p.all.FinishedSending, "finished sending before the consumed notification")
	assert.Equal(t, repeat(OwnerTransfer, 2), p.owners(blockRefs(p.pool, pb)))
	r.tr.flushNotes(t, r.ctx)
	rd = p.reported("x")
	assert.Equal(t, []RequestID{"x"}, rd.FinishedSending)
	assert.False(t, hasAlert(rd, "send_lease_expired"))
	assert.Equal(t, []string{string(WrittenMessage("x", tok("x")))}, p.tr.sentNotes(), "the producer notifies the consumer once")
}

// Seed 001 on the push side: a push with a failed part never sends the
// written notification, even though its other part landed, so the consumer
// never takes its undefined bytes as received.
func TestFailedPushNeverSendsWritten(t *testing.T) {
	r := newRig(t, rigOpts{})
	p := newProducer(t, r, rigOpts{local: "fail,post=2"})
	cb := r.alloc(2)
	pb, err := p.c.Alloc(p.pool, 2)
	require.NoError(t, err)
	require.NoError(t, r.c.ExpectReceive(r.now, RecvSpec{Request: "x", Token: tok("x"), Peer: "prod", Pool: r.pool, Blocks: cb, Producers: 1, Lease: time.Minute}))
	w := WriteSpec{Request: "x", Token: tok("x"), Peer: "dec", Consumers: 1, Lease: time.Minute, Parts: []Part{
		{Pool: p.pool, Local: pb[:1], Rank: 0, Remote: cb[:1]},
		{Pool: p.pool, Local: pb[1:], Rank: 0, Remote: cb[1:]},
	}}
	require.NoError(t, p.write(w))
	pushUntil(r, p, "both parts released", func() bool { return p.c.Stats().Live == 0 && hasAlert(p.all, "transfer_failed") })
	for i := 0; i < 20; i++ {
		r.poll()
		p.poll()
	}
	assert.Empty(t, p.tr.sentNotes(), "a failed push sent the written notification")
	assert.Empty(t, r.all.FinishedReceiving)
	assert.Equal(t, repeat(OwnerTransfer, 2), r.owners(blockRefs(r.pool, cb)))

	// A later good push notifies; once it is received, the failed one's
	// notification would have arrived too (delivery is in order per sender).
	cb2 := r.alloc(1)
	pb2, err := p.c.Alloc(p.pool, 1)
	require.NoError(t, err)
	require.NoError(t, r.c.ExpectReceive(r.now, RecvSpec{Request: "y", Token: tok("y"), Peer: "prod", Pool: r.pool, Blocks: cb2, Producers: 1, Lease: time.Minute}))
	require.NoError(t, p.write(pushSpec("y", p, pb2, cb2)))
	pushUntil(r, p, "y received", func() bool { return r.seen["y"] == 1 })
	assert.Equal(t, []RequestID{"y"}, r.all.FinishedReceiving, "the failed push finished a receive")
	assert.Equal(t, []string{string(WrittenMessage("y", tok("y")))}, p.tr.sentNotes())
}

// vLLM #61667's class of bug: a receive that fails while its producer may
// still write (its lease expires, its peer is removed, or the Core closes)
// never hands its blocks back to the engine until the producer is proven
// stopped. Where the fence covers incoming transfers, a lease expiry or peer
// removal asks for a fence and hands the blocks back, invalid, only once
// fenced; Close hands them back once it deregistered the pool. Where it
// covers only what we initiated, they are quarantined for good. Either way
// the failure is reported once, with its blocks, in one Ready.
func TestFailedReceiveNeverHandsBackBlocksAProducerMayWrite(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fence  string
		cause  string
		reason error
	}{
		{"lease expiry, incoming fence", "incoming", "lease", ErrLeaseExpired},
		{"peer removal, incoming fence", "incoming", "remove", ErrPeerRemoved},
		{"close, incoming fence", "incoming", "close", ErrPeerRemoved},
		{"lease expiry, initiated fence", "initiated", "lease", ErrLeaseExpired},
		{"peer removal, initiated fence", "initiated", "remove", ErrPeerRemoved},
		{"close, initiated fence", "initiated", "close", ErrPeerRemoved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			incoming := tc.fence == "incoming"
			r := newRig(t, rigOpts{fence: tc.fence, local: "crash,at=release,n=1"})
			// The producer's write stalls, and its written notification
			// is held should it end: the producer may write throughout.
			p := newProducer(t, r, rigOpts{fence: tc.fence, local: "stall,post=1,for=300ms", setup: func(s *spy) { s.holdNote = isWritten }})
			cb := r.alloc(2)
			blocks := blockRefs(r.pool, cb)
			pb, err := p.c.Alloc(p.pool, 2)
			require.NoError(t, err)
			require.NoError(t, r.c.ExpectReceive(r.now, RecvSpec{Request: "x", Token: tok("x"), Peer: "prod", Pool: r.pool, Blocks: cb, Producers: 1, Lease: time.Minute}))
			require.NoError(t, p.write(pushSpec("x", p, pb, cb)))
			r.poll()
			p.poll()

			var rd Ready
			switch tc.cause {
			case "lease":
				r.now = r.now.Add(time.Minute)
				rd = r.poll()
			case "remove":
				require.NoError(t, r.removePeer("prod"))
				rd = r.poll()
			case "close":
				require.NoError(t, r.close())
				rd = r.poll()
			}
			if incoming && tc.cause != "close" {
				assert.Equal(t, []Epoch{1}, rd.Fence)
				assert.True(t, hasAlert(rd, "receive_fence"))
				assert.Empty(t, rd.Failed, "reported before the fence")
				assert.Equal(t, repeat(OwnerTransfer, 2), r.owners(blocks), "handed back before the fence")
				assert.Equal(t, []Epoch{1}, r.poll().Fence, "the fence is asked every round until done")
				assert.Empty(t, r.all.Failed)
				r.kill()
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
			for i := 0; i < 5; i++ {
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
		r := newRig(t, rigOpts{})
		p := newProducer(t, r, rigOpts{})
		cb := r.alloc(1)
		pb, err := p.c.Alloc(p.pool, 1)
		require.NoError(t, err)
		require.NoError(t, p.write(pushSpec("x", p, pb, cb)))
		pushUntil(r, p, "the early written notification kept", func() bool { return r.c.earlyW["x"] != nil })
		assert.Empty(t, r.all.FinishedReceiving)
		require.NoError(t, r.c.ExpectReceive(r.now, RecvSpec{Request: "x", Token: tok("x"), Peer: "prod", Pool: r.pool, Blocks: cb, Producers: 1, Lease: time.Minute}))
		assert.Empty(t, r.c.earlyW, "the early notification was used")
		rd := r.poll()
		assert.Equal(t, []RequestID{"x"}, rd.FinishedReceiving)
		pushUntil(r, p, "the producer finished", func() bool { return p.seen["x"] == 1 })
		assert.Equal(t, []RequestID{"x"}, p.all.FinishedSending)
	})
	t.Run("bounded", func(t *testing.T) {
		r := newRig(t, rigOpts{cfg: Config{MaxEarlyNotifications: 1}})
		p := newProducer(t, r, rigOpts{})
		dec := p.c.peers["dec"].ranks[0].id
		errs, err := p.tr.SendNotifications(p.ctx, []sdk.OutboundNotification{{Peer: dec, Message: WrittenMessage("a", tok("a"))}, {Peer: dec, Message: WrittenMessage("b", tok("b"))}, {Peer: dec, Message: WrittenMessage("a", tok("a"))}})
		require.NoError(t, err)
		require.NoError(t, firstErr(errs))
		r.until("both kept or dropped", func(Ready) bool {
			return hasAlert(r.all, "early_notification_dropped") && r.c.earlyW["a"] != nil
		})
		assert.Nil(t, r.c.earlyW["b"], "kept past the bound")
		assert.Equal(t, []earlyFrom{{"prod", tok("a")}}, r.c.earlyW["a"].from, "a sender counted twice")
		b := r.alloc(2)
		require.NoError(t, r.c.ExpectReceive(r.now, RecvSpec{Request: "a", Token: tok("a"), Peer: "prod", Pool: r.pool, Blocks: b[:1], Producers: 1, Lease: time.Minute}))
		require.NoError(t, r.c.ExpectReceive(r.now, RecvSpec{Request: "b", Token: tok("b"), Peer: "prod", Pool: r.pool, Blocks: b[1:], Producers: 1, Lease: time.Minute}))
		rd := r.poll()
		assert.Equal(t, []RequestID{"a"}, rd.FinishedReceiving)
		assert.Equal(t, OwnerTransfer, r.c.Owner(BlockRef{r.pool, b[1]}), "a dropped notification counted")
		errs, err = p.tr.SendNotifications(p.ctx, []sdk.OutboundNotification{{Peer: dec, Message: WrittenMessage("b", tok("b"))}})
		require.NoError(t, err)
		require.NoError(t, firstErr(errs))
		r.until("b received", func(Ready) bool { return r.seen["b"] == 1 })
		assert.Equal(t, []RequestID{"a", "b"}, r.all.FinishedReceiving)
	})
}

func firstErr(errs []error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// ExpectReceive refuses bad input and changes nothing.
func TestExpectReceiveRefusesBadInput(t *testing.T) {
	r := newRig(t, rigOpts{})
	r.connect("p")
	b := r.alloc(2)
	require.NoError(t, r.c.ExpectReceive(r.now, RecvSpec{Request: "taken", Token: tok("taken"), Peer: "p", Pool: r.pool, Blocks: r.alloc(1), Producers: 1, Lease: time.Minute}))
	good := RecvSpec{Request: "x", Token: tok("x"), Peer: "p", Pool: r.pool, Blocks: b, Producers: 1, Lease: time.Minute}
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
		{"block not the engine's", func(s *RecvSpec) { s.Blocks = []uint32{b[0], nBlocks - 1} }, "not the engine"},
		{"block twice", func(s *RecvSpec) { s.Blocks = []uint32{b[0], b[0]} }, "twice"},
		{"peer not connected", func(s *RecvSpec) { s.Peer = "nobody" }, "not connected"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := good
			s.Blocks = slices.Clone(good.Blocks)
			tc.edit(&s)
			before := r.c.Stats()
			err := r.c.ExpectReceive(r.now, s)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, before, r.c.Stats())
			assert.Equal(t, repeat(OwnerEngine, 2), r.owners(blockRefs(r.pool, b)))
		})
	}
}

// Close with a receive waiting, while another transfer keeps Close refused:
// the receive's blocks stay pinned, and no fence is asked (the engine is
// going away), until Close deregistered the pool; then the receive is
// reported failed with its blocks invalid.
func TestCloseHandsBackReceiveBlocksOnlyOnceDeregistered(t *testing.T) {
	skipStallsIfShort(t)
	r := newRig(t, rigOpts{local: "stall,post=1,for=300ms", setup: cancelNone})
	p := newProducer(t, r, rigOpts{local: "stall,post=1,for=300ms", setup: func(s *spy) { s.holdNote = isWritten }})
	r.connect("p")
	spec, _ := r.readSpec("read", "p", 1)
	require.NoError(t, r.read(spec))
	cb := r.alloc(1)
	pb, err := p.c.Alloc(p.pool, 1)
	require.NoError(t, err)
	require.NoError(t, r.c.ExpectReceive(r.now, RecvSpec{Request: "x", Token: tok("x"), Peer: "prod", Pool: r.pool, Blocks: cb, Producers: 1, Lease: time.Hour}))
	require.NoError(t, p.write(pushSpec("x", p, pb, cb)))

	require.ErrorIs(t, r.close(), ErrHeld, "the stalled read keeps Close refused")
	rd := r.poll()
	assert.Empty(t, rd.Fence, "closing asked for a fence")
	assert.NotContains(t, failedIDs(rd), RequestID("x"), "reported while its pool was registered")
	assert.Equal(t, OwnerTransfer, r.c.Owner(BlockRef{r.pool, cb[0]}))
	deadline := time.Now().Add(wait)
	for r.close() != nil {
		rd = r.poll()
		assert.NotContains(t, failedIDs(rd), RequestID("x"), "reported while its pool was registered")
		require.True(t, time.Now().Before(deadline), "Close still refused")
		time.Sleep(time.Millisecond) // pacing of the poll loop, not synchronisation
	}
	rd = r.poll()
	assert.Contains(t, failedIDs(rd), RequestID("x"))
	assert.Contains(t, rd.InvalidBlocks, BlockRef{r.pool, cb[0]})
	assert.Empty(t, r.all.Fence)
}

// docs/fencing.md's other proof: a receive waiting for its fence after its lease
// expired hands its blocks back (invalid, the receive failed) as soon as
// its producer reports its writes done after all.
func TestLateWrittenEndsTheWaitForTheFence(t *testing.T) {
	skipStallsIfShort(t)
	r := newRig(t, rigOpts{})
	p := newProducer(t, r, rigOpts{local: "stall,post=1,for=100ms", setup: func(s *spy) { s.holdNote = isWritten }})
	cb := r.alloc(1)
	pb, err := p.c.Alloc(p.pool, 1)
	require.NoError(t, err)
	require.NoError(t, r.c.ExpectReceive(r.now, RecvSpec{Request: "x", Token: tok("x"), Peer: "prod", Pool: r.pool, Blocks: cb, Producers: 1, Lease: time.Minute}))
	require.NoError(t, p.write(pushSpec("x", p, pb, cb)))
	r.now = r.now.Add(time.Minute)
	require.Equal(t, []Epoch{1}, r.poll().Fence)
	pushUntil(r, p, "the producer's write released", func() bool { return p.c.Stats().Live == 0 && len(p.tr.held) == 1 })
	assert.Empty(t, r.all.Failed, "reported before the fence or the producer's report")
	p.tr.flushNotes(t, p.ctx)
	rd := r.reported("x")
	require.Equal(t, []RequestID{"x"}, failedIDs(rd))
	assert.ErrorIs(t, rd.Failed[0].Reason, ErrLeaseExpired)
	assert.Equal(t, []BlockRef{{r.pool, cb[0]}}, rd.InvalidBlocks)
	assert.Equal(t, OwnerEngine, r.c.Owner(BlockRef{r.pool, cb[0]}))
}
