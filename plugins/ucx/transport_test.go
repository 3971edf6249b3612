package ucx_test

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/plugins/ucx"
	"github.com/custody-dev/custody/sdk"
)

func TestOpenRefusesBadSettings(t *testing.T) {
	cases := map[string]map[string]string{
		"bad UCP value": {"UCX_RNDV_THRESH": "not-a-size"},
		"no such tls":   {"tls": "no-such-transport"},
		"unknown key":   {"speed": "fast"},
		"empty tls":     {"tls": ""},
	}
	for name, params := range cases {
		t.Run(name, func(t *testing.T) {
			tr := ucx.New()
			err := tr.Open(t.Context(), sdk.OpenRequest{Agent: "x", Params: params})
			require.ErrorIs(t, err, sdk.ErrInvalidArgument)
			// Nothing opened: calls still say so, and Open may be retried.
			_, err = tr.LocalMetadata(t.Context())
			require.ErrorIs(t, err, sdk.ErrInvalidArgument)
			r, err := tr.Resources(t.Context())
			require.NoError(t, err, "an agent that is not open holds nothing")
			require.True(t, r.Zero(), "%+v", r)
			require.NoError(t, tr.Open(t.Context(), sdk.OpenRequest{Agent: "x", Params: map[string]string{"tls": "tcp"}}))
			require.NoError(t, tr.Close(t.Context()))
		})
	}
}

func TestDescribeFollowsConfiguration(t *testing.T) {
	for _, c := range []struct {
		tls   string
		loss  sdk.PeerLoss
		fence sdk.FenceScope
	}{
		{"tcp", sdk.PeerLossReported, sdk.FenceInitiatedAndIncoming},
		{"posix,sysv,cma", sdk.PeerLossProcessExits, sdk.FenceInitiated},
		{"tcp,posix", sdk.PeerLossProcessExits, sdk.FenceInitiated},
	} {
		t.Run(c.tls, func(t *testing.T) {
			t.Setenv("UCX_TLS", c.tls)
			tr := ucx.New()
			d, err := tr.Describe(t.Context())
			require.NoError(t, err)
			assert.Equal(t, c.loss, d.PeerLoss, "before Open: $UCX_TLS")
			assert.Equal(t, sdk.CancelNone, d.CancelEffect)
			assert.False(t, d.Capabilities.Cancel)
			assert.Equal(t, c.fence, d.FenceScope, "before Open: $UCX_TLS")
			t.Setenv("UCX_TLS", "")
			require.NoError(t, tr.Open(t.Context(), sdk.OpenRequest{Agent: "x", Params: map[string]string{"tls": c.tls}}))
			d, err = tr.Describe(t.Context())
			require.NoError(t, err)
			assert.Equal(t, c.loss, d.PeerLoss, "after Open: the tls parameter")
			assert.Equal(t, c.fence, d.FenceScope, "after Open: the tls parameter")
			require.NoError(t, tr.Close(t.Context()))
		})
	}
}

// TestLoopback moves bytes between two ranges of one agent's region
// through a peer loaded from the agent's own metadata (Capabilities.Local).
func TestLoopback(t *testing.T) {
	for _, tls := range tlsSettings {
		t.Run(tls, func(t *testing.T) {
			ctx := context.Background()
			tr := ucx.New()
			require.NoError(t, tr.Open(ctx, sdk.OpenRequest{Agent: "self", Params: map[string]string{"tls": tls}}))
			const n = 1 << 20
			path := filepath.Join(t.TempDir(), "r")
			mem := mapFile(t, path, 2*n)
			for i := range n {
				mem[i] = byte(i*7 + 1)
			}
			reg, err := tr.RegisterMemory(ctx, []sdk.Region{{Path: path, Length: 2 * n, Kind: sdk.MemoryHost}})
			require.NoError(t, err)
			require.NoError(t, reg[0].Err)
			md, err := tr.LocalMetadata(ctx)
			require.NoError(t, err)
			peer, err := tr.LoadPeers(ctx, []sdk.PeerSpec{{Name: "self", Metadata: md}})
			require.NoError(t, err)
			require.NoError(t, peer[0].Err)
			dl, err := tr.PrepareDescriptors(ctx, []sdk.DlistSpec{
				{Descriptors: []sdk.Descriptor{{Region: reg[0].ID, Length: n}}},
				{Peer: peer[0].ID, Descriptors: []sdk.Descriptor{{Region: reg[0].ID, Offset: n, Length: n}}},
			})
			require.NoError(t, err)
			posted, err := tr.Post(ctx, []sdk.PostSpec{{Op: sdk.OpWrite, Local: dl[0].ID, LocalIndices: []uint32{0}, Remote: dl[1].ID, RemoteIndices: []uint32{0}}})
			require.NoError(t, err)
			require.NoError(t, posted[0].Err)
			sts := settle(t, tr, []sdk.HandleID{posted[0].ID})
			require.Equal(t, sdk.StateDone, sts[0].State, "reason: %v", sts[0].Reason)
			assert.True(t, bytes.Equal(mem[:n], mem[n:]), "the bytes arrived")

			errs, err := tr.ReleaseDescriptors(ctx, []sdk.DlistID{dl[0].ID, dl[1].ID})
			require.NoError(t, err)
			assert.NoError(t, errs[0])
			errs, err = tr.UnloadPeers(ctx, []sdk.PeerID{peer[0].ID})
			require.NoError(t, err)
			assert.NoError(t, errs[0])
			errs, err = tr.DeregisterMemory(ctx, []sdk.RegionID{reg[0].ID})
			require.NoError(t, err)
			assert.NoError(t, errs[0])
			require.NoError(t, tr.Close(ctx))
		})
	}
}

// TestFenceScopePerTransports: incoming transfers are claimed fenced only
// for lists of transports over which this process alone copies into its
// memory; anything else, aliases and negations included, claims initiated.
func TestFenceScopePerTransports(t *testing.T) {
	for tls, want := range map[string]sdk.FenceScope{
		"tcp": sdk.FenceInitiatedAndIncoming, " tcp , self ": sdk.FenceInitiatedAndIncoming,
		"posix,sysv,cma": sdk.FenceInitiated, "tcp,cma": sdk.FenceInitiated, "rc,tcp": sdk.FenceInitiated,
		"all": sdk.FenceInitiated, "sm": sdk.FenceInitiated, "^posix": sdk.FenceInitiated, "^tcp": sdk.FenceInitiated,
		"": sdk.FenceInitiated, ",": sdk.FenceInitiated, "xpmem": sdk.FenceInitiated,
	} {
		assert.Equal(t, want, ucx.FenceScope(tls), "tls=%q", tls)
	}
}
