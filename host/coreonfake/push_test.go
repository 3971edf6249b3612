package coreonfake

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/core"
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
	tr := newSpy(fake.New())
	if o.setup != nil {
		o.setup(tr)
	}
	require.NoError(t, tr.Open(r.ctx, sdk.OpenRequest{Agent: "prod", Params: params}))
	c, err := core.New(o.cfg)
	require.NoError(t, err)
	p := &rig{t: t, ctx: r.ctx, dir: r.dir, tr: tr, c: c, now: r.now, seen: map[core.RequestID]int{}, trs: map[core.Epoch]sdk.Transport{}}
	require.NoError(t, p.attach(tr, 1))
	p.path = r.regionFile(fill)
	p.pool, err = p.registerPool(core.PoolSpec{Path: p.path, BlockSize: blockSize, Blocks: nBlocks})
	require.NoError(t, err)

	decMD, err := r.tr.LocalMetadata(r.ctx)
	require.NoError(t, err)
	decRegion, _, err := r.c.PoolRegion(r.pool)
	require.NoError(t, err)
	require.NoError(t, p.connectPeer(core.PeerSpec{Name: "dec", Ranks: []core.RankSpec{{Agent: "dec", Metadata: decMD, Region: decRegion, BlockSize: blockSize, Blocks: nBlocks}}}))
	prodMD, err := tr.LocalMetadata(r.ctx)
	require.NoError(t, err)
	prodRegion, _, err := c.PoolRegion(p.pool)
	require.NoError(t, err)
	require.NoError(t, r.connectPeer(core.PeerSpec{Name: "prod", Ranks: []core.RankSpec{{Agent: "prod", Metadata: prodMD, Region: prodRegion, BlockSize: blockSize, Blocks: nBlocks}}}))
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
			// A write Close failed is reported at its lease (rule 16).
			if at := p.poll().Next.At; at.After(p.now) {
				p.now = at
			}
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
func pushSpec(id core.RequestID, p *rig, pb, cb []uint32) core.WriteSpec {
	return core.WriteSpec{Request: id, Token: tok(id), Peer: "dec", Parts: []core.Part{{Pool: p.pool, Local: pb, Rank: 0, Remote: cb}}, Consumers: 1, Lease: time.Minute}
}

// isWritten and isConsumed tell core's two notifications apart by their
// prefix: the message with an empty id and its 16 token digits cut off.
func isWritten(msg []byte) bool { return bytes.HasPrefix(msg, notePrefix(core.WrittenMessage)) }

func isConsumed(msg []byte) bool { return bytes.HasPrefix(msg, notePrefix(core.ConsumedMessage)) }

func notePrefix(msg func(core.RequestID, core.Token) []byte) []byte {
	m := msg("", 1)
	return m[:len(m)-17] // the token's 16 digits and the space before the id
}

