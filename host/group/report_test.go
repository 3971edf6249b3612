package group

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/host/group/ledger"
)

// TestRule10ResolvedIsFinalAndCollected: a resolved outcome never changes,
// and once every rank has resolved a request its keys are deleted.
func TestRule10ResolvedIsFinalAndCollected(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	report(t, c.ranks[0], "a", Succeeded, "")
	report(t, c.ranks[1], "a", Succeeded, "")
	for _, g := range c.ranks {
		require.Equal(t, Succeeded, resolve(t, g, "a").State)
	}
	// A terminal state stays terminal: rank 1 cannot turn it into a failure.
	err := c.ranks[1].Report(ctxT(t), []Terminal{{Request: "a", State: Failed}})
	require.ErrorIs(t, err, ErrAlreadyReported)
	// Rounds: each rank deletes its record with its next Report, once
	// every rank's state is in; each forgets the request once the other
	// rank's record is gone.
	for round := 0; round < 3; round++ {
		for _, g := range c.ranks {
			require.NoError(t, g.Report(ctxT(t), nil))
			if g.Stats().InFlight > 0 {
				require.NoError(t, g.Sync(ctxT(t)))
				_, err := g.Resolve(ctxT(t), nil)
				require.NoError(t, err)
			}
		}
	}
	assert.Empty(t, c.keysLeft(), "resolved requests' records are garbage-collected")
	for r, g := range c.ranks {
		assert.Zero(t, g.Stats().InFlight, "rank %d forgot the request", r)
		_, err := g.Outcome(ctxT(t), "a")
		require.ErrorIs(t, err, ErrUnknownRequest)
	}
}

// TestRule10FencedWrite: a rank whose lease is gone but that has not yet
// noticed cannot publish: the membership guard refuses its transaction.
func TestRule10FencedWrite(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	// Delete rank 1's member key behind its back, keeping its lease alive.
	_, err := c.client().Delete(ctxT(t), c.ranks[0].keys.Member(1))
	require.NoError(t, err)
	err = c.ranks[1].flushOne(ctxT(t), "late", Succeeded)
	require.ErrorIs(t, err, ErrSessionLost)
	assert.Empty(t, c.published(1), "a lost rank's write landed")
}

// flushOne publishes one state without Report's membership check, as a
// rank that has not yet seen its loss would.
func (g *Group) flushOne(ctx context.Context, id core.RequestID, s State) error {
	g.callMu.Lock()
	defer g.callMu.Unlock()
	g.mu.Lock()
	err := g.l.Report([]Terminal{{Request: id, State: s}})
	g.mu.Unlock()
	if err != nil {
		return err
	}
	return g.flush(ctx)
}

// TestRule10OwnStateCountsOncePublished: a rank does not resolve a request
// on the strength of its own state until that state is in etcd; otherwise
// it could resolve, die, and disagree with the ranks that count it lost.
func TestRule10OwnStateCountsOncePublished(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	g := c.ranks[0]
	report(t, c.ranks[1], "x", Succeeded, "")
	// Rank 0 accepted its state, but the write has not landed (as after
	// a Report that etcd did not answer).
	g.callMu.Lock()
	g.mu.Lock()
	require.NoError(t, g.l.Report([]Terminal{{Request: "x", State: Succeeded}}))
	g.mu.Unlock()
	g.callMu.Unlock()
	o := resolve(t, g, "x")
	require.False(t, o.Resolved, "resolved on an unpublished state: %+v", o)
	assert.Equal(t, []int{0}, o.Pending)
	require.NoError(t, g.Report(ctxT(t), nil))
	o = resolve(t, g, "x")
	require.True(t, o.Resolved)
	assert.Equal(t, Succeeded, o.State)
}

