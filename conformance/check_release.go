package conformance

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// bigTransfer is the size the suite uses when it needs bytes to be moving
// for a while.
const bigTransfer = 64 << 20

// checkReleaseRunning: Release of a running handle is refused and changes
// nothing; a Release that succeeds proves the handle was terminal, so the
// destination must be complete at that moment. The transfers are sized
// from the measured bandwidth (grow), Config.Repeat of them released while
// running, flightWorkers at once.
var checkReleaseRunning = check{
	name: "contract/release-running-busy",
	doc: "Release of a running handle is BUSY and the handle stays pollable and is later releasable; a Release that returns OK leaves no byte still moving. " +
		"Exercised on at least --repeat (default 100) handles seen running just before their Release, 4 at once, sized from the measured bandwidth: a transport that releases a running handle one time in ten passes with probability 0.9^repeat (2.7e-5); " +
		"one whose Release waits for the transfer fails when, at one size, at least 5 and one in twenty Releases returned OK for handles with half their bytes to land, each taking at least half as long as the transfer takes alone and ten times as long as nine in ten of the Releases refused BUSY (one waiting one time in ten is missed with probability 0.024)",
	needs: movesData,
	run: func(e *env) {
		a, b := e.pair()
		stop := e.desc.Capabilities.Cancel
		// far and farOK count the Releases asked while a handle was
		// IN_PROGRESS with half its bytes to land, and how many of those
		// returned OK: a transfer can end between Poll and Release (on a
		// loaded machine, one in ten did), but when nine in ten of them
		// do, Release waited for them.
		var far, farOK atomic.Int64
		// A Release that returned OK for a handle with half its bytes to
		// land just before waited for it (or was stalled that long) when
		// it took at least half as long as the transfer takes alone (a
		// waiting one takes about twice that: half the bytes, sharing the
		// bandwidth with three others), and ten times as long as nine in
		// ten of the Releases refused BUSY took (a Release that is merely
		// slow, behind a lock or on a loaded machine, is as slow when
		// refused). waitedMin and waitedShare say how many must.
		e.grow(a, b, "Release of a running handle", e.cfg.Repeat, func(f *flight) int {
			var running, asked atomic.Int64
			var mu sync.Mutex
			var okTook, busyTook []time.Duration
			alone := f.alone(e.t)
			defer func() {
				half := alone / 2
				if len(busyTook) > 0 {
					slices.Sort(busyTook)
					half = max(half, 10*busyTook[len(busyTook)*9/10])
				}
				slowest := time.Duration(0)
				if len(okTook) > 0 {
					slowest = slices.Max(okTook)
				}
				e.t.Logf("%d-byte transfers: %d Releases OK with half the bytes to land just before, the slowest in %v (a transfer alone: %v; %d refused BUSY; a Release that waited takes at least %v)", f.n, len(okTook), slowest, alone, len(busyTook), half)
				waited := int64(0)
				for _, d := range okTook {
					if d >= half {
						waited++
					}
				}
				if p := asked.Load(); waited >= waitedMin && waitedShare*waited >= p && !e.t.Failed() {
					e.t.Errorf("%d of %d Releases returned OK for handles with half their bytes still to land just before, each taking at least %v, half as long as a whole %d-byte transfer takes alone and ten times as long as a refused Release: "+
						"Release waits for the transfer to end (Release never waits; a running handle is BUSY)", waited, p, half, f.n)
				}
			}()
			e.parallelOn(flightWorkers, e.cfg.Repeat, func(t T, w, _ int) {
				a := a.as(t)
				f.reset(t, w)
				h := a.post(f.spec(w))[0]
				// Just before Release: is the handle running, its last
				// bytes not landed? Then this Release exercises the rule.
				run := a.poll(h)[0].State == sdk.StateInProgress && f.unfinished(t, w)
				halfway := run && f.farFromDone(t, w)
				if run {
					running.Add(1)
				}
				if halfway {
					far.Add(1)
				}
				ctx, cancel := e.callCtx()
				asked.Add(1)
				start := time.Now()
				errs, err := a.tr.Release(ctx, []sdk.HandleID{h})
				took := time.Since(start)
				cancel()
				switch c := codeOf(errs, err); c {
				case sdk.CodeOK:
					if halfway {
						mu.Lock()
						okTook = append(okTook, took)
						mu.Unlock()
					}
					// Allowed only if the transfer had already ended: then
					// every byte is in place, or (FAILED) none moves any
					// more.
					untrack(a, &a.heldHandles, h)
					snap := f.sample(t, w)
					if halfway {
						if ok, n := farOK.Add(1), far.Load(); n >= 20 && 10*ok >= 9*n {
							t.Fatalf("Release returned OK for %d of %d handles that Poll reported IN_PROGRESS, with half their bytes still to land, just before: "+
								"Release waits for the transfer to end (Release never waits; a running handle is BUSY)", ok, n)
						}
					}
					if string(snap) == string(f.sampleWant()) {
						return
					}
					f.settle(t)
					if i := firstDiff(f.sample(t, w), snap); i >= 0 {
						t.Fatalf("Release(handle %d) returned OK (Poll said %s just before), yet its destination changed afterwards (sampled byte %d of %d): "+
							"Release freed a running handle, whose bytes kept moving (a running handle is BUSY and stays valid)", h, map[bool]string{true: "IN_PROGRESS", false: "terminal"}[run], i, len(snap))
					}
					t.Logf("Release(handle %d) returned OK with its destination incomplete but still: it ended FAILED or CANCELED between Poll and Release", h)
				case sdk.CodeBusy:
					mu.Lock()
					busyTook = append(busyTook, took)
					mu.Unlock()
					if st := a.poll(h)[0]; st.Err != nil {
						t.Fatalf("Poll(handle %d) after its Release was refused BUSY: %v; a refused Release must leave the handle valid", h, st.Err)
					}
					if stop {
						cancelAll(e, a, []sdk.HandleID{h})
					}
					end := a.wait(h)[0]
					if end.State == sdk.StateDone {
						if f.unfinished(t, w) {
							t.Fatalf("handle %d DONE, but its last bytes are not in place", h)
						}
					} else if end.State == sdk.StateFailed {
						t.Fatalf("handle %d ended FAILED (%v) after a refused Release", h, end.Reason)
					}
					a.release(h)
				default:
					t.Fatalf("Release(running handle %d): code %v (%v), want BUSY", h, c, firstErr(errs, err))
				}
			})
			return int(running.Load())
		})
		if n, ok := far.Load(), farOK.Load(); n >= 10 && 10*ok >= 9*n {
			e.t.Errorf("Release returned OK for %d of %d handles that Poll reported IN_PROGRESS, with half their bytes still to land, just before: "+
				"Release waits for the transfer to end (Release never waits; a running handle is BUSY)", ok, n)
		}
	},
}

