package fake

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// TestMisbehaveReleaseRunning: Release of a running handle returns OK, the
// handle is gone, and its bytes keep moving into memory.
func TestMisbehaveReleaseRunning(t *testing.T) {
	g := newGatedPair(t, 64<<10, 4096, map[string]string{"misbehave": "release-running"})
	h := postOne(t, g.a, g.whole(sdk.OpWrite, nil))
	g.steps(1)
	require.Equal(t, sdk.StateInProgress, poll(t, g.a, h).State)
	release(t, g.a, h)
	require.ErrorIs(t, poll(t, g.a, h).Err, sdk.ErrNotFound)
	// Even the memory can go from the handle's point of view.
	errs, err := g.a.ReleaseDescriptors(ctx, []sdk.DlistID{g.local, g.remote})
	require.NoError(t, err)
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	g.open()
	require.Eventually(t, func() bool {
		return bytes.Equal(readFile(t, g.aPath), readFile(t, g.bPath))
	}, wait, time.Millisecond, "the released transfer kept writing to the end")
	require.Eventually(t, func() bool {
		r, err := g.a.Resources(ctx)
		return err == nil && r.InFlight == 0
	}, wait, time.Millisecond)
}

// TestMisbehaveReuseIDs: after 64 posts handle ids repeat.
func TestMisbehaveReuseIDs(t *testing.T) {
	p := newPair(t, 4096, map[string]string{"misbehave": "reuse-ids"}, nil)
	seen := map[sdk.HandleID]bool{}
	repeated := false
	for i := 0; i < 2*reuseAfter; i++ {
		h := postOne(t, p.a, p.whole(sdk.OpWrite, nil))
		require.False(t, seen[h] && i < reuseAfter, "no repeat within the first %d posts", reuseAfter)
		repeated = repeated || seen[h]
		seen[h] = true
		terminal(t, p.a, h)
		release(t, p.a, h)
	}
	require.True(t, repeated)
}

// TestIDsUnique: without misbehaving, no id repeats across kinds, agents
// and released resources, and none is zero.
func TestIDsUnique(t *testing.T) {
	p := newPair(t, 4096, nil, nil)
	seen := map[uint64]bool{uint64(p.aRegion): true, uint64(p.bRegion): true, uint64(p.peer): true, uint64(p.local): true, uint64(p.remote): true}
	require.Len(t, seen, 5)
	for i := 0; i < 2*reuseAfter; i++ {
		h := postOne(t, p.a, p.whole(sdk.OpWrite, nil))
		require.NotZero(t, h)
		require.False(t, seen[uint64(h)], "id %d repeated", h)
		seen[uint64(h)] = true
		terminal(t, p.a, h)
		release(t, p.a, h)
	}
}

// TestMisbehaveEarlyDone: DONE is reported while the last chunk has not
// landed, and it lands only after the handle is released.
func TestMisbehaveEarlyDone(t *testing.T) {
	g := newGatedPair(t, 16<<10, 4096, map[string]string{"misbehave": "early-done"})
	h := postOne(t, g.a, g.whole(sdk.OpWrite, nil))
	for poll(t, g.a, h).State != sdk.StateDone {
		g.steps(1)
	}
	src := readFile(t, g.aPath)
	require.False(t, bytes.Equal(src, readFile(t, g.bPath)), "DONE came before every byte was in place")
	g.open()
	// The engine runs freely and has nothing it may do: the transfer
	// stays in flight, its last chunk parked, until the release.
	r, err := g.a.Resources(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, r.InFlight, "the transfer reported DONE early must stay in flight until its last chunk lands")
	release(t, g.a, h)
	require.Eventually(t, func() bool { return bytes.Equal(src, readFile(t, g.bPath)) }, wait, time.Millisecond)
	require.Eventually(t, func() bool {
		r, err := g.a.Resources(ctx)
		return err == nil && r.InFlight == 0
	}, wait, time.Millisecond)
}

// TestHonestDone: without early-done, DONE means every byte is in place
// (the check TestMisbehaveEarlyDone defeats).
func TestHonestDone(t *testing.T) {
	g := newGatedPair(t, 16<<10, 4096, nil)
	h := postOne(t, g.a, g.whole(sdk.OpWrite, nil))
	for poll(t, g.a, h).State != sdk.StateDone {
		g.steps(1)
	}
	require.Equal(t, readFile(t, g.aPath), readFile(t, g.bPath))
	release(t, g.a, h)
}

// TestEvents: every handle's terminal state appears once, in order, and
// max bounds a drain.
func TestEvents(t *testing.T) {
	p := newPair(t, 4096, map[string]string{"fault": "fail,post=2"}, nil)
	var ids []sdk.HandleID
	for i := 0; i < 3; i++ {
		h := postOne(t, p.a, p.whole(sdk.OpWrite, nil))
		terminal(t, p.a, h) // serialises the order of the three
		ids = append(ids, h)
	}
	first, err := p.a.Events(ctx, 1)
	require.NoError(t, err)
	rest, err := p.a.Events(ctx, 0)
	require.NoError(t, err)
	all := append(first, rest...)
	require.Len(t, all, 3)
	for i, e := range all {
		require.Equal(t, ids[i], e.Handle)
	}
	require.Equal(t, sdk.StateDone, all[0].State)
	require.Equal(t, sdk.StateFailed, all[1].State)
	require.ErrorIs(t, all[1].Reason, sdk.ErrBackend)
	require.Equal(t, sdk.StateDone, all[2].State)
	again, err := p.a.Events(ctx, 0)
	require.NoError(t, err)
	require.Empty(t, again, "each event once")
	release(t, p.a, ids...)
}

// TestMisbehaveParam: misbehave takes a known mode, optionally with a
// probability in (0, 1]; anything else is INVALID_ARGUMENT naming it, and
// open-lax alone lets unknown keys through.
func TestMisbehaveParam(t *testing.T) {
	for _, v := range []string{"release-running:0", "release-running:1.5", "release-running:x", "no-such-mode", "no-such-mode:0.1", ":0.5"} {
		err := New().Open(ctx, sdk.OpenRequest{Agent: "a", Params: map[string]string{"misbehave": v}})
		require.ErrorIs(t, err, sdk.ErrInvalidArgument, "misbehave=%s", v)
		require.Contains(t, err.Error(), "misbehave", "the error names the parameter")
	}
	for _, v := range []string{"release-running", "release-running:0.1", "early-done:1", "terminal-flip:0.5"} {
		a := open(t, "a", map[string]string{"misbehave": v})
		require.NoError(t, a.Close(ctx), "misbehave=%s", v)
	}
	a := open(t, "a", map[string]string{"misbehave": "open-lax", "bogus": "1"})
	require.NoError(t, a.Open(ctx, sdk.OpenRequest{Agent: "again"}), "open-lax: a second Open is OK")
	require.NoError(t, a.Close(ctx))
}
