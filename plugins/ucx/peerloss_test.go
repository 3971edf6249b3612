package ucx_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
)

// TestPeerKilledMidTransfer kills a peer process (SIGKILL) while 16 MiB
// WRITEs and READs to it run, through the plugin binary:
//   - tcp (peer error mode): every handle ends DONE or FAILED with
//     REMOTE_DISCONNECT within the bound, and once the host releases
//     everything the survivor's counters are zero and it closes;
//   - posix,sysv,cma (no peer error mode): the survivor's process exits
//     within the bound (the host's fence), never a hang.
func TestPeerKilledMidTransfer(t *testing.T) {
	if testing.Short() {
		t.Skip("launches plugin processes")
	}
	path := pluginBinary(t)
	for _, tls := range tlsSettings {
		t.Run(tls, func(t *testing.T) {
			t.Setenv("UCX_TLS", tls)
			ctx := t.Context()
			const size = 16 << 20
			dir := t.TempDir()
			var pls [2]*plugin.Plugin
			var regs [2]sdk.RegionID
			for i, name := range []string{"survivor", "victim"} {
				pl, err := plugin.Launch(ctx, path, plugin.LaunchOptions{})
				require.NoError(t, err)
				t.Cleanup(func() { _ = pl.Kill() })
				pls[i] = pl
				require.NoError(t, pl.Open(ctx, sdk.OpenRequest{Agent: name, Params: map[string]string{"tls": tls}}))
				file := filepath.Join(dir, name)
				mapFile(t, file, 2*size)
				reg, err := pl.RegisterMemory(ctx, []sdk.Region{{Path: file, Length: 2 * size, Kind: sdk.MemoryHost}})
				require.NoError(t, err)
				require.NoError(t, reg[0].Err)
				regs[i] = reg[0].ID
			}
			a, b := pls[0], pls[1]
			md, err := b.LocalMetadata(ctx)
			require.NoError(t, err)
			peers, err := a.LoadPeers(ctx, []sdk.PeerSpec{{Name: "victim", Metadata: md}})
			require.NoError(t, err)
			require.NoError(t, peers[0].Err)
			dl, err := a.PrepareDescriptors(ctx, []sdk.DlistSpec{
				{Descriptors: []sdk.Descriptor{{Region: regs[0], Length: size}, {Region: regs[0], Offset: size, Length: size}}},
				{Peer: peers[0].ID, Descriptors: []sdk.Descriptor{{Region: regs[1], Length: size}, {Region: regs[1], Offset: size, Length: size}}},
			})
			require.NoError(t, err)
			var specs []sdk.PostSpec
			for range 8 {
				specs = append(specs,
					sdk.PostSpec{Op: sdk.OpWrite, Local: dl[0].ID, LocalIndices: []uint32{0}, Remote: dl[1].ID, RemoteIndices: []uint32{0}},
					sdk.PostSpec{Op: sdk.OpRead, Local: dl[0].ID, LocalIndices: []uint32{1}, Remote: dl[1].ID, RemoteIndices: []uint32{1}})
			}
			posted, err := a.Post(ctx, specs)
			require.NoError(t, err)
			ids := make([]sdk.HandleID, len(posted))
			for i, p := range posted {
				require.NoError(t, p.Err)
				ids[i] = p.ID
			}
			require.NoError(t, b.Kill())
			killed := time.Now()
			bound := time.Duration(a.Description().Limits.PeerLossBoundMillis) * time.Millisecond

			if a.Description().PeerLoss == sdk.PeerLossProcessExits {
				select {
				case <-a.Exited():
					t.Logf("survivor exited %v after the kill (b.Kill returns once the victim is reaped)", time.Since(killed))
					st := a.ExitState()
					require.NotNil(t, st)
					assert.Equal(t, 4, st.ExitCode(), "the survivor exits deliberately (status 4), it does not crash: %v", st)
				case <-time.After(bound):
					t.Fatalf("survivor still runs %v after its peer was killed", bound)
				}
				return
			}
			require.Equal(t, sdk.PeerLossReported, a.Description().PeerLoss)
			failed := 0
			require.Eventually(t, func() bool {
				sts, err := a.Poll(ctx, ids)
				require.NoError(t, err)
				failed = 0
				for _, st := range sts {
					require.NoError(t, st.Err)
					if !st.State.Terminal() {
						return false
					}
					if st.State == sdk.StateFailed {
						failed++
						assert.ErrorIs(t, st.Reason, sdk.ErrRemoteDisconnect)
					}
					assert.NotEqual(t, sdk.StateCanceled, st.State)
				}
				return true
			}, bound, time.Millisecond)
			t.Logf("%d of %d handles FAILED, %v after the kill", failed, len(ids), time.Since(killed))

			// Teardown as a host would: the survivor lives on, and holds nothing after.
			errs, err := a.Release(ctx, ids)
			require.NoError(t, err)
			require.NoError(t, errors.Join(errs...))
			errs, err = a.ReleaseDescriptors(ctx, []sdk.DlistID{dl[0].ID, dl[1].ID})
			require.NoError(t, err)
			require.NoError(t, errors.Join(errs...))
			errs, err = a.UnloadPeers(ctx, []sdk.PeerID{peers[0].ID})
			require.NoError(t, err)
			require.NoError(t, errors.Join(errs...))
			errs, err = a.DeregisterMemory(ctx, []sdk.RegionID{regs[0]})
			require.NoError(t, err)
			require.NoError(t, errors.Join(errs...))
			require.Eventually(t, func() bool {
				r, err := a.Resources(ctx)
				require.NoError(t, err)
				return r.Zero()
			}, 10*time.Second, time.Millisecond, "the survivor's counters return to zero")
			require.NoError(t, a.Close(context.Background()))
			_ = os.Remove(filepath.Join(dir, "survivor"))
		})
	}
}
