package coreonfake

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/core"
)

// A read that succeeds lands the producer's bytes, hands the blocks back in
// the report that finishes it, and notifies each producer rank once: real
// bytes in a real pool file, real notifications received by the remote
// agents (core's TestReadLandsBytesAndNotifiesProducer shows the same over
// the scripted double, without the bytes).
func TestReadLandsBytesAndNotifiesProducer(t *testing.T) {
	r := newRig(t, rigOpts{})
	r.connect("p")
	spec, blocks := r.readSpec("ok", "p", 2)
	spec.NotifyProducer = true
	require.NoError(t, r.read(spec))
	assert.Equal(t, repeat(core.OwnerTransfer, 2), r.owners(blocks))
	rd := r.reported("ok")
	assert.Equal(t, []core.RequestID{"ok"}, rd.FinishedReceiving)
	assert.Empty(t, rd.InvalidBlocks)
	assert.Equal(t, repeat(core.OwnerEngine, 2), r.owners(blocks))
	data, err := os.ReadFile(r.path)
	require.NoError(t, err)
	for k, b := range blocks {
		got := data[int(b.Block)*blockSize : int(b.Block+1)*blockSize]
		assert.True(t, bytes.Equal(got, bytes.Repeat([]byte{byte(k + 1)}, blockSize)), "block of rank %d", k)
	}
	for k, rm := range r.remotes {
		var msgs []string
		require.Eventually(t, func() bool {
			ns, err := rm.tr.Notifications(r.ctx, 0)
			require.NoError(t, err)
			for _, n := range ns {
				msgs = append(msgs, string(n.Message))
			}
			return len(msgs) > 0
		}, wait, time.Millisecond, "rank %d was not notified", k)
		assert.Equal(t, []string{string(core.ConsumedMessage("ok", tok("ok")))}, msgs)
	}
}

// Rule 3 with the notification protocol: a read with one failed part never
// sends the producer the consumed notification, even though the other part
// landed; the fake's delivery in order per sender is what shows that none
// is still on its way.
func TestMixedReadFailureDoesNotNotifyProducer(t *testing.T) {
	r := newRig(t, rigOpts{local: "fail,post=2"})
	r.connect("p")
	spec, _ := r.readSpec("r", "p", 2)
	spec.NotifyProducer = true
	require.NoError(t, r.read(spec))
	r.reported("r")
	require.Equal(t, []core.RequestID{"r"}, failedIDs(r.all))
	// A later good read notifies: once its message arrived, an earlier one
	// would have too (delivery is in order per sender).
	spec2, _ := r.readSpec("good", "p", 1)
	spec2.NotifyProducer = true
	require.NoError(t, r.read(spec2))
	r.reported("good")
	var msgs []string
	require.Eventually(t, func() bool {
		ns, err := r.remotes[0].tr.Notifications(r.ctx, 0)
		require.NoError(t, err)
		for _, n := range ns {
			msgs = append(msgs, string(n.Message))
		}
		return len(msgs) > 0
	}, wait, time.Millisecond)
	assert.Equal(t, []string{string(core.ConsumedMessage("good", tok("good")))}, msgs, "the failed read notified the producer")
}
