package conformance

import (
	"github.com/custody-dev/custody/sdk"
)

// checkCloseRefused: Close while anything is held is BUSY and changes
// nothing; once everything is freed the counters are zero and Close works.
var checkCloseRefused = check{
	name: "contract/close-and-teardown",
	doc: "Close is BUSY while a handle, dlist, peer or region is held and the agent keeps working; Resources counts exactly what is held; " +
		"after freeing everything in order the counters are zero and Close succeeds",
	needs: movesData,
	run: func(e *env) {
		l := e.link(1 << 20)
		a := l.a
		want := pattern(9, 1<<20)
		l.src.write(0, want)
		h := a.post(l.spec(sdk.OpWrite))[0]
		if st := a.wait(h)[0]; st.State != sdk.StateDone {
			e.t.Fatalf("handle %d ended %v (%v), want DONE", h, st.State, st.Reason)
		}
		expectBytes(l.dst, 0, want, "after DONE")
		wantRes := sdk.Resources{Regions: 1, Peers: 1, Dlists: 2, Handles: 1}
		if l.b == l.a {
			wantRes.Regions = 2
		}
		if got := a.resources(); got != wantRes {
			e.t.Errorf("Resources with one DONE handle, two dlists, one peer: %+v, want %+v", got, wantRes)
		}
		closeRefused := func(holding string) {
			e.t.Helper()
			before := a.resources()
			ctx, cancel := e.callCtx()
			err := a.tr.Close(ctx)
			cancel()
			if !is(err, sdk.CodeBusy) {
				e.t.Fatalf("Close while holding %s: %v, want BUSY", holding, err)
			}
			if after := a.resources(); after != before {
				e.t.Errorf("Close was refused but changed Resources: %+v, then %+v", before, after)
			}
		}
		closeRefused("a DONE handle")
		a.release(h)
		closeRefused("dlists")
		a.releaseDlists(l.ld, l.rd)
		closeRefused("a peer")
		a.unloadPeer(l.peer)
		if l.b != l.a {
			closeRefused("a region")
		}
		a.deregister(l.src.id)
		if l.b == l.a {
			a.deregister(l.dst.id)
		}
		if got := a.resources(); !got.Zero() {
			e.t.Errorf("Resources after freeing everything: %+v, want all zero", got)
		}
		ctx, cancel := e.callCtx()
		defer cancel()
		if err := a.tr.Close(ctx); err != nil {
			e.t.Errorf("Close after freeing everything: %v", err)
		}
		a.closed = true
	},
}
