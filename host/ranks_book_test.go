package host

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/host/group"
)

// TestRankBookDecides: the rank sync's decisions, with no group: an id
// issued twice fails at once; a request pending past its hold cap is late
// (with the longest wait), tried again collectEvery later when its expiry
// failed, and left to the watch once written; a union failure fails a
// receive that succeeded here with every block of it invalid (rule 10).
func TestRankBookDecides(t *testing.T) {
	m := NewMetrics()
	t0 := time.Unix(1000, 0)
	b := rankBook{holdCap: 10 * time.Second, self: 0, held: map[core.RequestID]*heldReq{}}
	blocks := []core.BlockRef{{Pool: 1, Block: 3}}
	var rd core.Ready
	fresh, terms := b.admit([]*heldReq{
		{id: "a", receiving: true, state: group.Succeeded, blocks: blocks, at: t0},
		{id: "b", state: group.Succeeded, at: t0.Add(time.Second)},
	}, &rd, m)
	require.Len(t, fresh, 2)
	assert.Equal(t, []group.Terminal{{Request: "a", State: group.Succeeded}, {Request: "b", State: group.Succeeded}}, terms)
	b.accept(fresh...)
	_, _ = b.admit([]*heldReq{{id: "a", state: group.Failed, at: t0}}, &rd, m)
	require.Len(t, rd.Failed, 1, "an id issued again before it resolved")
	assert.True(t, errors.Is(rd.Failed[0].Reason, group.ErrAlreadyReported))
	assert.ElementsMatch(t, []core.RequestID{"a", "b"}, b.accepted())

	d, ok := b.nextHoldCap(t0)
	require.True(t, ok)
	assert.Equal(t, 10*time.Second, d)
	pending := []group.Outcome{{Request: "a", Pending: []int{1}}, {Request: "b", Pending: []int{1}}}
	late, _, _ := b.resolved(pending, t0.Add(5*time.Second), &rd, m)
	assert.Empty(t, late, "before the hold cap")
	late, waited, _ := b.resolved(pending, t0.Add(11*time.Second), &rd, m)
	assert.Equal(t, []core.RequestID{"a", "b"}, late)
	assert.Equal(t, 11*time.Second, waited, "the longest wait")
	b.expired(late, false, t0.Add(11*time.Second))
	d, _ = b.nextHoldCap(t0.Add(11 * time.Second))
	assert.Equal(t, collectEvery, d, "a failed expiry is tried again")
	b.expired(late, true, t0.Add(12*time.Second))
	_, ok = b.nextHoldCap(t0.Add(12 * time.Second))
	assert.False(t, ok, "once written, the watch brings the outcome")

	rd = core.Ready{}
	_, _, s := b.resolved([]group.Outcome{
		{Request: "a", Resolved: true, State: group.Failed, Rank: 1, Reason: "rank 1 failed"},
		{Request: "b", Resolved: true, State: group.Succeeded, Rank: -1},
	}, t0.Add(13*time.Second), &rd, m)
	assert.Equal(t, settled{resolved: 2, unionFailed: 1, waited: 25 * time.Second}, s)
	require.Len(t, rd.Failed, 1)
	assert.True(t, errors.Is(rd.Failed[0].Reason, ErrUnionFailed))
	assert.Equal(t, blocks, rd.InvalidBlocks, "a receive that succeeded here hands back every block invalid")
	assert.Equal(t, []core.RequestID{"b"}, rd.FinishedReceiving)
	assert.Empty(t, b.held)
}
