package group

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRule9StartupConsensus: ranks agree on the effective mode before any
// transport is built; an asymmetric rank fails startup on every rank, with a
// message naming the rank, the field and both values (rule 9).
func TestRule9StartupConsensus(t *testing.T) {
	t.Run("agree", func(t *testing.T) {
		c := newCluster(t, 3)
		// Pools listed in another order are the same mode.
		m := testMode()
		m.Pools[0], m.Pools[1] = m.Pools[1], m.Pools[0]
		for r, err := range c.joinAll(map[int]Mode{2: m}) {
			require.NoError(t, err, "rank %d", r)
		}
	})
	t.Run("block size differs", func(t *testing.T) {
		c := newCluster(t, 3)
		m := testMode()
		m.Pools[0].BlockSize = 8192
		errs := c.joinAll(map[int]Mode{2: m})
		for r, err := range errs {
			require.Error(t, err, "rank %d must fail startup", r)
			require.ErrorIs(t, err, ErrModeMismatch, "rank %d", r)
			var mm *ModeMismatchError
			require.True(t, errors.As(err, &mm), "rank %d: %v", r, err)
			assert.Equal(t, 2, mm.Rank, "rank %d names the differing rank", r)
			assert.Contains(t, err.Error(), `pools["kv"].block_size: rank 0 has 4096, rank 2 has 8192`, "rank %d", r)
			assert.Equal(t, errs[0].Error(), err.Error(), "every rank reports the same difference")
		}
	})
	t.Run("every field is compared", func(t *testing.T) {
		for _, tc := range []struct {
			field  string
			change func(*Mode)
		}{
			{"transport", func(m *Mode) { m.Transport = "ucx" }},
			{"capabilities.cancel", func(m *Mode) { m.Capabilities.Cancel = true }},
			{"fence_scope", func(m *Mode) { m.FenceScope = "initiated" }},
			{`pools["aux"]`, func(m *Mode) { m.Pools = m.Pools[:1] }},
			{`pools["kv"].blocks`, func(m *Mode) { m.Pools[0].Blocks = 65 }},
			{"escalation_policy", func(m *Mode) { m.EscalationPolicy = "release-and-reuse" }},
			{"escalation_cap", func(m *Mode) { m.EscalationCap = time.Second }},
		} {
			m := testMode()
			tc.change(&m)
			d := Diff(testMode().Canonical(), m.Canonical())
			require.Len(t, d, 1, tc.field)
			assert.Equal(t, tc.field, d[0].Field)
		}
	})
	t.Run("mixed contract versions", func(t *testing.T) {
		c := newCluster(t, 2)
		m := testMode()
		m.ContractMajor = 2
		for r, err := range c.joinAll(map[int]Mode{1: m}) {
			require.ErrorIs(t, err, ErrMixedContract, "rank %d", r)
			assert.Contains(t, err.Error(), "contract_major: rank 0 has 1, rank 1 has 2", "rank %d", r)
		}
	})
	t.Run("mixed group protocol", func(t *testing.T) {
		c := newCluster(t, 2)
		// Rank 1 is a custody of another version: its record says so.
		_, err := c.client().Put(ctxT(t), c.ranks[0].keys.Member(1), `{"proto":9,"rank":1,"member":"future"}`)
		require.NoError(t, err)
		err = c.ranks[0].Join(ctxT(t), testMode())
		require.ErrorIs(t, err, ErrMixedContract)
		assert.Contains(t, err.Error(), "rank 1 speaks group protocol 9")
	})
	t.Run("rank never arrives", func(t *testing.T) {
		c := newCluster(t, 3)
		c.ranks[0].cfg.Timeouts.Join = 300 * time.Millisecond
		c.ranks[1].cfg.Timeouts.Join = 300 * time.Millisecond
		require.NoError(t, c.ranks[2].Close())
		c.ranks = c.ranks[:2]
		for r, err := range c.joinAll(nil)[:2] {
			require.ErrorIs(t, err, ErrRankMissing, "rank %d", r)
			assert.Contains(t, err.Error(), "ranks [2] never joined", "rank %d", r)
		}
	})
	t.Run("duplicate rank", func(t *testing.T) {
		c := newCluster(t, 2)
		c.mustJoin()
		// A second process configured as rank 1 while the first lives.
		imp := c.open(1, c.addr)
		defer imp.Close()
		err := imp.Join(ctxT(t), testMode())
		require.ErrorIs(t, err, ErrDuplicateRank)
		assert.Contains(t, err.Error(), "rank 1 is already held by member "+c.ranks[1].Member())
		// The group is untouched: rank 1 is still the first process.
		assert.Equal(t, c.ranks[1].Member(), c.ranks[0].members()[1])
		assert.Empty(t, c.ranks[0].LostRanks())
	})
	t.Run("the caller's context bounds the wait", func(t *testing.T) {
		// The context ends once Join waits for the other ranks (its own
		// record published) and rank 0's view holds its own record (its
		// watch applied it, not merely etcd has it), so that Join is
		// surely waiting for rank 1 alone then, however slow the publish
		// or the watch was.
		c := newCluster(t, 2)
		g0 := c.ranks[0]
		waiting := make(chan struct{})
		joinWaits = func(g *Group) {
			if g == g0 {
				close(waiting)
			}
		}
		defer func() { joinWaits = nil }()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		errc := make(chan error, 1)
		go func() { errc <- g0.Join(ctx, testMode()) }()
		select {
		case <-waiting:
		case err := <-errc:
			t.Fatalf("Join returned before it waited: %v", err)
		}
		waitFor(t, g0, "rank 0's own member record in its view", func() bool { return g0.members()[0] == g0.Member() })
		cancel()
		err := <-errc
		require.ErrorIs(t, err, context.Canceled)
		assert.Contains(t, err.Error(), "waiting for ranks [1] to join")
	})
	t.Run("invalid mode", func(t *testing.T) {
		c := newCluster(t, 2)
		m := testMode()
		m.Pools[1].Name = "kv"
		err := c.ranks[0].Join(ctxT(t), m)
		require.ErrorContains(t, err, `mode: pools[1].name: pool "kv" is listed twice`)
	})
}

// TestModeEncodingDeterministic: equal modes encode to equal bytes,
// whatever the pool order.
func TestModeEncodingDeterministic(t *testing.T) {
	a, b := testMode(), testMode()
	b.Pools[0], b.Pools[1] = b.Pools[1], b.Pools[0]
	ea, err := a.Encode()
	require.NoError(t, err)
	eb, err := b.Encode()
	require.NoError(t, err)
	assert.Equal(t, string(ea), string(eb))
	assert.Empty(t, Diff(a.Canonical(), b.Canonical()))
}
