package fake

import (
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// TestConcurrentUse drives one agent from many goroutines at once (run with
// -race): every transfer ends DONE, every handle releases once, and the
// counters return to zero.
func TestConcurrentUse(t *testing.T) {
	p := newPair(t, 64<<10, map[string]string{"chunk": "4096"}, nil)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				res, err := p.a.Post(ctx, []sdk.PostSpec{p.whole(sdk.OpWrite, []byte("n")), p.whole(sdk.OpRead, nil)})
				if !assertNoErr(t, err, res[0].Err, res[1].Err) {
					return
				}
				for _, r := range res {
					for {
						st, err := p.a.Poll(ctx, []sdk.HandleID{r.ID})
						if !assertNoErr(t, err, st[0].Err) {
							return
						}
						if st[0].State.Terminal() {
							if st[0].State != sdk.StateDone {
								t.Errorf("handle %d ended %v: %v", r.ID, st[0].State, st[0].Reason)
							}
							break
						}
					}
				}
				errs, err := p.a.Release(ctx, []sdk.HandleID{res[0].ID, res[1].ID})
				assertNoErr(t, err, errs[0], errs[1])
				_, err = p.b.Notifications(ctx, 1)
				assertNoErr(t, err)
				_, err = p.a.Events(ctx, 0)
				assertNoErr(t, err)
			}
		}()
	}
	wg.Wait()
	r, err := p.a.Resources(ctx)
	require.NoError(t, err)
	require.Equal(t, sdk.Resources{Regions: 1, Peers: 1, Dlists: 2}, r)
}

// assertNoErr reports errs on t from any goroutine and says whether all
// were nil.
func assertNoErr(t *testing.T, errs ...error) bool {
	for _, err := range errs {
		if err != nil {
			t.Error(err)
			return false
		}
	}
	return true
}

// TestCloseStopsRunningTransfer: a transfer still moving without a handle
// (release-running) does not keep the agent alive: Close stops it and no
// goroutine outlives Close (goleak checks the package).
func TestCloseStopsRunningTransfer(t *testing.T) {
	p := newPair(t, 4096, map[string]string{"misbehave": "release-running", "fault": "stall"}, nil)
	h := postOne(t, p.a, p.whole(sdk.OpWrite, nil))
	release(t, p.a, h)
	// Release a's side only: b keeps its region (and lease) registered,
	// so the stalled transfer has no reason to end.
	_, _ = p.a.ReleaseDescriptors(ctx, []sdk.DlistID{p.local, p.remote})
	_, _ = p.a.UnloadPeers(ctx, []sdk.PeerID{p.peer})
	_, _ = p.a.DeregisterMemory(ctx, []sdk.RegionID{p.aRegion})
	r, err := p.a.Resources(ctx)
	require.NoError(t, err)
	require.Equal(t, sdk.Resources{InFlight: 1}, r, "the transfer still runs, with no handle")
	require.NoError(t, p.a.Close(ctx))
	r, err = p.a.Resources(ctx)
	require.NoError(t, err)
	require.True(t, r.Zero())
}

// TestConcurrentClose: Closes racing each other all succeed, and the agent
// ends once.
func TestConcurrentClose(t *testing.T) {
	a := New()
	require.NoError(t, a.Open(ctx, sdk.OpenRequest{Agent: "a", Params: map[string]string{"dir": t.TempDir(), "peer_dirs": os.TempDir()}}))
	errs := make(chan error, 8)
	for i := 0; i < cap(errs); i++ {
		go func() { errs <- a.Close(ctx) }()
	}
	for i := 0; i < cap(errs); i++ {
		require.NoError(t, <-errs)
	}
}
