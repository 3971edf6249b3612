package host

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/client"
	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
)

// teardownRecorder is a ranked host's transport process, recording the
// order of the calls that tear its native objects down and of the calls
// that end the process; at the end, whether the host's rank group was
// still joined.
type teardownRecorder struct {
	process
	h     *Host
	mu    sync.Mutex
	calls []string
	// groupOpenAtStop: the rank group had not been left when the
	// transport was stopped.
	groupOpenAtStop bool
}

func (r *teardownRecorder) note(call string) {
	r.mu.Lock()
	r.calls = append(r.calls, call)
	r.mu.Unlock()
}

func (r *teardownRecorder) UnloadPeers(ctx context.Context, ids []sdk.PeerID) ([]error, error) {
	r.note("UnloadPeers")
	return r.process.UnloadPeers(ctx, ids)
}

func (r *teardownRecorder) ReleaseDescriptors(ctx context.Context, ids []sdk.DlistID) ([]error, error) {
	r.note("ReleaseDescriptors")
	return r.process.ReleaseDescriptors(ctx, ids)
}

func (r *teardownRecorder) DeregisterMemory(ctx context.Context, ids []sdk.RegionID) ([]error, error) {
	r.note("DeregisterMemory")
	return r.process.DeregisterMemory(ctx, ids)
}

func (r *teardownRecorder) Release(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	r.note("Release")
	return r.process.Release(ctx, ids)
}

func (r *teardownRecorder) Close(ctx context.Context) error {
	r.note("Close")
	return r.process.Close(ctx)
}

func (r *teardownRecorder) Stop() {
	r.mu.Lock()
	r.calls = append(r.calls, "Stop")
	r.groupOpenAtStop = r.h.group.Err() == nil
	r.mu.Unlock()
	r.process.Stop()
}

func (r *teardownRecorder) Kill() error {
	r.note("Kill")
	return r.process.Kill()
}

// Events and Rings pass through the optional interfaces the host asks for.
func (r *teardownRecorder) Events(ctx context.Context, max int) ([]sdk.Event, error) {
	return r.process.(sdk.EventSource).Events(ctx, max)
}

func (r *teardownRecorder) Rings() bool {
	rr, ok := r.process.(plugin.RingReporter)
	return !ok || rr.Rings()
}

// TestRule12TeardownOrderOnShutdown: a ranked host shut down the normal
// way (its context ends) unloads its peers and deregisters its pools,
// every session, sender and receiver of the transport, before it stops the
// transport process; and it leaves its rank group only after that (rule
// 12). The transport is wrapped, once the host runs, by a recorder.
func TestRule12TeardownOrderOnShutdown(t *testing.T) {
	prefill := startHost(t, "prefill", 8, nil)
	rg := newRankGroup(t, "dec")
	d := rg.mustStart(rankSpec{blocks: 8}, rankSpec{blocks: 8})
	for _, h := range d {
		require.NoError(t, h.c.ConnectPeer(h.ctx(), "prefill", client.RemoteRank{Address: prefill.h.MetadataAddr(), Pool: "kv"}))
	}
	src, err := prefill.c.Alloc(prefill.ctx(), prefill.poolID, 2)
	require.NoError(t, err)
	prefill.fill(src)
	require.NoError(t, prefill.c.ExpectSend(prefill.ctx(), "t1", tok("t1"), "", prefill.poolID, src, 2, 30*time.Second))
	for q, h := range d {
		b, err := h.c.Alloc(h.ctx(), h.poolID, 1)
		require.NoError(t, err)
		require.NoError(t, h.c.Read(h.ctx(), "t1", tok("t1"), "prefill", true, client.Part{Pool: h.poolID, Local: b, Rank: 0, Remote: src[q : q+1]}))
	}
	for _, h := range d {
		f := h.waitFinished("t1")
		require.Equal(t, []string{"t1"}, f.FinishedRecving)
	}

	th := d[1]
	rec := &teardownRecorder{h: th.h}
	require.NoError(t, th.h.do(th.ctx(), func(context.Context) error {
		rec.process = th.h.tp
		th.h.tp = rec
		return nil
	}))
	require.NoError(t, th.stop(), "rank 1 stopped with an error")

	rec.mu.Lock()
	calls := slices.Clone(rec.calls)
	open := rec.groupOpenAtStop
	rec.mu.Unlock()
	seq := runs(calls)
	t.Logf("rank 1's transport calls at shutdown: %s", seq)
	stop := slices.Index(calls, "Stop")
	require.GreaterOrEqual(t, stop, 0, "the transport was not stopped (calls %s)", seq)
	assert.NotContains(t, calls, "Kill", "a clean shutdown stops the transport, it does not fence it")
	for _, want := range []string{"UnloadPeers", "DeregisterMemory"} {
		i := slices.Index(calls, want)
		require.GreaterOrEqual(t, i, 0, "%s never called at shutdown (calls %s)", want, seq)
	}
	for i, c := range calls {
		if c != "Stop" && i > stop {
			t.Errorf("%s after the transport was stopped (calls %s)", c, seq)
			break
		}
	}
	assert.True(t, open, "the rank left its group before its transport stopped")
}

// runs writes calls with repeats folded: "A B×3 C".
func runs(calls []string) string {
	var out []string
	for i := 0; i < len(calls); {
		j := i
		for j < len(calls) && calls[j] == calls[i] {
			j++
		}
		if j-i > 1 {
			out = append(out, fmt.Sprintf("%s×%d", calls[i], j-i))
		} else {
			out = append(out, calls[i])
		}
		i = j
	}
	return strings.Join(out, " ")
}
