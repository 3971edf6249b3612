package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// Rule 12 with docs/fencing.md, scripted: a send that Close ends keeps its blocks
// while a consumer may still read them: until Close deregistered its pool
// where the fence covers incoming transfers (a failed deregistration keeps
// them), else until its lease; Close returns nil only once it is reported
// (rule 16).
func TestCloseHandsBackSendBlocksOnlyOnceDeregistered(t *testing.T) {
	for _, tc := range []struct {
		name  string
		scope sdk.FenceScope
	}{{"incoming fence", sdk.FenceInitiatedAndIncoming}, {"initiated fence", sdk.FenceInitiated}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSrig(t, Config{}, func(d *double) { d.desc.FenceScope = tc.scope })
			b := mustAlloc(t, s, 1)
			sb := BlockRef{s.pool, b[0]}
			require.NoError(t, s.c.ExpectSend(s.now, SendSpec{Request: "s", Token: tok("s"), Pool: s.pool, Blocks: b, Consumers: 1, Lease: time.Hour}))
			s.d.failItem(WorkDeregisterMemory, 0, errBackend, 1)
			err := s.closeCore()
			require.Error(t, err)
			assert.Contains(t, err.Error(), "deregister region")
			rd := s.poll()
			assert.Zero(t, s.seen["s"], "reported while its pool is registered: %+v", rd)
			assert.Equal(t, OwnerTransfer, s.c.Owner(sb), "handed back while a consumer may read it")

			if tc.scope == sdk.FenceInitiated {
				require.ErrorIs(t, s.closeCore(), ErrHeld, "closed with the send not reported")
				s.poll()
				assert.Zero(t, s.seen["s"], "reported before its lease where the fence does not stop readers")
				assert.Equal(t, OwnerTransfer, s.c.Owner(sb))
				s.now = s.now.Add(time.Hour)
			}
			rd = s.poll()
			require.NoError(t, s.closeCore())
			assert.True(t, s.d.held().Zero(), "left held: %+v", s.d.held())
			rd = mergeReady(rd, s.poll())
			assert.Equal(t, []RequestID{"s"}, failedIDs(rd))
			assert.Equal(t, OwnerEngine, s.c.Owner(sb))
		})
	}
}

// Rule 16: a region left behind by a pool whose registration failed half
// way (its rollback deregistration failed too) is released by Close, with
// the regions of the pools; while its deregistration fails Close says so,
// and the next Close retries it alone.
func TestCloseReleasesAStrayRegion(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.d.failItem(WorkPrepareDescriptors, 0, errBackend, 1)
	s.d.failItem(WorkDeregisterMemory, 0, errBackend, 1)
	bad, err := s.c.RegisterPool(PoolSpec{Path: "bad", BlockSize: 64, Blocks: 8})
	require.NoError(t, err)
	s.settle()
	_, err = s.c.PoolReady(bad)
	require.Error(t, err, "the pool's registration failed")
	assert.True(t, hasAlert(s.stash, "pool_rollback_failed"))
	require.Equal(t, uint64(2), s.d.held().Regions, "the good pool's and the stray one")

	s.d.failItem(WorkDeregisterMemory, 1, errBackend, 1) // the stray: after the pool's region
	err = s.closeCore()
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrHeld)
	assert.Contains(t, err.Error(), "deregister region")
	assert.False(t, s.d.closed, "the transport was closed with a region registered")
	assert.Equal(t, uint64(1), s.d.held().Regions, "the pool's region is deregistered, the stray kept")

	require.NoError(t, s.closeCore())
	assert.True(t, s.d.closed)
	assert.True(t, s.d.held().Zero(), "left held: %+v", s.d.held())
	assert.Equal(t, 3, s.d.count(WorkDeregisterMemory), "the rollback, Close, and the retry of the stray alone")
}
