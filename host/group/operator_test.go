package group

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOperatorClearsPoison: an operator, holding no rank, lists and clears
// a pool's durable poison; every rank's watch sees it go. Clearing a pool
// that is not poisoned, a bad pool or engine name, and an unreachable etcd
// are each a clear error that changes nothing (rule 11).
func TestOperatorClearsPoison(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	require.NoError(t, c.ranks[0].Poison(ctxT(t), "kv", "block 3 quarantined"))
	require.NoError(t, c.ranks[0].Poison(ctxT(t), "aux", "block 1 quarantined"))
	waitFor(t, c.ranks[1], "rank 1 sees both poisons", func() bool { return len(c.ranks[1].Poisoned()) == 2 })

	op, err := Dial("e1", CoordinatorConfig{Endpoints: []string{c.addr}}, 0)
	require.NoError(t, err)
	defer op.Close()
	recs, err := op.Poisoned(ctxT(t))
	require.NoError(t, err)
	assert.Equal(t, []string{"aux", "kv"}, pools(recs))

	r, err := op.ClearPoison(ctxT(t), "kv")
	require.NoError(t, err)
	assert.Equal(t, "kv", r.Pool)
	assert.Equal(t, 0, r.Rank)
	assert.Equal(t, "block 3 quarantined", r.Reason)
	for _, g := range c.ranks {
		waitFor(t, g, "kv cleared", func() bool { _, ok := g.IsPoisoned("kv"); return !ok })
		_, ok := g.IsPoisoned("aux")
		assert.True(t, ok, "rank %d: the other pool stays poisoned", g.Rank())
	}

	_, err = op.ClearPoison(ctxT(t), "kv")
	require.ErrorIs(t, err, ErrNotPoisoned)
	assert.Contains(t, err.Error(), `pool "kv"`)
	assert.Contains(t, err.Error(), "[aux]")
	_, err = op.ClearPoison(ctxT(t), "")
	require.ErrorIs(t, err, ErrBadArgument)
	recs, err = op.Poisoned(ctxT(t))
	require.NoError(t, err)
	assert.Equal(t, []string{"aux"}, pools(recs), "the refused calls changed nothing")

	_, err = Dial("a/b", CoordinatorConfig{Endpoints: []string{c.addr}}, 0)
	require.ErrorIs(t, err, ErrBadArgument)
	_, err = Dial("e1", CoordinatorConfig{}, 0)
	require.ErrorIs(t, err, ErrBadArgument)
	dead, err := Dial("e1", CoordinatorConfig{Endpoints: []string{deadAddr(t)}}, 300*time.Millisecond)
	require.NoError(t, err)
	defer dead.Close()
	_, err = dead.ClearPoison(context.Background(), "aux")
	require.ErrorIs(t, err, ErrCoordinator)
}
