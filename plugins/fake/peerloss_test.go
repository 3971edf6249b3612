package fake

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// setWatch sets how often a's engine checks that its peers live.
func setWatch(a *Transport, d time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.watch = d
}

// TestFenceInitiatedDeadPeerMemoryKeepsBeingWritten: under fence=initiated
// the death of the target agent does not stop a transfer into its memory
// (the initiator maps it directly); chunks keep landing until the
// initiator's peer watch notices, and then the transfer ends FAILED with
// REMOTE_DISCONNECT, moving no byte more. Under fence=incoming the death
// stops the very next chunk.
func TestFenceInitiatedDeadPeerMemoryKeepsBeingWritten(t *testing.T) {
	const chunk = 4096
	cases := []struct {
		fence       string
		steps       int // steps the engine takes after the kill, before the watch runs
		landedAfter int // chunks of them that land in the dead agent's memory
	}{
		{fenceIncoming, 1, 0},
		{fenceInitiated, 2, 2},
	}
	for _, c := range cases {
		t.Run(c.fence, func(t *testing.T) {
			// The watch never runs until the test turns it on.
			g := newGatedPair(t, 64<<10, chunk, map[string]string{"fence": c.fence}, func(a *Transport) { a.watch = time.Hour })
			before := readFile(t, g.bPath)
			src := readFile(t, g.aPath)
			h := postOne(t, g.a, g.whole(sdk.OpWrite, []byte("never")))
			g.steps(2) // two chunks land while b lives
			g.b.Kill()
			g.steps(c.steps)
			landed := 2 + c.landedAfter
			after := readFile(t, g.bPath)
			require.Equal(t, src[:landed*chunk], after[:landed*chunk], "the chunks before the kill, and under fence=initiated after it, landed in b's memory")
			require.Equal(t, before[landed*chunk:], after[landed*chunk:], "no other byte moved")

			setWatch(g.a, 0) // the watch runs before every step from now on
			g.open()
			st := terminal(t, g.a, h)
			require.Equal(t, sdk.StateFailed, st.State, "a transfer to a dead peer never silently succeeds")
			require.ErrorIs(t, st.Reason, sdk.ErrRemoteDisconnect)
			after = readFile(t, g.bPath)
			require.Equal(t, before[landed*chunk:], after[landed*chunk:], "once noticed, no byte more moved")
			release(t, g.a, h)

			res, err := g.a.Post(ctx, []sdk.PostSpec{g.whole(sdk.OpWrite, nil)})
			require.NoError(t, err)
			require.ErrorIs(t, res[0].Err, sdk.ErrRemoteDisconnect, "a post to the dead peer")
			require.Zero(t, res[0].ID)
		})
	}
}

// TestFenceInitiatedReportsPeerLoss: under fence=initiated with the default
// watch, a running transfer and a stalled one to a peer that dies both end
// FAILED with REMOTE_DISCONNECT, as Describe's PeerLoss=reported promises;
// a post after the death is REMOTE_DISCONNECT and posts nothing; the peer's
// metadata no longer loads.
func TestFenceInitiatedReportsPeerLoss(t *testing.T) {
	p := newPair(t, 4<<20, map[string]string{"fence": "initiated", "chunk": "4096", "chunk_delay": "1ms", "fault": "stall,post=2"}, nil)
	md, err := p.b.LocalMetadata(ctx)
	require.NoError(t, err)
	running := postOne(t, p.a, p.whole(sdk.OpWrite, nil))
	stalled := postOne(t, p.a, p.whole(sdk.OpRead, nil))
	p.b.Kill()
	for _, h := range []sdk.HandleID{running, stalled} {
		st := terminal(t, p.a, h)
		require.Equal(t, sdk.StateFailed, st.State, "handle %d", h)
		require.ErrorIs(t, st.Reason, sdk.ErrRemoteDisconnect)
	}
	release(t, p.a, running, stalled)

	res, err := p.a.Post(ctx, []sdk.PostSpec{p.whole(sdk.OpWrite, nil)})
	require.NoError(t, err)
	require.ErrorIs(t, res[0].Err, sdk.ErrRemoteDisconnect)
	r, err := p.a.Resources(ctx)
	require.NoError(t, err)
	require.Zero(t, r.Handles, "the refused post holds nothing")

	lp, err := p.a.LoadPeers(ctx, []sdk.PeerSpec{{Name: "b", Metadata: md}})
	require.NoError(t, err)
	require.ErrorIs(t, lp[0].Err, sdk.ErrRemoteDisconnect)
}

// TestFenceInitiatedDeregisterDoesNotStop: under fence=initiated a live
// peer that deregisters the target region does not stop a transfer into
// it (nothing revokes a direct mapping); under fence=incoming it does.
func TestFenceInitiatedDeregisterDoesNotStop(t *testing.T) {
	for _, fence := range []string{fenceIncoming, fenceInitiated} {
		t.Run(fence, func(t *testing.T) {
			g := newGatedPair(t, 64<<10, 4096, map[string]string{"fence": fence}, func(a *Transport) { a.watch = 0 })
			h := postOne(t, g.a, g.whole(sdk.OpWrite, nil))
			g.steps(2)
			errs, err := g.b.DeregisterMemory(ctx, []sdk.RegionID{g.bRegion})
			require.NoError(t, err)
			require.NoError(t, errs[0])
			g.open()
			st := terminal(t, g.a, h)
			if fence == fenceIncoming {
				require.Equal(t, sdk.StateFailed, st.State)
				require.ErrorIs(t, st.Reason, sdk.ErrRemoteDisconnect)
			} else {
				require.Equal(t, sdk.StateDone, st.State)
				require.True(t, bytes.Equal(readFile(t, g.aPath), readFile(t, g.bPath)), "every byte landed")
			}
			release(t, g.a, h)
		})
	}
}