// TestOneWritePerRound: a round's states, acks and deletions go out in one
// etcd transaction per rank while they fit the limit, and in as many as
// needed, none lost, when they do not.
func TestOneWritePerRound(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	round := func(g *Group, ts []Terminal) uint64 {
		before := g.Stats().WriteTxns
		require.NoError(t, g.Report(ctxT(t), ts))
		return g.Stats().WriteTxns - before
	}
	var ids []core.RequestID
	var ts []Terminal
	for i := 0; i < 64; i++ {
		ids = append(ids, core.RequestID(rid(i)))
		ts = append(ts, Terminal{Request: core.RequestID(rid(i)), State: Succeeded})
	}
	for r, g := range c.ranks {
		assert.EqualValues(t, 1, round(g, ts), "rank %d: 64 states", r)
	}
	for _, g := range c.ranks {
		require.NoError(t, g.Sync(ctxT(t)))
		out, err := g.Resolve(ctxT(t), ids)
		require.NoError(t, err)
		require.True(t, out[63].Resolved)
	}
	// Each rank deletes its one record of the 64 states in one write.
	for r, g := range c.ranks {
		assert.EqualValues(t, 1, round(g, nil), "rank %d: the deletion of its record", r)
	}
	// Past the states a record holds: several records, one write each,
	// every state published.
	var more []Terminal
	for i := 1000; i < 1000+2*ledger.MaxRecordStates+10; i++ {
		more = append(more, Terminal{Request: core.RequestID(rid(i)), State: Failed})
	}
	assert.EqualValues(t, 3, round(c.ranks[0], more))
	round(c.ranks[1], more)
	o := resolve(t, c.ranks[1], string(more[len(more)-1].Request))
	require.True(t, o.Resolved)
	assert.Equal(t, Failed, o.State)
	assert.Len(t, c.published(0), len(more))
	// Past etcd's operations per transaction: the deletions take several.
	for _, g := range c.ranks {
		require.NoError(t, g.Sync(ctxT(t)))
		ids := make([]core.RequestID, len(more))
		for i, t := range more {
			ids[i] = t.Request
		}
		_, err := g.Resolve(ctxT(t), ids)
		require.NoError(t, err)
	}
	c.ranks[0].cfg.Coordinator.MaxTxnOps = 4
	// Three records of a member no longer holding rank 1: orphans, which
	// rank 0, the lowest live rank, deletes with its next write.
	for i := 1; i <= 3; i++ {
		ghost := Terminal{Request: core.RequestID(fmt.Sprintf("ghost-%d", i)), State: Succeeded}
		_, err := c.client().Put(ctxT(t), c.ranks[0].keys.Record(1, "gone", uint64(i)), states(1, "gone", ghost))
		require.NoError(t, err)
	}
	require.NoError(t, c.ranks[0].Sync(ctxT(t)))
	_, err := c.ranks[0].Resolve(ctxT(t), nil)
	require.NoError(t, err)
	assert.EqualValues(t, 2, round(c.ranks[0], nil), "3 record deletions and 3 more, 4 a transaction")
	assert.Empty(t, c.published(0))
}

// TestRule10CollectedBeforeFolded: a rank deletes its states record as
// soon as every rank's state of its requests is in; a rank whose view
// applied the deletion before it resolved the request still resolves it
// from the record it saw, the same as every other rank, and then forgets
// it.
func TestRule10CollectedBeforeFolded(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	report(t, c.ranks[0], "r", Failed, "rank 0 failed")
	report(t, c.ranks[1], "r", Succeeded, "")
	o := resolve(t, c.ranks[0], "r")
	require.True(t, o.Resolved)
	require.NoError(t, c.ranks[0].Report(ctxT(t), nil)) // rank 0 deletes its record
	require.Empty(t, c.published(0), "rank 0 deleted its record")
	// Rank 1 has not resolved yet; its view has applied the deletion.
	g1 := c.ranks[1]
	require.NoError(t, g1.Sync(ctxT(t)))
	out, err := g1.Resolve(ctxT(t), []core.RequestID{"r"})
	require.NoError(t, err)
	require.True(t, out[0].Resolved, "the record went before rank 1 folded it: %+v", out[0])
	assert.Equal(t, o.State, out[0].State)
	assert.Equal(t, 0, out[0].Rank)
	// Returned once, it is forgotten, and so are the keys its view kept.
	_, err = g1.Resolve(ctxT(t), []core.RequestID{"r"})
	require.ErrorIs(t, err, ErrUnknownRequest)
	g1.mu.Lock()
	assert.Zero(t, g1.l.Stats().Viewed, "rank 1's view still holds the deleted record")
	g1.mu.Unlock()
}

// TestOwnStateWakesNoOne: a rank's own terminal state coming back through
// its watch does not signal Changed on that rank (nothing it resolves
// changes with it, and a host would resolve for nothing once per write),
// while the other rank, whose union it changes, is signalled.
func TestOwnStateWakesNoOne(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	for _, g := range c.ranks {
		require.NoError(t, g.Sync(ctxT(t)))
		drain(g)
	}
	report(t, c.ranks[0], "own", Succeeded, "")
	for _, g := range c.ranks {
		require.NoError(t, g.Sync(ctxT(t))) // both views hold the state now
	}
	select {
	case <-c.ranks[0].Changed():
		t.Fatal("rank 0 was signalled for its own state")
	default:
	}
	select {
	case <-c.ranks[1].Changed():
	default:
		t.Fatal("rank 1 was not signalled for rank 0's state")
	}
	o := resolve(t, c.ranks[0], "own")
	assert.Equal(t, []int{1}, o.Pending)
}

// drain takes a pending Changed signal, if any.
func drain(g *Group) {
	select {
	case <-g.Changed():
	default:
	}
}
