package core

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// Rule 1, seeds 001 and 002: a handle whose Poll fails has an unknown state,
// not a terminal one: it is neither released nor failed, and the request
// finishes normally once a poll sees it DONE. Polling is the fallback for
// transports without events.
func TestPollErrorIsNotTerminal(t *testing.T) {
	skipStallsIfShort(t)
	r := newRig(t, rigOpts{local: "poll-fail,post=1,count=3;stall,post=1,for=100ms"})
	r.c.events = false
	r.connect("p")
	spec, blocks := r.readSpec("r", "p", 1)
	require.NoError(t, r.read(spec))
	r.until("three failed polls", func(Ready) bool {
		n := 0
		for _, a := range r.all.Alerts {
			if a.Kind == "transfer_poll_failed" {
				n++
			}
		}
		return n == 3
	})
	assert.Zero(t, r.tr.count("Release"), "released a handle of unknown state")
	assert.Equal(t, OwnerTransfer, r.c.Owner(blocks[0]))
	rd := r.reported("r")
	assert.Equal(t, []RequestID{"r"}, rd.FinishedReceiving, "a poll error failed the request")
	assert.Empty(t, r.tr.releasedEarly)
}

// Rules 2 and 13: a round whose context has expired does nothing unsafe:
// no handle counts as released, no request is reported; the next round
// with time left finishes the work.
func TestExpiredContextChangesNothingUnsafe(t *testing.T) {
	r := newRig(t, rigOpts{})
	r.c.events = false
	r.connect("p")
	spec, blocks := r.readSpec("r", "p", 1)
	require.NoError(t, r.read(spec))
	h := r.c.reqs.get("r").xs[0].ref.Handle
	require.Eventually(t, func() bool {
		st, err := r.tr.Poll(r.ctx, []sdk.HandleID{h})
		return err == nil && st[0].State == sdk.StateDone
	}, wait, time.Millisecond)
	// Mark it terminal in core, then release with a dead context.
	r.c.setState(r.c.live.get(h), sdk.StateDone, nil)
	dead, cancel := context.WithCancel(r.ctx)
	cancel()
	rd := r.pollCtx(dead)
	assert.Empty(t, rd.FinishedReceiving)
	assert.Equal(t, 1, r.c.Stats().Live, "a release that did not happen counted as done")
	assert.Equal(t, OwnerTransfer, r.c.Owner(blocks[0]))
	assert.True(t, hasAlert(rd, "transfer_release_failed"))
	rd = r.reported("r")
	assert.Equal(t, []RequestID{"r"}, rd.FinishedReceiving)
}

// Bad input is refused with an error and changes nothing.
func TestBadInputChangesNothing(t *testing.T) {
	r := newRig(t, rigOpts{})
	r.connect("p")
	b := r.alloc(2)
	good := Part{Pool: r.pool, Local: b[:1], Rank: 0, Remote: []uint32{0}}
	for _, tc := range []struct {
		name string
		spec ReadSpec
	}{
		{"empty id", ReadSpec{Peer: "p", Parts: []Part{good}}},
		{"no peer", ReadSpec{Request: "x", Token: tok("x"), Parts: []Part{good}}},
		{"no parts", ReadSpec{Request: "x", Token: tok("x"), Peer: "p"}},
		{"unknown pool", ReadSpec{Request: "x", Token: tok("x"), Peer: "p", Parts: []Part{{Pool: 9, Local: b[:1], Remote: []uint32{0}}}}},
		{"lengths differ", ReadSpec{Request: "x", Token: tok("x"), Peer: "p", Parts: []Part{{Pool: r.pool, Local: b, Remote: []uint32{0}}}}},
		{"block listed twice", ReadSpec{Request: "x", Token: tok("x"), Peer: "p", Parts: []Part{good, good}}},
		{"free block", ReadSpec{Request: "x", Token: tok("x"), Peer: "p", Parts: []Part{{Pool: r.pool, Local: []uint32{nBlocks - 1}, Remote: []uint32{0}}}}},
		{"rank out of range", ReadSpec{Request: "x", Token: tok("x"), Peer: "p", Parts: []Part{{Pool: r.pool, Local: b[:1], Rank: 5, Remote: []uint32{0}}}}},
		{"remote block out of range", ReadSpec{Request: "x", Token: tok("x"), Peer: "p", Parts: []Part{{Pool: r.pool, Local: b[:1], Remote: []uint32{nBlocks}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := r.c.Stats()
			err := r.read(tc.spec)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "core: read request")
			assert.Equal(t, before, r.c.Stats())
			assert.Equal(t, []Owner{OwnerEngine, OwnerEngine}, r.owners([]BlockRef{{r.pool, b[0]}, {r.pool, b[1]}}))
		})
	}
	require.NoError(t, r.read(ReadSpec{Request: "dup", Token: tok("dup"), Peer: "p", Parts: []Part{good}}))
	err := r.read(ReadSpec{Request: "dup", Token: tok("dup"), Peer: "p", Parts: []Part{{Pool: r.pool, Local: b[1:], Remote: []uint32{1}}}})
	require.ErrorContains(t, err, "still in flight")
	assert.Equal(t, OwnerEngine, r.c.Owner(BlockRef{r.pool, b[1]}))
	r.reported("dup")
	_, err = New(Config{HoldCap: -1})
	require.ErrorContains(t, err, "HoldCap")
}
