package group

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func pools(recs []PoisonRecord) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Pool)
	}
	return out
}

// TestRule11PoisonSticky: a pool poisoned on one rank is poisoned on every
// rank, stays poisoned across a rank's restart and the coordinator's, and
// goes only when an operator clears it (rule 11).
func TestRule11PoisonSticky(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	require.NoError(t, c.ranks[1].Poison(ctxT(t), "kv", "block 7 force-released"))
	_, ok := c.ranks[1].IsPoisoned("kv")
	require.True(t, ok, "the poisoning rank sees its poison at once")
	g0 := c.ranks[0]
	waitFor(t, g0, "rank 0 sees kv poisoned", func() bool { _, ok := g0.IsPoisoned("kv"); return ok })
	rec, _ := g0.IsPoisoned("kv")
	assert.Equal(t, 1, rec.Rank)
	assert.Equal(t, "block 7 force-released", rec.Reason)

	// The first reason stays: a second poison changes nothing.
	require.NoError(t, g0.Poison(ctxT(t), "kv", "another reason"))
	rec, _ = c.ranks[1].IsPoisoned("kv")
	assert.Equal(t, "block 7 force-released", rec.Reason)

	// A rank restarted later sees it at Open, before anything else.
	g1 := c.reopen(1)
	_, ok = g1.IsPoisoned("kv")
	require.True(t, ok, "a restarted rank forgot the poison")

	// So does a group whose etcd restarted from its data directory.
	c.close()
	c.ranks[0] = c.open(0, c.addr)
	c.ranks[1] = c.open(1, c.addr)
	for r, g := range c.ranks {
		assert.Equal(t, []string{"kv"}, pools(g.Poisoned()), "rank %d after the coordinator restarted", r)
	}

	// Only the operator clears it, and every rank sees that.
	require.NoError(t, c.ranks[0].ClearPoison(ctxT(t), "kv"))
	for r, g := range c.ranks {
		waitFor(t, g, "poison cleared", func() bool { return len(g.Poisoned()) == 0 })
		_, ok := g.IsPoisoned("kv")
		assert.False(t, ok, "rank %d", r)
	}
}

// TestPoisonFailsSafe: a malformed poison record still poisons its pool,
// and a bad pool name is refused.
func TestPoisonFailsSafe(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	_, err := c.client().Put(ctxT(t), c.ranks[0].keys.Poison("kv"), "not json")
	require.NoError(t, err)
	g := c.ranks[0]
	waitFor(t, g, "malformed poison seen", func() bool { _, ok := g.IsPoisoned("kv"); return ok })
	rec, _ := g.IsPoisoned("kv")
	assert.Contains(t, rec.Reason, "malformed poison record")
	require.ErrorIs(t, g.Poison(ctxT(t), "", "x"), ErrBadArgument)
}
