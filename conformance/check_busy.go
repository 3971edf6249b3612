package conformance

import (
	"context"

	"github.com/custody-dev/custody/sdk"
)

// checkBusyInUse: what a live transfer or dlist uses cannot be freed.
var checkBusyInUse = check{
	name: "contract/busy-in-use",
	doc: "while a handle is unreleased, ReleaseDescriptors of its dlists is BUSY; while a dlist lives, UnloadPeers of its peer and DeregisterMemory of its region are BUSY; " +
		"both stay BUSY once the handle is released and only the dlists remain; each refusal changes nothing, and the same calls succeed once the user is gone",
	needs: movesData,
	run: func(e *env) {
		l := e.link(bigTransfer)
		want := pattern(7, bigTransfer)
		l.src.write(0, want)
		h := l.a.post(l.spec(sdk.OpWrite))[0]
		// The handle may still run or be DONE: either way it is unreleased,
		// so its dlists are in use.
		refused := func(what string, call func(context.Context) ([]error, error)) {
			e.t.Helper()
			before := l.a.resources()
			ctx, cancel := e.callCtx()
			errs, err := call(ctx)
			cancel()
			c := codeOf(errs, err)
			if c != sdk.CodeBusy {
				e.t.Errorf("%s: code %v (%v), want BUSY", what, c, firstErr(errs, err))
			}
			after := l.a.resources()
			// A transfer may finish meanwhile; only its InFlight count may
			// change.
			before.InFlight, after.InFlight = 0, 0
			if after != before {
				e.t.Errorf("%s: %+v, then %+v", changedResources(what, c, sdk.CodeBusy), before, after)
			}
		}
		refused("ReleaseDescriptors(local dlist of an unreleased handle)", func(ctx context.Context) ([]error, error) {
			return l.a.tr.ReleaseDescriptors(ctx, []sdk.DlistID{l.ld})
		})
		refused("ReleaseDescriptors(remote dlist of an unreleased handle)", func(ctx context.Context) ([]error, error) {
			return l.a.tr.ReleaseDescriptors(ctx, []sdk.DlistID{l.rd})
		})
		refused("UnloadPeers(peer of a live dlist)", func(ctx context.Context) ([]error, error) {
			return l.a.tr.UnloadPeers(ctx, []sdk.PeerID{l.peer})
		})
		refused("DeregisterMemory(region of a live dlist)", func(ctx context.Context) ([]error, error) {
			return l.a.tr.DeregisterMemory(ctx, []sdk.RegionID{l.src.id})
		})
		if st := l.a.wait(h)[0]; st.State != sdk.StateDone {
			e.t.Fatalf("handle %d ended %v (%v) after the refused calls, want DONE", h, st.State, st.Reason)
		}
		expectBytes(l.dst, 0, want, "after the refused calls and DONE")
		l.a.release(h)
		// No handle is left: the dlists alone still use the peer and the
		// region.
		refused("UnloadPeers(peer of a live dlist, no handle left)", func(ctx context.Context) ([]error, error) {
			return l.a.tr.UnloadPeers(ctx, []sdk.PeerID{l.peer})
		})
		refused("DeregisterMemory(region of a live dlist, no handle left)", func(ctx context.Context) ([]error, error) {
			return l.a.tr.DeregisterMemory(ctx, []sdk.RegionID{l.src.id})
		})
		l.a.releaseDlists(l.ld, l.rd)
		l.a.unloadPeer(l.peer)
		l.a.deregister(l.src.id)
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
