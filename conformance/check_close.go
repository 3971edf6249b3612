package conformance

import (
	"github.com/custody-dev/custody/sdk"
)

// checkCloseRefused: Close while anything is held is BUSY and changes
// nothing; once everything is freed the counters are zero and Close works.
var checkCloseRefused = check{
	name: "contract/close-and-teardown",
	doc: "Close is BUSY while a handle, dlist, peer or region is held and the agent keeps working; Resources counts exactly what is held; " +
		"after freeing everything in order the counters are zero and Close succeeds. At each stage Close and Resources are asked --repeat (default 100) times, 8 at once: " +
		"a transport closing or miscounting one time in ten passes with probability 0.9^repeat",
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
		// closeRefused asks Close and Resources again and again while the
		// agent holds exactly wantRes.
		closeRefused := func(holding string) {
			e.t.Helper()
			e.parallel(e.cfg.Repeat, func(t T, _, _ int) {
				a := a.as(t)
				ctx, cancel := e.callCtx()
				err := a.tr.Close(ctx)
				cancel()
				if !is(err, sdk.CodeBusy) {
					t.Fatalf("Close while holding %s: %v, want BUSY: Close is refused while anything is held", holding, err)
				}
				if got := a.resources(); got != wantRes {
					t.Fatalf("Resources while holding %s (Close refused meanwhile): %+v, want %+v: Resources counts exactly what is held", holding, got, wantRes)
				}
			})
			if e.t.Failed() {
				e.t.FailNow()
			}
		}
		closeRefused("a DONE handle")
		a.release(h)
		wantRes.Handles = 0
		closeRefused("dlists")
		a.releaseDlists(l.ld, l.rd)
		wantRes.Dlists = 0
		closeRefused("a peer")
		a.unloadPeer(l.peer)
		wantRes.Peers = 0
		if l.b != l.a {
			closeRefused("a region")
		}
		a.deregister(l.src.ID)
		if l.b == l.a {
			a.deregister(l.dst.ID)
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

// checkCloseBusyPeer: a peer or a remote dlist alone keeps Close BUSY.
var checkCloseBusyPeer = check{
	name: "contract/close-busy-peer-dlist",
	doc: "Close is BUSY and changes nothing while the agent holds only a peer (no region, no handle), and while it holds only a remote dlist and its peer; " +
		"each asked --repeat (default 100) times, 8 at a time; once both are freed Close succeeds",
	needs: needsRemote,
	run: func(e *env) {
		a, b := e.agent(), e.agent()
		r := b.region(4096)
		peer := a.loadPeer(b)
		refuse := func(holding string) {
			e.t.Helper()
			before := a.resources()
			e.parallel(e.cfg.Repeat, func(t T, _, _ int) {
				ctx, cancel := e.callCtx()
				err := a.tr.Close(ctx)
				cancel()
				if !is(err, sdk.CodeBusy) {
					t.Fatalf("Close of agent %q holding only %s: %v, want BUSY: Close is refused while anything is held", a.name, holding, err)
				}
			})
			if after := a.resources(); after != before {
				e.t.Errorf("Close was refused but changed Resources: %+v, then %+v", before, after)
			}
		}
		refuse("a peer")
		if e.t.Failed() {
			return
		}
		d := a.dlist(peer, r.desc(0, 4096))
		refuse("a remote dlist and its peer")
		if e.t.Failed() {
			return
		}
		a.releaseDlists(d)
		a.unloadPeer(peer)
		ctx, cancel := e.callCtx()
		defer cancel()
		if err := a.tr.Close(ctx); err != nil {
			e.t.Errorf("Close after freeing the peer: %v", err)
		}
		a.closed = true
	},
}
