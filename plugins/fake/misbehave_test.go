package fake

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
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

// TestWithMisbehaveBeforeOpen: a mode given at New is in force before
// Open (ungated: Poll and Release of an unknown handle answer NOT_FOUND,
// as if open, where a closed gate answers INVALID_ARGUMENT), carries over
// into Open unless Open names its own, and an unknown mode is refused,
// named.
func TestWithMisbehaveBeforeOpen(t *testing.T) {
	ctx := t.Context()
	plain := New()
	_, err := plain.Poll(ctx, []sdk.HandleID{42})
	require.ErrorIs(t, err, sdk.ErrInvalidArgument, "a plain agent's gate refuses Poll before Open")

	opt, err := WithMisbehave("ungated")
	require.NoError(t, err)
	tr := New(opt)
	st, err := tr.Poll(ctx, []sdk.HandleID{42})
	require.NoError(t, err, "ungated from New: Poll before Open goes through")
	require.Len(t, st, 1)
	assert.ErrorIs(t, st[0].Err, sdk.ErrNotFound)
	errs, err := tr.Release(ctx, []sdk.HandleID{42})
	require.NoError(t, err)
	assert.ErrorIs(t, errs[0], sdk.ErrNotFound)

	require.NoError(t, tr.Open(ctx, sdk.OpenRequest{Agent: "early-" + t.Name(), Params: map[string]string{"dir": t.TempDir()}}))
	require.NoError(t, tr.Close(ctx))
	_, err = tr.Poll(ctx, []sdk.HandleID{42})
	assert.NoError(t, err, "the mode given at New is Open's too: Poll after Close goes through")

	_, err = WithMisbehave("no-such-mode")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"no-such-mode"`)
}

// TestMisbehaveTerminalFlipAfterReportedDone: under terminal-flip the
// FAILED comes flipAfter after a Poll first reported DONE, however late
// that Poll is, so that a check always sees the DONE it contradicts.
func TestMisbehaveTerminalFlipAfterReportedDone(t *testing.T) {
	g := newGatedPair(t, 64<<10, 4096, map[string]string{"misbehave": "terminal-flip"})
	h := postOne(t, g.a, g.whole(sdk.OpWrite, nil))
	g.open()
	// The transfer's end, learnt from its event (which tells no lie),
	// not from a Poll.
	require.Eventually(t, func() bool {
		evs, err := g.a.Events(ctx, 0)
		require.NoError(t, err)
		for _, ev := range evs {
			if ev.Handle == h && ev.State == sdk.StateDone {
				return true
			}
		}
		return false
	}, wait, time.Millisecond)
	// Polled first well after the transfer ended: still DONE.
	time.Sleep(2 * flipAfter) // the stimulus is time passing before the first Poll
	require.Equal(t, sdk.StateDone, poll(t, g.a, h).State, "the first Poll after DONE must report DONE")
	deadline := time.Now().Add(10 * time.Second)
	for poll(t, g.a, h).State == sdk.StateDone {
		require.True(t, time.Now().Before(deadline), "terminal-flip never reported FAILED after DONE was seen")
		time.Sleep(time.Millisecond) // paces a bounded poll loop: the flip is timed, no event announces it
	}
	assert.Equal(t, sdk.StateFailed, poll(t, g.a, h).State)
	release(t, g.a, h)
}

// TestMisbehaveTerminalFlipNext: under terminal-flip-next the Poll that
// first reports DONE is the last to: the very next one reports FAILED.
func TestMisbehaveTerminalFlipNext(t *testing.T) {
	g := newGatedPair(t, 64<<10, 4096, map[string]string{"misbehave": "terminal-flip-next"})
	h := postOne(t, g.a, g.whole(sdk.OpWrite, nil))
	g.open()
	require.Eventually(t, func() bool { return poll(t, g.a, h).State == sdk.StateDone }, wait, time.Millisecond)
	st := poll(t, g.a, h)
	assert.Equal(t, sdk.StateFailed, st.State, "the Poll after the first DONE must report FAILED")
	assert.ErrorContains(t, st.Reason, "misbehave=terminal-flip-next")
	release(t, g.a, h)
}
