package fake

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// TestKill: Kill ends an agent as the in-process crash does: every later
// call, Open and Close included, is PLUGIN_SHUTDOWN; its DMA engine has
// stopped by the time Kill returns; its leases are dropped, so a peer's
// transfer into its memory ends REMOTE_DISCONNECT and its metadata no
// longer loads. A second Kill does nothing.
func TestKill(t *testing.T) {
	stall := map[string]string{"fault": "stall"}
	p := newPair(t, 1<<20, stall, stall)
	postOne(t, p.a, p.whole(sdk.OpWrite, nil)) // a's own transfer, stalled
	// b writes into a's memory (stalled, so it is running when a dies).
	back := loadPeer(t, p.b, p.a)
	bPath := regionFile(t, 1<<20, 3)
	bLocal := register(t, p.b, sdk.Region{Path: bPath, Length: 1 << 20})
	bl := prepare(t, p.b, 0, sdk.Descriptor{Region: bLocal, Length: 1 << 20})
	br := prepare(t, p.b, back, sdk.Descriptor{Region: p.aRegion, Length: 1 << 20})
	mdA, err := p.a.LocalMetadata(ctx)
	require.NoError(t, err)
	in := postOne(t, p.b, sdk.PostSpec{Op: sdk.OpWrite, Local: bl, LocalIndices: []uint32{0}, Remote: br, RemoteIndices: []uint32{0}})

	p.a.Kill()
	select {
	case <-p.a.stop:
	default:
		t.Fatal("Kill returned with a's engine not told to stop")
	}
	p.a.mu.Lock()
	require.Nil(t, p.a.active, "a's transfers are gone")
	p.a.mu.Unlock()

	calls := map[string]func(context.Context) error{
		"Describe":       func(c context.Context) error { _, err := p.a.Describe(c); return err },
		"Open":           func(c context.Context) error { return p.a.Open(c, sdk.OpenRequest{Agent: "a"}) },
		"Close":          func(c context.Context) error { return p.a.Close(c) },
		"RegisterMemory": func(c context.Context) error { _, err := p.a.RegisterMemory(c, nil); return err },
		"Post":           func(c context.Context) error { _, err := p.a.Post(c, nil); return err },
		"Poll":           func(c context.Context) error { _, err := p.a.Poll(c, nil); return err },
		"Cancel":         func(c context.Context) error { _, err := p.a.Cancel(c, nil); return err },
		"Release":        func(c context.Context) error { _, err := p.a.Release(c, nil); return err },
		"Notifications":  func(c context.Context) error { _, err := p.a.Notifications(c, 0); return err },
		"Events":         func(c context.Context) error { _, err := p.a.Events(c, 0); return err },
		"Resources":      func(c context.Context) error { _, err := p.a.Resources(c); return err },
	}
	for name, call := range calls {
		require.ErrorIs(t, call(ctx), sdk.ErrPluginShutdown, name)
	}

	st := terminal(t, p.b, in)
	require.Equal(t, sdk.StateFailed, st.State, "b's transfer into the dead agent's memory")
	require.ErrorIs(t, st.Reason, sdk.ErrRemoteDisconnect)
	res, err := p.b.LoadPeers(ctx, []sdk.PeerSpec{{Name: "a", Metadata: mdA}})
	require.NoError(t, err)
	require.ErrorIs(t, res[0].Err, sdk.ErrRemoteDisconnect, "a dead agent's metadata")

	p.a.Kill()
	require.ErrorIs(t, p.a.Close(ctx), sdk.ErrPluginShutdown)

	release(t, p.b, in)
	_, _ = p.b.ReleaseDescriptors(ctx, []sdk.DlistID{bl, br})
	_, _ = p.b.UnloadPeers(ctx, []sdk.PeerID{back})
	_, _ = p.b.DeregisterMemory(ctx, []sdk.RegionID{bLocal})
}

// TestKillBeforeOpen: a killed new agent never opens.
func TestKillBeforeOpen(t *testing.T) {
	a := New()
	a.Kill()
	require.ErrorIs(t, a.Open(ctx, sdk.OpenRequest{Agent: "a", Params: map[string]string{"dir": t.TempDir(), "peer_dirs": os.TempDir()}}), sdk.ErrPluginShutdown)
}

// TestKillOpenChecksStateFirst: after Kill, Open is PLUGIN_SHUTDOWN whatever
// the request, a bad one included: the state is checked before the
// request, as for every other call.
func TestKillOpenChecksStateFirst(t *testing.T) {
	reqs := map[string]sdk.OpenRequest{
		"valid":         {Agent: "a", Params: map[string]string{"dir": t.TempDir(), "peer_dirs": os.TempDir()}},
		"empty agent":   {Agent: "", Params: map[string]string{"dir": t.TempDir(), "peer_dirs": os.TempDir()}},
		"unknown param": {Agent: "a", Params: map[string]string{"no-such-key": "1"}},
		"bad fault":     {Agent: "a", Params: map[string]string{"fault": "nonsense"}},
	}
	agents := map[string]func(t *testing.T) *Transport{
		"killed new": func(t *testing.T) *Transport { return New() },
		"killed open": func(t *testing.T) *Transport {
			a := New()
			require.NoError(t, a.Open(ctx, sdk.OpenRequest{Agent: "a", Params: map[string]string{"dir": t.TempDir(), "peer_dirs": os.TempDir()}}))
			return a
		},
	}
	for an, agent := range agents {
		for rn, req := range reqs {
			t.Run(an+"/"+rn, func(t *testing.T) {
				a := agent(t)
				a.Kill()
				require.ErrorIs(t, a.Open(ctx, req), sdk.ErrPluginShutdown)
			})
		}
	}
}
