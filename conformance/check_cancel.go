package conformance

import (
	"sync/atomic"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// cancelCount is how many big transfers the cancel checks post at once.
const cancelCount = 4

// checkCancelFreesNothing: after Cancel every handle is still there, still
// holds its dlists, and must still be polled and released.
var checkCancelFreesNothing = check{
	name: "cancel/frees-nothing",
	doc: "after Cancel every handle is still pollable and counted, its dlists are still BUSY, and it must be released once terminal: 4 transfers of 64 MiB, " +
		"then --repeat (default 100) of 1 MiB, 8 at a time, each with dlists of its own; a transport freeing on Cancel one time in ten passes with probability 0.9^repeat",
	needs: movesData,
	run: func(e *env) {
		l := e.link(bigTransfer)
		l.src.write(0, pattern(5, bigTransfer))
		specs := make([]sdk.PostSpec, cancelCount)
		for i := range specs {
			specs[i] = l.spec(sdk.OpWrite)
		}
		ids := l.a.post(specs...)
		before := l.a.resources()
		cancelAll(e, l.a, ids)
		after := l.a.resources()
		if after.Handles != before.Handles {
			e.t.Errorf("Cancel changed the handle count: %d, then %d: Cancel frees nothing", before.Handles, after.Handles)
		}
		for i, s := range l.a.poll(ids...) {
			if s.Err != nil {
				e.t.Errorf("Poll(handle %d) right after Cancel: %v: a canceled handle stays valid until released", ids[i], s.Err)
			}
		}
		ctx, cancel := e.callCtx()
		errs, err := l.a.tr.ReleaseDescriptors(ctx, []sdk.DlistID{l.ld})
		cancel()
		if c := codeOf(errs, err); c != sdk.CodeBusy {
			e.t.Errorf("ReleaseDescriptors(dlist of canceled, unreleased handles): code %v (%v), want BUSY", c, firstErr(errs, err))
			if c == sdk.CodeOK {
				untrack(l.a, &l.a.heldDlists, l.ld)
			}
		}
		l.a.wait(ids...)
		if got := l.a.resources(); got.Handles != before.Handles {
			e.t.Errorf("terminal canceled handles are no longer counted before Release: %d, want %d", got.Handles, before.Handles)
		}
		l.a.release(ids...)
		if e.t.Failed() {
			return
		}
		const slot = 1 << 20
		e.parallel(e.cfg.Repeat, func(t T, w, _ int) {
			a := l.a.as(t)
			ld, rd := a.dlist(0, l.src.desc(uint64(w)*slot, slot)), a.dlist(l.peer, l.dst.desc(uint64(w)*slot, slot))
			h := a.post(sdk.PostSpec{Op: sdk.OpWrite, Local: ld, LocalIndices: []uint32{0}, Remote: rd, RemoteIndices: []uint32{0}})[0]
			cancelAll(e, a, []sdk.HandleID{h})
			if s := a.poll(h)[0]; s.Err != nil {
				t.Fatalf("Poll(handle %d) right after Cancel: %v: a canceled handle stays valid until released", h, s.Err)
			}
			ctx, cancel := e.callCtx()
			errs, err := a.tr.ReleaseDescriptors(ctx, []sdk.DlistID{ld})
			cancel()
			if c := codeOf(errs, err); c != sdk.CodeBusy {
				if c == sdk.CodeOK {
					untrack(a, &a.heldDlists, ld)
				}
				t.Fatalf("ReleaseDescriptors(dlist of canceled, unreleased handle %d): code %v (%v), want BUSY", h, c, firstErr(errs, err))
			}
			a.wait(h)
			a.release(h)
			a.releaseDlists(ld, rd)
		})
	},
}

// cancelAll cancels handles; every item must be accepted.
func cancelAll(e *env, a *agent, ids []sdk.HandleID) {
	a.t.Helper()
	ctx, cancel := e.callCtx()
	defer cancel()
	errs, err := a.tr.Cancel(ctx, ids)
	if err = firstItemErr(errs, err); err != nil {
		a.t.Fatalf("Cancel(%d live handles of agent %q): %v", len(ids), a.name, err)
	}
}

// checkCancelAsDescribed: what Cancel achieves matches Describe's
// CancelEffect, and a handle reported terminal moves no byte any more.
var checkCancelAsDescribed = check{
	name: "cancel/as-described",
	doc: "after Cancel of running transfers, each ends as CancelEffect promises (none: DONE or FAILED, never CANCELED; stops: CANCELED or DONE; " +
		"closes-peer: CANCELED, FAILED or DONE), within the settle bound, and its destination bytes no longer change once it is terminal",
	needs: movesData,
	run: func(e *env) {
		const slot = bigTransfer / cancelCount
		l := e.link(bigTransfer)
		want := pattern(6, bigTransfer)
		l.src.write(0, want)
		var specs []sdk.PostSpec
		for i := range uint64(cancelCount) {
			specs = append(specs, sdk.PostSpec{Op: sdk.OpWrite,
				Local: l.a.dlist(0, l.src.desc(i*slot, slot)), LocalIndices: []uint32{0},
				Remote: l.a.dlist(l.peer, l.dst.desc(i*slot, slot)), RemoteIndices: []uint32{0}})
		}
		ids := l.a.post(specs...)
		// Which handles are running, far from done, when Cancel is asked:
		// under CancelStops at least one of them must end CANCELED.
		running := 0
		for i, s := range l.a.poll(ids...) {
			off := uint64(i)*slot + slot/2
			if s.Err == nil && s.State == sdk.StateInProgress && string(l.dst.read(off, 4096)) != string(want[off:off+4096]) {
				running++
			}
		}
		cancelAll(e, l.a, ids)
		// Snapshot each destination slot the moment its handle is seen
		// terminal; later reads must match.
		snaps := make([][]byte, len(ids))
		states := make([]sdk.HandleStatus, len(ids))
		deadline := time.Now().Add(settleTimeout)
		var b backoff
		for pending := len(ids); pending > 0; {
			for i, s := range l.a.poll(ids...) {
				if snaps[i] == nil && s.Err == nil && s.State.Terminal() {
					snaps[i], states[i] = l.dst.read(uint64(i)*slot, slot), s
					pending--
				}
			}
			if pending > 0 && time.Now().After(deadline) {
				e.t.Fatalf("%d of %d canceled handles still not terminal after %v", pending, len(ids), settleTimeout)
			}
			if pending > 0 {
				b.wait()
			}
		}
		canceled := 0
		for i, s := range states {
			ok := false
			switch e.desc.CancelEffect {
			case sdk.CancelNone:
				ok = s.State == sdk.StateDone || s.State == sdk.StateFailed
			case sdk.CancelStops:
				ok = s.State == sdk.StateCanceled || s.State == sdk.StateDone
			case sdk.CancelClosesPeer:
				ok = true
			}
			if !ok {
				e.t.Errorf("handle %d ended %v (%v) after Cancel, which CancelEffect %q does not allow", ids[i], s.State, s.Reason, e.desc.CancelEffect)
			}
			if s.State == sdk.StateCanceled {
				canceled++
			}
			if s.State == sdk.StateDone && string(snaps[i]) != string(want[uint64(i)*slot:uint64(i+1)*slot]) {
				e.t.Errorf("handle %d was reported DONE after Cancel but its destination was incomplete at that moment", ids[i])
			}
		}
		e.t.Logf("CancelEffect %q: %d of %d handles ended CANCELED; %d were running with half their bytes to go when canceled", e.desc.CancelEffect, canceled, len(ids), running)
		if e.desc.CancelEffect == sdk.CancelStops && running > 0 && canceled == 0 {
			e.t.Errorf("CancelEffect %q is claimed, yet none of the %d handles canceled while running with half their bytes to go ended CANCELED: Cancel stops nothing, as CancelEffect %q would say",
				e.desc.CancelEffect, running, sdk.CancelNone)
		}
		// A barrier: a new transfer through the same agents completes, so
		// any byte still moving for the old handles had time to land.
		barrier(e, l)
		for i := range ids {
			if got := l.dst.read(uint64(i)*slot, slot); string(got) != string(snaps[i]) {
				e.t.Errorf("handle %d reported %v, but its destination bytes changed afterwards (first at byte %d): bytes still moved after a terminal state",
					ids[i], states[i].State, firstDiff(got, snaps[i]))
			}
		}
	},
}

// barrier runs three small transfers of l to completion, one after the
// other, so that the transport has made progress after the moment being
// checked. Each READs the first byte of l.dst into the first byte of l.src:
// it changes no destination byte a check compares.
func barrier(e *env, l *link) {
	e.t.Helper()
	ld, rd := l.a.dlist(0, l.src.desc(0, 1)), l.a.dlist(l.peer, l.dst.desc(0, 1))
	for range 3 {
		h := l.a.post(sdk.PostSpec{Op: sdk.OpRead, Local: ld, LocalIndices: []uint32{0}, Remote: rd, RemoteIndices: []uint32{0}})[0]
		st := l.a.wait(h)[0]
		l.a.release(h)
		if st.State != sdk.StateDone {
			// CancelClosesPeer may have closed the connection: the wait
			// itself was the barrier.
			e.t.Logf("barrier transfer %d ended %v (%v)", h, st.State, st.Reason)
		}
	}
	l.a.releaseDlists(ld, rd)
}

// needsCancelBound runs on transports that state how soon a canceled
// handle turns terminal.
func needsCancelBound(d sdk.Description) string {
	if !d.Capabilities.Cancel {
		return "transport does not claim Cancel"
	}
	if d.Limits.CancelBoundMillis == 0 {
		return "transport states no Limits.CancelBoundMillis: it promises no bound after Cancel (the host's bounded hold escalates a handle that never ends)"
	}
	return movesData(d)
}

// checkCancelBound: a canceled handle is terminal within the bound
// Describe states.
var checkCancelBound = check{
	name: "cancel/bound",
	doc: "with Limits.CancelBoundMillis stated, every handle canceled while running (Poll IN_PROGRESS, its last bytes not landed) is terminal within that bound of Cancel returning " +
		"(a quarter more for the suite's polling): --repeat (default 100) of them, 4 at a time, sized from the measured bandwidth; " +
		"a transport missing its bound one time in ten passes with probability 0.9^repeat (2.7e-5)",
	needs: needsCancelBound,
	run: func(e *env) {
		bound := time.Duration(e.desc.Limits.CancelBoundMillis) * time.Millisecond
		limit := bound + bound/4
		a, b := e.pair()
		var worst atomic.Int64
		e.grow(a, b, "Cancel within its bound", e.cfg.Repeat, func(f *flight) int {
			var running atomic.Int64
			e.parallelOn(flightWorkers, e.cfg.Repeat, func(t T, w, _ int) {
				a := a.as(t)
				f.reset(t, w)
				h := a.post(f.spec(w))[0]
				run := a.poll(h)[0].State == sdk.StateInProgress && f.unfinished(t, w)
				cancelAll(e, a, []sdk.HandleID{h})
				asked := time.Now()
				st := a.waitFor(limit+settleTimeout, h)[0]
				took := time.Since(asked)
				a.release(h)
				if !run {
					return
				}
				running.Add(1)
				for {
					old := worst.Load()
					if int64(took) <= old || worst.CompareAndSwap(old, int64(took)) {
						break
					}
				}
				if took > limit {
					t.Fatalf("handle %d, canceled while running, turned terminal (%v) %v after Cancel returned: over Limits.CancelBoundMillis (%v; the suite allows %v)",
						h, st.State, took.Round(time.Millisecond), bound, limit)
				}
			})
			return int(running.Load())
		})
		e.t.Logf("slowest canceled handle turned terminal %v after Cancel (bound %v)", time.Duration(worst.Load()).Round(time.Microsecond), bound)
	},
}
