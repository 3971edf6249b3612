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
// the test instead of hiding behind the period. The caller neither Polls
// nor asks for Events (both progress the worker themselves while
// transfers run): it waits on Wake and counts what is in flight
// (Resources progresses nothing).
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
			deadline := time.After(10 * time.Second)
			for {
				r, err := p.a.Resources(ctx)
				require.NoError(t, err)
				if r.InFlight == 0 {
					break
				}
				select {
				case <-p.a.Wake():
				case <-deadline:
					t.Fatal("the WRITE did not complete while nobody polled it")
				}
			}
			var ev sdk.Event
			evs, err := p.a.Events(ctx, 0)
			require.NoError(t, err)
			for _, e := range evs {
				if e.Handle == res[0].ID {
					ev = e
				}
			}
			require.Equal(t, res[0].ID, ev.Handle, "the WRITE's event is queued")
			require.Equal(t, sdk.StateDone, ev.State, "reason: %v", ev.Reason)
			assert.True(t, bytes.Equal(p.memA[:size], p.memB[:size]), "the bytes arrived")
			settle(t, p.a, []sdk.HandleID{res[0].ID})
		})
	}
}

// TestEventsProgresses: a caller that asks for Events while transfers run
// progresses the worker itself, as one that Polls does, so that the ring
// pump of a transport process (which asks for Events) finds a completion
// without waiting for the progress thread. The initiator's progress
// thread is paused here: only Events can complete the WRITE.
func TestEventsProgresses(t *testing.T) {
	for _, tls := range tlsSettings {
		t.Run(tls, func(t *testing.T) {
			p := newPair(t, tls, 1<<20)
			id := p.postPaused(t, 4096)
			ctx := context.Background()
			var ev sdk.Event
			require.Eventually(t, func() bool {
				evs, err := p.a.Events(ctx, 0)
				require.NoError(t, err)
				for _, e := range evs {
					if e.Handle == id {
						ev = e
						return true
					}
				}
				return false
			}, 10*time.Second, 10*time.Microsecond, "Events never completed the WRITE with the progress thread paused")
			require.Equal(t, sdk.StateDone, ev.State, "reason: %v", ev.Reason)
			p.a.PauseProgress(false)
			settle(t, p.a, []sdk.HandleID{id})
		})
	}
}

// TestCallerProgressBounded: a caller's Events or Poll progresses the
// worker a bounded amount, never through a whole large transfer: the
// ring pump of a transport process serves the next submission (a Post)
// only once its Events returned, so that Post must not wait for a
// transfer's bytes. With the initiator's progress thread paused, only
// these calls move the WRITE's bytes. A call makes at most 64 progress
// rounds (CU_CALLER_ROUNDS), and over shared memory a cma round copies one
// segment at most (UCX_CMA_SEG_SIZE, 512 KiB by default on 1.13 and 1.22):
// 32 MiB at most per call, so a 64 MiB WRITE must still be running after
// the first call. On 1.22 a round copies a whole segment (a 16 MiB WRITE
// finished within one call): there this test fails when a call's rounds
// are not bounded (checked with CU_CALLER_ROUNDS raised to 100,000). On
// 1.13 a caller's rounds move little of a WRITE, bounded or not.
func TestCallerProgressBounded(t *testing.T) {
	const size = 64 << 20
	for _, tls := range tlsSettings {
		t.Run(tls, func(t *testing.T) {
			p := newPair(t, tls, size)
			id := p.postPaused(t, size)
			ctx := context.Background()
			evs, err := p.a.Events(ctx, 0)
			require.NoError(t, err)
			for _, e := range evs {
				require.NotEqual(t, id, e.Handle, "one Events call moved the whole %d-byte WRITE (%v): a Post behind it would have waited for its bytes", size, e.State)
			}
			sts, err := p.a.Poll(ctx, []sdk.HandleID{id})
			require.NoError(t, err)
			require.Equal(t, sdk.StateInProgress, sts[0].State, "one Poll call moved the whole %d-byte WRITE: a Post behind it would have waited for its bytes", size)
			p.a.PauseProgress(false)
			require.Equal(t, sdk.StateDone, settle(t, p.a, []sdk.HandleID{id})[0].State)
			assert.True(t, bytes.Equal(p.memA[:size], p.memB[:size]), "the bytes arrived")
		})
	}
}

// TestPostNeverWaitsBehindProgress: a Post (or a Release) never waits for
// a caller that progresses the worker in Events or in Poll, however long
// that takes: that progress runs outside the agent's lock. The caller's
// progress is held here (a hook runs in its place and blocks until
// released), with a transfer running; a Post must return meanwhile. Were
// the progress under the agent's lock, it would wait for it, and the test
// fails on its bound.
func TestPostNeverWaitsBehindProgress(t *testing.T) {
	for _, call := range []string{"Events", "Poll"} {
		t.Run(call, func(t *testing.T) { postBesideProgress(t, call) })
	}
}

func postBesideProgress(t *testing.T, call string) {
	p := newPair(t, "posix,sysv,cma", 2<<20)
	local, remote := p.dlists(t, 2, 1<<20)
	ctx := context.Background()
	spec := func(i uint32) []sdk.PostSpec {
		return []sdk.PostSpec{{Op: sdk.OpWrite, Local: local, LocalIndices: []uint32{i}, Remote: remote, RemoteIndices: []uint32{i}}}
	}
	// Nothing but the callers progresses: the first WRITE stays running,
	// so that Events progresses.
	p.a.PauseProgress(true)
	defer p.a.PauseProgress(false)
	res, err := p.a.Post(ctx, spec(0))
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	first := res[0].ID
	entered, release := make(chan struct{}), make(chan struct{})
	p.a.SetProgressHook(func() {
		entered <- struct{}{}
		<-release
	})
	progressed := make(chan error, 1)
	go func() {
		var err error
		if call == "Events" {
			_, err = p.a.Events(ctx, 0)
		} else {
			_, err = p.a.Poll(ctx, []sdk.HandleID{first})
		}
		progressed <- err
	}()
	select {
	case <-entered: // the caller's progress is under way, and stays so
	case err := <-progressed:
		t.Fatalf("%s returned (%v) without progressing the worker while a WRITE ran", call, err)
	}
	posted := make(chan []sdk.PostResult, 1)
	go func() {
		res, err := p.a.Post(ctx, spec(1))
		assert.NoError(t, err)
		posted <- res
	}()
	var second []sdk.PostResult
	select {
	case second = <-posted:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatalf("Post waited behind the caller's progress in %s", call)
	}
	require.NoError(t, second[0].Err)
	close(release)
	require.NoError(t, <-progressed)
	p.a.SetProgressHook(nil)
	p.a.PauseProgress(false)
	for _, st := range settle(t, p.a, []sdk.HandleID{first, second[0].ID}) {
		require.Equal(t, sdk.StateDone, st.State, "reason: %v", st.Reason)
	}
}

// postPaused pauses A's progress thread (until the test ends) and posts one
// WRITE of size bytes from A's first descriptor to B's, which then moves
// only as far as callers progress it.
func (p *pair) postPaused(t *testing.T, size int) sdk.HandleID {
	t.Helper()
	local, remote := p.dlists(t, 1, size)
	p.a.PauseProgress(true)
	t.Cleanup(func() { p.a.PauseProgress(false) })
	res, err := p.a.Post(context.Background(), []sdk.PostSpec{{Op: sdk.OpWrite, Local: local, LocalIndices: []uint32{0}, Remote: remote, RemoteIndices: []uint32{0}}})
	require.NoError(t, err)
	require.NoError(t, res[0].Err)
	return res[0].ID
}
