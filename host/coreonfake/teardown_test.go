package coreonfake

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/sdk"
)

// cancelNone models UCX, whose Cancel cannot stop a posted put or get.
func cancelNone(s *spy) { s.cancelNone = true }

// Rule 7: a completion of a retired transfer never reaches a new session
// under the same peer id: it finishes only its own failed request, and the
// producer agent never receives a consumed notification for it.
func TestReconnectNeverReceivesARetiredCompletion(t *testing.T) {
	skipStallsIfShort(t)
	r := newRig(t, rigOpts{local: "stall,post=1,for=300ms", setup: cancelNone})
	r.connect("p")
	old, oldBlocks := r.readSpec("old", "p", 1)
	old.NotifyProducer = true
	require.NoError(t, r.read(old))
	require.NoError(t, r.removePeer("p"))
	r.connect("p")
	fresh, _ := r.readSpec("new", "p", 1)
	fresh.NotifyProducer = true
	require.NoError(t, r.read(fresh))
	r.reported("new")
	r.reported("old")
	assert.Equal(t, []core.RequestID{"new"}, r.all.FinishedReceiving, "the retired transfer's DONE finished a request")
	assert.Equal(t, []core.RequestID{"old"}, failedIDs(r.all))
	assert.ElementsMatch(t, oldBlocks, r.all.InvalidBlocks)
	var msgs []string
	require.Eventually(t, func() bool {
		ns, err := r.remotes[0].tr.Notifications(r.ctx, 0)
		require.NoError(t, err)
		for _, n := range ns {
			msgs = append(msgs, string(n.Message))
		}
		return len(msgs) > 0
	}, wait, time.Millisecond)
	// Wait for the retired handle's release round to pass, then recheck.
	r.until("old session released", func(core.Ready) bool { return r.c.Stats().RetiredPeers == 0 })
	ns, err := r.remotes[0].tr.Notifications(r.ctx, 0)
	require.NoError(t, err)
	for _, n := range ns {
		msgs = append(msgs, string(n.Message))
	}
	assert.Equal(t, []string{string(core.ConsumedMessage("new", tok("new")))}, msgs)
}

// kill ends the local agent as the runtime's fence would: every native
// resource and transfer of it is gone. The in-process fake has no kill
// call, so a crash rule on Release (crash,at=release,n=N) stands in for it:
// the test counts Releases so that the N-th is this one.
func (r *rig) kill() {
	r.t.Helper()
	_, err := r.tr.Transport.Release(r.ctx, nil)
	require.ErrorIs(r.t, err, sdk.ErrPluginShutdown, "the rig needs fault crash,at=release,n=1 to kill")
}
