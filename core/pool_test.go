package core

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Bad pool input is refused with an error naming what is wrong and changes
// nothing: no pool id taken, no transport call.
func TestBadPoolSpecsAreRefused(t *testing.T) {
	s := newSrig(t, Config{}, func(d *double) { d.desc.Limits.MaxDescriptorsPerList = 100 })
	calls := len(s.d.calls)
	for _, tc := range []struct {
		name, want string
		spec       PoolSpec
	}{
		{"no path", "Path is empty", PoolSpec{BlockSize: 64, Blocks: 8}},
		{"no block size", "must both be positive", PoolSpec{Path: "x", Blocks: 8}},
		{"no blocks", "must both be positive", PoolSpec{Path: "x", BlockSize: 64}},
		{"overflow", "overflow 64 bits", PoolSpec{Path: "x", BlockSize: 1<<62 + 1, Blocks: 2}},
		{"more blocks than a list holds", "exceed the transport's 100 descriptors", PoolSpec{Path: "x", BlockSize: 64, Blocks: 101}},
	} {
		_, err := s.c.RegisterPool(tc.spec)
		require.Error(t, err, tc.name)
		assert.Contains(t, err.Error(), tc.want, tc.name)
	}
	assert.Len(t, s.d.calls, calls, "a refused pool made a transport call")
	_, err := s.c.PoolReady(s.pool + 1)
	assert.Error(t, err, "a refused pool took an id")

	for _, good := range []PoolSpec{{Path: "a", BlockSize: 1 << 62, Blocks: 2}, {Path: "b", BlockSize: 64, Blocks: 100}} {
		id, err := s.c.RegisterPool(good)
		require.NoError(t, err, "%+v", good)
		ok, err := s.c.PoolReady(id)
		require.NoError(t, err)
		assert.False(t, ok, "ready before its Work ran")
		s.settle()
		ok, err = s.c.PoolReady(id)
		require.NoError(t, err)
		assert.True(t, ok)
	}
}

// A pool whose registration fails is unusable: PoolReady returns the error
// and Alloc refuses it; without a transport none can be registered, and
// PoolReady says so.
func TestAFailedPoolIsUnusable(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.d.failItem(WorkRegisterMemory, 0, errBackend, 1)
	id, err := s.c.RegisterPool(PoolSpec{Path: "bad", BlockSize: 64, Blocks: 8})
	require.NoError(t, err)
	s.settle()
	ok, err := s.c.PoolReady(id)
	assert.False(t, ok)
	assert.ErrorIs(t, err, errBackend)
	_, err = s.c.Alloc(id, 1)
	assert.Error(t, err)

	s.kill(1)
	_, err = s.c.PoolReady(s.pool)
	assert.ErrorIs(t, err, ErrNotAttached)
	_, err = s.c.RegisterPool(PoolSpec{Path: "late", BlockSize: 64, Blocks: 8})
	assert.ErrorIs(t, err, ErrNotAttached)
}

// A pool's registration that fails, as a whole call or for its item, or
// whose dlist fails, leaves the pool failed with the transport's error.
func TestPoolRegistrationFailuresKeepTheError(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(d *double)
	}{
		{"register, whole call", func(d *double) { d.failWhole(WorkRegisterMemory, errBackend, 1) }},
		{"register, item", func(d *double) { d.failItem(WorkRegisterMemory, 0, errBackend, 1) }},
		{"dlist, whole call", func(d *double) { d.failWhole(WorkPrepareDescriptors, errBackend, 1) }},
		{"dlist, item", func(d *double) { d.failItem(WorkPrepareDescriptors, 0, errBackend, 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSrig(t, Config{}, nil)
			tc.mod(s.d)
			id, err := s.c.RegisterPool(PoolSpec{Path: "bad", BlockSize: 64, Blocks: 8})
			require.NoError(t, err)
			s.settle()
			ok, err := s.c.PoolReady(id)
			assert.False(t, ok)
			assert.ErrorIs(t, err, errBackend)
			assert.Equal(t, uint64(1), s.d.held().Regions, "only the good pool's region is left")
			assert.Equal(t, uint64(1), s.d.held().Dlists)
		})
	}
}

// Attach registers the pools again on the new epoch; where that fails,
// core asks for a fence of the new epoch rather than run with the pool
// unregistered.
func TestAPoolThatCannotRegisterAgainFencesTheNewEpoch(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	s.kill(1)
	s.attach(2, func(d *double) { d.failItem(WorkRegisterMemory, 0, errBackend, 1) })
	rd := s.poll()
	assert.Equal(t, []Epoch{2}, rd.Fence)
	assert.True(t, hasAlert(rd, "pool_register_failed"))
	ok, err := s.c.PoolReady(s.pool)
	assert.False(t, ok)
	assert.NoError(t, err, "the pool itself is fine: the epoch is fenced")
}

// Alloc hands out between zero and every free block; asking for fewer than
// zero or more than are free is an error that moves nothing.
func TestAllocBounds(t *testing.T) {
	s := newSrig(t, Config{}, nil)
	got, err := s.c.Alloc(s.pool, 0)
	require.NoError(t, err)
	assert.Empty(t, got)
	_, err = s.c.Alloc(s.pool, -1)
	assert.Error(t, err)
	_, err = s.c.Alloc(s.pool, 9)
	assert.Error(t, err)
	got, err = s.c.Alloc(s.pool, 8)
	require.NoError(t, err)
	assert.ElementsMatch(t, []uint32{0, 1, 2, 3, 4, 5, 6, 7}, got)
	_, err = s.c.Alloc(s.pool, 1)
	assert.Error(t, err, "no block is free")
}
