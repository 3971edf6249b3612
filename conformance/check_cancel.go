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

// cancelStopsFloor is the smallest transfer whose DONE after Cancel, with
// half its bytes still to land when Cancel returned, is held against a
// transport claiming CancelStops: below it, what the engine already holds
// may be all that was left.
const cancelStopsFloor = 1 << 20

// cancelWatched is how many canceled handles a check watches, after they
// turned terminal, for bytes still moving (each costs a settle).
const cancelWatched = 8

// checkCancelAsDescribed: what Cancel achieves matches Describe's
// CancelEffect, and a handle reported terminal moves no byte any more.
var checkCancelAsDescribed = check{
	name: "cancel/as-described",
	doc: "after Cancel of running transfers, each ends as CancelEffect promises (none: DONE or FAILED, never CANCELED; stops: CANCELED or DONE; closes-peer: CANCELED, FAILED or DONE), within the settle bound, " +
		"DONE only with every byte in place the moment it is seen, and its destination bytes no longer change once it is terminal (watched on the first 8). " +
		"--repeat (default 100) transfers canceled with half their bytes still to land when Cancel returned, 4 at once, sized from the measured bandwidth; under stops, " +
		"when at least 3 and one in twenty of those (of 1 MiB or more) end DONE, Cancel stopped nothing for them: a transport whose Cancel does nothing one time in ten is caught",
	needs: movesData,
	run: func(e *env) {
		a, b := e.pair()
		reps := e.cfg.Repeat
		if e.desc.CancelEffect == sdk.CancelClosesPeer {
			// The first Cancel closes the connection every later
			// transfer of the check would use.
			reps = flightWorkers
		}
		var watched, canceled, farTotal atomic.Int64
		e.grow(a, b, "Cancel of a running transfer", reps, func(f *flight) int {
			var far, farDone atomic.Int64
			e.parallelOn(flightWorkers, reps, func(t T, w, _ int) {
				a := a.as(t)
				f.reset(t, w)
				h := a.post(f.spec(w))[0]
				cancelAll(e, a, []sdk.HandleID{h})
				// Right after Cancel returned: half the bytes still to
				// come? Then Cancel had something to stop.
				halfToGo := 2*f.landedWindows(f.sample(t, w)) < samples+1
				// Snapshot the destination the moment the handle is seen
				// terminal.
				var st sdk.HandleStatus
				var snap []byte
				deadline := time.Now().Add(settleTimeout)
				var bo backoff
				for {
					st = a.poll(h)[0]
					if st.Err != nil {
						t.Fatalf("Poll(handle %d) after Cancel: %v: a canceled handle stays valid until released", h, st.Err)
					}
					if st.State.Terminal() {
						snap = f.sample(t, w)
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("handle %d still not terminal %v after Cancel", h, settleTimeout)
					}
					bo.wait()
				}
				ok := false
				switch e.desc.CancelEffect {
				case sdk.CancelNone:
					ok = st.State == sdk.StateDone || st.State == sdk.StateFailed
				case sdk.CancelStops:
					ok = st.State == sdk.StateCanceled || st.State == sdk.StateDone
				case sdk.CancelClosesPeer:
					ok = true
				}
				if !ok {
					t.Fatalf("handle %d ended %v (%v) after Cancel, which CancelEffect %q does not allow", h, st.State, st.Reason, e.desc.CancelEffect)
				}
				if st.State == sdk.StateCanceled {
					canceled.Add(1)
				}
				if st.State == sdk.StateDone && string(snap) != string(f.sampleWant()) {
					t.Fatalf("handle %d was reported DONE after Cancel but its destination was incomplete at that moment", h)
				}
				if halfToGo {
					far.Add(1)
					if st.State == sdk.StateDone {
						farDone.Add(1)
					}
				}
				if st.State != sdk.StateDone && watched.Add(1) <= cancelWatched {
					f.settle(t)
					if got := f.sample(t, w); string(got) != string(snap) {
						t.Fatalf("handle %d reported %v, but its destination bytes changed afterwards (sampled byte %d): bytes still moved after a terminal state",
							h, st.State, firstDiff(got, snap))
					}
				}
				a.release(h)
			})
			n, d := far.Load(), farDone.Load()
			farTotal.Add(n)
			e.t.Logf("%d-byte transfers: %d canceled with half their bytes to land, %d of them ended DONE", f.n, n, d)
			if e.desc.CancelEffect == sdk.CancelStops && f.n >= cancelStopsFloor && d >= 3 && 20*d >= n && !e.t.Failed() {
				e.t.Errorf("CancelEffect %q is claimed, yet %d of %d transfers of %d bytes canceled with half their bytes still to land ended DONE: for them Cancel stops nothing, as CancelEffect %q would say",
					e.desc.CancelEffect, d, n, f.n, sdk.CancelNone)
			}
			return int(n)
		})
		if e.t.Failed() {
			return
		}
		e.t.Logf("CancelEffect %q: %d handles ended CANCELED; %d were canceled with half their bytes to go", e.desc.CancelEffect, canceled.Load(), farTotal.Load())
		if e.desc.CancelEffect == sdk.CancelStops && farTotal.Load() > 0 && canceled.Load() == 0 {
			e.t.Errorf("CancelEffect %q is claimed, yet none of the %d handles canceled with half their bytes to go ended CANCELED: Cancel stops nothing, as CancelEffect %q would say",
				e.desc.CancelEffect, farTotal.Load(), sdk.CancelNone)
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