func blockRefs(pool core.PoolID, bs []uint32) []core.BlockRef {
	out := make([]core.BlockRef, len(bs))
	for i, b := range bs {
		out[i] = core.BlockRef{Pool: pool, Block: b}
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
	require.NoError(t, r.c.ExpectReceive(r.now, core.RecvSpec{Request: "x", Token: tok("x"), Peer: "prod", Pool: r.pool, Blocks: cb, Producers: 1, Lease: time.Minute}))
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
	assert.Equal(t, repeat(core.OwnerTransfer, 2), r.owners(blockRefs(r.pool, cb)))
	assert.Empty(t, p.all.FinishedSending, "finished sending before the consumed notification")

	p.tr.flushNotes(t, p.ctx)
	rd := r.reported("x")
	assert.Equal(t, []core.RequestID{"x"}, rd.FinishedReceiving)
	assert.Empty(t, rd.InvalidBlocks)
	assert.Equal(t, repeat(core.OwnerEngine, 2), r.owners(blockRefs(r.pool, cb)))
	assert.Equal(t, []string{string(core.ConsumedMessage("x", tok("x")))}, r.tr.sentNotes(), "the consumer notifies the producer once")

	// The consumed notification is held: the producer keeps waiting.
	for i := 0; i < 20; i++ {
		p.poll()
	}
	assert.Empty(t, p.all.FinishedSending, "finished sending before the consumed notification")
	assert.Equal(t, repeat(core.OwnerTransfer, 2), p.owners(blockRefs(p.pool, pb)))
	r.tr.flushNotes(t, r.ctx)
	rd = p.reported("x")
	assert.Equal(t, []core.RequestID{"x"}, rd.FinishedSending)
	assert.False(t, hasAlert(rd, "send_lease_expired"))
	assert.Equal(t, []string{string(core.WrittenMessage("x", tok("x")))}, p.tr.sentNotes(), "the producer notifies the consumer once")
}

// Rule 4 on the push side: a push with a failed part never sends the
// written notification, even though its other part landed, so the consumer
// never takes its undefined bytes as received.
func TestFailedPushNeverSendsWritten(t *testing.T) {
	r := newRig(t, rigOpts{})
	p := newProducer(t, r, rigOpts{local: "fail,post=2"})
	cb := r.alloc(2)
	pb, err := p.c.Alloc(p.pool, 2)
	require.NoError(t, err)
	require.NoError(t, r.c.ExpectReceive(r.now, core.RecvSpec{Request: "x", Token: tok("x"), Peer: "prod", Pool: r.pool, Blocks: cb, Producers: 1, Lease: time.Minute}))
	w := core.WriteSpec{Request: "x", Token: tok("x"), Peer: "dec", Consumers: 1, Lease: time.Minute, Parts: []core.Part{
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
	assert.Equal(t, repeat(core.OwnerTransfer, 2), r.owners(blockRefs(r.pool, cb)))

	// A later good push notifies; once it is received, the failed one's
	// notification would have arrived too (delivery is in order per sender).
	cb2 := r.alloc(1)
	pb2, err := p.c.Alloc(p.pool, 1)
	require.NoError(t, err)
	require.NoError(t, r.c.ExpectReceive(r.now, core.RecvSpec{Request: "y", Token: tok("y"), Peer: "prod", Pool: r.pool, Blocks: cb2, Producers: 1, Lease: time.Minute}))
	require.NoError(t, p.write(pushSpec("y", p, pb2, cb2)))
	pushUntil(r, p, "y received", func() bool { return r.seen["y"] == 1 })
	assert.Equal(t, []core.RequestID{"y"}, r.all.FinishedReceiving, "the failed push finished a receive")
	assert.Equal(t, []string{string(core.WrittenMessage("y", tok("y")))}, p.tr.sentNotes())
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
		{"lease expiry, incoming fence", "incoming", "lease", core.ErrLeaseExpired},
		{"peer removal, incoming fence", "incoming", "remove", core.ErrPeerRemoved},
		{"close, incoming fence", "incoming", "close", core.ErrPeerRemoved},
		{"lease expiry, initiated fence", "initiated", "lease", core.ErrLeaseExpired},
		{"peer removal, initiated fence", "initiated", "remove", core.ErrPeerRemoved},
		{"close, initiated fence", "initiated", "close", core.ErrPeerRemoved},
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
			require.NoError(t, r.c.ExpectReceive(r.now, core.RecvSpec{Request: "x", Token: tok("x"), Peer: "prod", Pool: r.pool, Blocks: cb, Producers: 1, Lease: time.Minute}))
			require.NoError(t, p.write(pushSpec("x", p, pb, cb)))
			r.poll()
			p.poll()

			var rd core.Ready
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
				assert.Equal(t, []core.Epoch{1}, rd.Fence)
				assert.True(t, hasAlert(rd, "receive_fence"))
				assert.Empty(t, rd.Failed, "reported before the fence")
				assert.Equal(t, repeat(core.OwnerTransfer, 2), r.owners(blocks), "handed back before the fence")
				assert.Equal(t, []core.Epoch{1}, r.poll().Fence, "the fence is asked every round until done")
				assert.Empty(t, r.all.Failed)
				r.kill()
				r.c.Inbox().Fenced(1)
				rd = r.poll()
				assert.Empty(t, rd.Fence)
			}
			require.Equal(t, []core.RequestID{"x"}, failedIDs(rd))
			assert.False(t, rd.Failed[0].Sending)
			assert.ErrorIs(t, rd.Failed[0].Reason, tc.reason)
			if incoming {
				assert.ElementsMatch(t, blocks, rd.InvalidBlocks, "the invalid blocks come with the failure")
				assert.Empty(t, rd.Quarantined)
				assert.Equal(t, repeat(core.OwnerEngine, 2), r.owners(blocks))
			} else {
				assert.Empty(t, r.all.Fence, "the fence cannot stop the producer: no use asking")
				assert.True(t, hasAlert(rd, "receive_quarantined"))
				assert.ElementsMatch(t, blocks, rd.Quarantined, "the quarantined blocks come with the failure")
				assert.Empty(t, rd.InvalidBlocks)
				assert.Equal(t, repeat(core.OwnerQuarantined, 2), r.owners(blocks))
			}
			for i := 0; i < 5; i++ {
				r.poll()
			}
			assert.Len(t, r.all.Failed, 1, "reported once")
			assert.Empty(t, r.all.FinishedReceiving)
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
	require.NoError(t, r.c.ExpectReceive(r.now, core.RecvSpec{Request: "x", Token: tok("x"), Peer: "prod", Pool: r.pool, Blocks: cb, Producers: 1, Lease: time.Hour}))
	require.NoError(t, p.write(pushSpec("x", p, pb, cb)))

	require.ErrorIs(t, r.close(), core.ErrHeld, "the stalled read keeps Close refused")
	rd := r.poll()
	assert.Empty(t, rd.Fence, "closing asked for a fence")
	assert.NotContains(t, failedIDs(rd), core.RequestID("x"), "reported while its pool was registered")
	assert.Equal(t, core.OwnerTransfer, r.c.Owner(core.BlockRef{Pool: r.pool, Block: cb[0]}))
	deadline := time.Now().Add(wait)
	for r.close() != nil {
		rd = r.poll()
		assert.NotContains(t, failedIDs(rd), core.RequestID("x"), "reported while its pool was registered")
		require.True(t, time.Now().Before(deadline), "Close still refused")
		time.Sleep(time.Millisecond) // pacing of the poll loop, not synchronisation
	}
	rd = r.poll()
	assert.Contains(t, failedIDs(rd), core.RequestID("x"))
	assert.Contains(t, rd.InvalidBlocks, core.BlockRef{Pool: r.pool, Block: cb[0]})
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
	require.NoError(t, r.c.ExpectReceive(r.now, core.RecvSpec{Request: "x", Token: tok("x"), Peer: "prod", Pool: r.pool, Blocks: cb, Producers: 1, Lease: time.Minute}))
	require.NoError(t, p.write(pushSpec("x", p, pb, cb)))
	r.now = r.now.Add(time.Minute)
	require.Equal(t, []core.Epoch{1}, r.poll().Fence)
	pushUntil(r, p, "the producer's write released", func() bool { return p.c.Stats().Live == 0 && len(p.tr.held) == 1 })
	assert.Empty(t, r.all.Failed, "reported before the fence or the producer's report")
	p.tr.flushNotes(t, p.ctx)
	rd := r.reported("x")
	require.Equal(t, []core.RequestID{"x"}, failedIDs(rd))
	assert.ErrorIs(t, rd.Failed[0].Reason, core.ErrLeaseExpired)
	assert.Equal(t, []core.BlockRef{{Pool: r.pool, Block: cb[0]}}, rd.InvalidBlocks)
	assert.Equal(t, core.OwnerEngine, r.c.Owner(core.BlockRef{Pool: r.pool, Block: cb[0]}))
}