// checkReleaseTwice: the second Release of a handle, and Release of an id
// never issued, are NOT_FOUND.
var checkReleaseTwice = check{
	name: "contract/release-twice",
	doc: "releasing a handle twice is NOT_FOUND the second time, as is releasing an id never issued or zero; neither changes anything: " +
		"--repeat (default 100) handles, 8 at a time; a transport answering otherwise one time in ten passes with probability 0.9^repeat",
	needs: movesData,
	run: func(e *env) {
		l := e.link(4096)
		before := l.a.resources()
		e.parallel(e.cfg.Repeat, func(t T, _, _ int) {
			a := l.a.as(t)
			h := a.post(l.spec(sdk.OpWrite))[0]
			a.wait(h)
			a.release(h)
			for _, tc := range []struct {
				name string
				id   sdk.HandleID
			}{{"released", h}, {"never issued", unknownHandle}, {"zero", 0}} {
				ctx, cancel := e.callCtx()
				errs, err := a.tr.Release(ctx, []sdk.HandleID{tc.id})
				cancel()
				if c := codeOf(errs, err); c != sdk.CodeNotFound {
					t.Fatalf("Release(%s handle %d): code %v (%v), want NOT_FOUND", tc.name, tc.id, c, firstErr(errs, err))
				}
			}
		})
		if after := l.a.resources(); after != before {
			e.t.Errorf("Release of released or unknown handles changed Resources: %+v, then %+v", before, after)
		}
	},
}
