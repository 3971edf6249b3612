package conformance

import (
	"time"

	"github.com/custody-dev/custody/sdk"
)

// checkPeerLoss: killing a peer's process ends every transfer with it, as
// Describe's PeerLoss promises, within the promised bound.
var checkPeerLoss = check{
	name: "peer-loss/bounded",
	doc: "when a peer's process is killed during READs and WRITEs with it, each handle ends DONE or FAILED (REMOTE_DISCONNECT) within Limits.PeerLossBoundMillis " +
		"(PeerLoss reported), or the surviving process exits within it (process-exits); a post after the loss fails the same way; no call hangs",
	needs: needsRemote,
	run: func(e *env) {
		a, b := e.pair()
		if b.ag.Kill == nil {
			e.t.Skipf("the factory cannot kill one agent alone (Agent.Kill is nil: an in-process transport); run the suite out of process to check peer loss")
		}
		l := e.linkBetween(a, b, bigTransfer)
		l.src.write(0, pattern(11, bigTransfer))
		var specs []sdk.PostSpec
		for range 4 {
			specs = append(specs, l.spec(sdk.OpWrite), l.spec(sdk.OpRead))
		}
		ids := l.a.post(specs...)
		l.b.kill()
		killed := time.Now()
		bound := e.lossBound()
		slack := bound/2 + 2*time.Second
		if e.desc.PeerLoss == sdk.PeerLossProcessExits {
			if l.a.ag.Exited == nil {
				e.t.Fatalf("the transport claims PeerLoss %q but the factory gives no Agent.Exited to verify it", e.desc.PeerLoss)
			}
			select {
			case <-l.a.ag.Exited:
				l.a.killed = true
			case <-time.After(bound + slack):
				e.t.Fatalf("the transport claims PeerLoss %q but the survivor's process still runs %v after its peer was killed (bound %v)", e.desc.PeerLoss, bound+slack, bound)
			}
			return
		}
		checkLost := func(what string, ids []sdk.HandleID, sts []sdk.HandleStatus) {
			for i, st := range sts {
				if st.State == sdk.StateFailed && !is(st.Reason, sdk.CodeRemoteDisconnect) {
					e.t.Errorf("%s: handle %d ended FAILED with %v, want REMOTE_DISCONNECT", what, ids[i], st.Reason)
				}
				if st.State == sdk.StateCanceled {
					e.t.Errorf("%s: handle %d ended CANCELED, but nobody canceled it", what, ids[i])
				}
			}
		}
		sts := l.a.waitFor(bound+slack, ids...)
		e.t.Logf("handles to the dead peer were terminal %v after the kill (bound %v)", time.Since(killed).Round(time.Millisecond), bound)
		checkLost("transfer running when the peer died", ids, sts)
		failed := 0
		for _, st := range sts {
			if st.State == sdk.StateFailed {
				failed++
			}
		}
		e.t.Logf("%d of %d handles running when the peer was killed ended FAILED", failed, len(ids))

		// A transfer posted after the loss fails too: at Post, or as a
		// handle that ends FAILED within the bound.
		ctx, cancel := e.callCtx()
		res, err := l.a.tr.Post(ctx, []sdk.PostSpec{l.spec(sdk.OpWrite)})
		cancel()
		if err != nil {
			if !is(err, sdk.CodeRemoteDisconnect) {
				e.t.Errorf("Post to the dead peer: %v, want REMOTE_DISCONNECT or a handle that fails", err)
			}
			return
		}
		if len(res) != 1 {
			e.t.Fatalf("Post of 1 item: %d results", len(res))
		}
		if res[0].Err != nil {
			if !is(res[0].Err, sdk.CodeRemoteDisconnect) {
				e.t.Errorf("Post to the dead peer: %v, want REMOTE_DISCONNECT or a handle that fails", res[0].Err)
			}
			return
		}
		h := res[0].ID
		track(l.a, &l.a.heldHandles, h)
		st := l.a.waitFor(bound+slack, h)
		if st[0].State != sdk.StateFailed {
			e.t.Errorf("a WRITE posted to the dead peer ended %v, want FAILED (REMOTE_DISCONNECT)", st[0].State)
		}
		checkLost("transfer posted after the peer died", []sdk.HandleID{h}, st)
	},
}
