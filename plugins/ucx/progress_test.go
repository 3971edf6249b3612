package ucx_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/plugins/ucx"
	"github.com/custody-dev/custody/sdk"
)

// TestSleepingAgentsWakeForTransfers: idle agents' progress threads go to
// sleep (on the worker's event fd), and a transfer posted while both
// sleep still completes: the post wakes the initiator's thread, and the
// data arriving wakes the target's, whose progress this RMA needs. The
// safety-net wake-up is an hour here, so a wake-up that never comes fails
// the test instead of hiding behind the period. The caller does not Poll
// (Poll progresses the worker itself); it waits for the handle's event.
func TestSleepingAgentsWakeForTransfers(t *testing.T) {
	for _, tls := range tlsSettings {
		t.Run(tls, func(t *testing.T) {
			defer ucx.SetSleepMax(time.Hour)()
			const size = 1 << 20
			p := newPair(t, tls, 2*size)
			for i := range size {
				p.memA[i] = byte(i*31 + 7)
			}
			local, remote := p.dlists(t, 1, size)
			require.Eventually(t, func() bool { return p.a.Sleeping() && p.b.Sleeping() },
				10*time.Second, 100*time.Microsecond, "idle progress threads sleep")
			ctx := context.Background()
			res, err := p.a.Post(ctx, []sdk.PostSpec{{Op: sdk.OpWrite, Local: local, LocalIndices: []uint32{0}, Remote: remote, RemoteIndices: []uint32{0}}})
			require.NoError(t, err)
			require.NoError(t, res[0].Err)
			var ev sdk.Event
			require.Eventually(t, func() bool {
				evs, err := p.a.Events(ctx, 0)
				require.NoError(t, err)
				for _, e := range evs {
					if e.Handle == res[0].ID {
						ev = e
						return true
					}
				}
				return false
			}, 10*time.Second, 100*time.Microsecond, "the WRITE completes while nobody polls it")
			require.Equal(t, sdk.StateDone, ev.State, "reason: %v", ev.Reason)
			assert.True(t, bytes.Equal(p.memA[:size], p.memB[:size]), "the bytes arrived")
			settle(t, p.a, []sdk.HandleID{res[0].ID})
		})
	}
}
