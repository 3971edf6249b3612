package conformance

import (
	"context"
	"sync/atomic"

	"github.com/custody-dev/custody/sdk"
)

// busyRounds is how many rounds of the four refused frees busy-in-use asks
// while each handle is unreleased.
const busyRounds = 4

// checkBusyInUse: what a live transfer or dlist uses cannot be freed.
var checkBusyInUse = check{
	name: "contract/busy-in-use",
	doc: "while a handle is unreleased, ReleaseDescriptors of its dlists is BUSY; while a dlist lives, UnloadPeers of its peer and DeregisterMemory of its region are BUSY, " +
		"also once no handle is left and only the dlists remain; each refusal changes nothing, and the same calls succeed once the user is gone. " +
		"Each asked --repeat (default 100) times, 4 times of each of a quarter as many handles, 4 at once, sized from the measured bandwidth until they run while asked, then --repeat times with dlists alone, 8 at once; " +
		"a transport freeing what is in use one time in ten passes with probability 0.9^repeat",
	needs: movesData,
	run: func(e *env) {
		a, b := e.pair()
		held := func() sdk.Resources {
			r := a.resources()
			return sdk.Resources{Regions: r.Regions, Peers: r.Peers, Dlists: r.Dlists}
		}
		refused := func(t T, what string, call func(context.Context) ([]error, error)) {
			ctx, cancel := e.callCtx()
			errs, err := call(ctx)
			cancel()
			if c := codeOf(errs, err); c != sdk.CodeBusy {
				t.Fatalf("%s: code %v (%v), want BUSY: what a live handle or dlist uses is not freed", what, c, firstErr(errs, err))
			}
		}
		// Each handle is asked busyRounds rounds of the four frees, so
		// that --repeat asks of each take a quarter of the transfers.
		handles := max((e.cfg.Repeat+busyRounds-1)/busyRounds, flightWorkers)
		canStop := e.desc.CancelEffect == sdk.CancelStops
		e.grow(a, b, "frees refused while in use", handles, func(f *flight) int {
			var running atomic.Int64
			before := held()
			e.parallelOn(flightWorkers, handles, func(t T, w, _ int) {
				a := a.as(t)
				f.reset(t, w)
				h := a.post(f.spec(w))[0]
				if a.poll(h)[0].State == sdk.StateInProgress && f.unfinished(t, w) {
					running.Add(1)
				}
				// Running or DONE, the handle is unreleased: its dlists,
				// their peer and regions are in use.
				for range busyRounds {
					refused(t, "ReleaseDescriptors(local dlist of unreleased handle "+itoa(uint64(h))+")", func(ctx context.Context) ([]error, error) {
						return a.tr.ReleaseDescriptors(ctx, []sdk.DlistID{f.ld})
					})
					refused(t, "ReleaseDescriptors(remote dlist of unreleased handle "+itoa(uint64(h))+")", func(ctx context.Context) ([]error, error) {
						return a.tr.ReleaseDescriptors(ctx, []sdk.DlistID{f.rds[w]})
					})
					refused(t, "UnloadPeers(peer of live dlists)", func(ctx context.Context) ([]error, error) {
						return a.tr.UnloadPeers(ctx, []sdk.PeerID{f.peer})
					})
					refused(t, "DeregisterMemory(region of live dlists)", func(ctx context.Context) ([]error, error) {
						return a.tr.DeregisterMemory(ctx, []sdk.RegionID{f.src.ID})
					})
				}
				// The rule is exercised: Cancel spares the rest of the
				// bytes where it stops transfers (the data checks hold
				// DONE to them).
				if canStop {
					cancelAll(e, a, []sdk.HandleID{h})
				}
				st := a.wait(h)[0]
				switch {
				case st.State == sdk.StateFailed, !canStop && st.State != sdk.StateDone:
					t.Fatalf("handle %d ended %v (%v) after the refused calls, want DONE", h, st.State, st.Reason)
				case st.State == sdk.StateDone && f.unfinished(t, w):
					t.Fatalf("handle %d DONE after the refused calls, but the last bytes of its %d are not in place", h, f.n)
				}
				a.release(h)
			})
			if after := held(); !e.t.Failed() && after != before {
				e.t.Errorf("%s: %+v, then %+v", changedResources("ReleaseDescriptors, UnloadPeers and DeregisterMemory of what is in use", sdk.CodeBusy, sdk.CodeBusy), before, after)
			}
			return int(running.Load())
		})
		if e.t.Failed() {
			return
		}
		// No handle is left: the dlists alone still use the peer and the
		// region.
		f := e.newFlight(a, b, 4096)
		before := held()
		e.parallel(2*e.cfg.Repeat, func(t T, _, i int) {
			a := a.as(t)
			if i%2 == 0 {
				refused(t, "UnloadPeers(peer of live dlists, no handle left)", func(ctx context.Context) ([]error, error) {
					return a.tr.UnloadPeers(ctx, []sdk.PeerID{f.peer})
				})
				return
			}
			refused(t, "DeregisterMemory(region of live dlists, no handle left)", func(ctx context.Context) ([]error, error) {
				return a.tr.DeregisterMemory(ctx, []sdk.RegionID{f.src.ID})
			})
		})
		if after := held(); !e.t.Failed() && after != before {
			e.t.Errorf("%s: %+v, then %+v", changedResources("UnloadPeers and DeregisterMemory of what live dlists use", sdk.CodeBusy, sdk.CodeBusy), before, after)
		}
		if !e.t.Failed() {
			f.free() // each free must now succeed
		}
	},
}

// checkDlistPinned: a dlist stays pinned until its handle is released,
// not merely terminal.
var checkDlistPinned = check{
	name: "contract/dlist-pinned-until-release",
	doc: "a dlist stays BUSY to ReleaseDescriptors while a handle using it is unreleased, also once that handle is terminal, and is released once the handle is: " +
		"--repeat (default 100) handles, 8 at a time, each with dlists of its own; a transport unpinning at the terminal state one time in ten passes with probability 0.9^(2 x repeat)",
	needs: movesData,
	run: func(e *env) {
		const slot = 4096
		l := e.link(parallelWorkers * slot)
		e.parallel(e.cfg.Repeat, func(t T, w, _ int) {
			a := l.a.as(t)
			ld, rd := a.dlist(0, l.src.desc(uint64(w)*slot, slot)), a.dlist(l.peer, l.dst.desc(uint64(w)*slot, slot))
			h := a.post(sdk.PostSpec{Op: sdk.OpWrite, Local: ld, LocalIndices: []uint32{0}, Remote: rd, RemoteIndices: []uint32{0}})[0]
			st := a.wait(h)[0]
			for _, d := range []struct {
				what string
				id   sdk.DlistID
			}{{"local", ld}, {"remote", rd}} {
				ctx, cancel := e.callCtx()
				errs, err := a.tr.ReleaseDescriptors(ctx, []sdk.DlistID{d.id})
				cancel()
				if c := codeOf(errs, err); c != sdk.CodeBusy {
					if c == sdk.CodeOK {
						untrack(a, &a.heldDlists, d.id)
					}
					t.Fatalf("ReleaseDescriptors(%s dlist %d of unreleased handle %d, which is %v): code %v (%v), want BUSY: a live handle pins its dlists until Release, terminal or not",
						d.what, d.id, h, st.State, c, firstErr(errs, err))
				}
			}
			a.release(h)
			a.releaseDlists(ld, rd)
		})
	},
}
