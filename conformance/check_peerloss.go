package conformance

import (
	"time"

	"github.com/custody-dev/custody/sdk"
)

// peerLossReads is how many READs, each into a slot of its own, the
// peer-loss check has running when it kills their peer, and
// peerLossWritesPerRead how many WRITEs run beside each.
const (
	peerLossReads         = 4
	peerLossWritesPerRead = 3
)

// checkPeerLoss: killing a peer's process ends every transfer with it, as
// Describe's PeerLoss promises, within the promised bound.
var checkPeerLoss = check{
	name: "peer-loss/bounded",
	doc: "when a peer's process is killed during READs and WRITEs with it, each handle ends DONE (then a READ's destination is complete) or FAILED (REMOTE_DISCONNECT), and at least one FAILED when a READ never completed, within Limits.PeerLossBoundMillis " +
		"(PeerLoss reported), or the surviving process exits within it (process-exits); a post after the loss fails the same way; no call hangs",
	needs: needsRemote,
	run: func(e *env) {
		a, b := e.pair()
		if b.ag.Kill == nil {
			e.t.Skipf("the factory cannot kill one agent alone (Agent.Kill is nil: an in-process transport); run the suite out of process to check peer loss")
		}
		// a's region: WRITE sources in its first half, READ destinations
		// in its second; b's region: READ sources (a known pattern) in its
		// first half, WRITE destinations in its second. Every READ has a
		// slot of its own, so that a READ reported DONE can be held to
		// complete bytes even though its peer is dead.
		const slot = bigTransfer / (2 * peerLossReads)
		l := e.linkBetween(a, b, bigTransfer)
		l.src.write(0, pattern(11, bigTransfer/2))
		fromB := pattern(12, bigTransfer/2)
		l.dst.write(0, fromB)
		var lds, rds []sdk.Descriptor
		for i := range uint64(2 * peerLossReads) {
			lds = append(lds, l.src.desc(i*slot, slot))
			rds = append(rds, l.dst.desc(i*slot, slot))
		}
		ld, rd := a.dlist(0, lds...), a.dlist(l.peer, rds...)
		var specs []sdk.PostSpec
		var reads []int // index in specs of READ i
		for i := range uint32(peerLossReads) {
			// WRITEs, more of them than READs, keep the READs running
			// longer: the engine shares its bandwidth among them.
			for range peerLossWritesPerRead {
				specs = append(specs, sdk.PostSpec{Op: sdk.OpWrite, Local: ld, LocalIndices: []uint32{i}, Remote: rd, RemoteIndices: []uint32{peerLossReads + i}})
			}
			reads = append(reads, len(specs))
			specs = append(specs, sdk.PostSpec{Op: sdk.OpRead, Local: ld, LocalIndices: []uint32{peerLossReads + i}, Remote: rd, RemoteIndices: []uint32{i}})
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
		// A handle reported DONE moved every byte: a READ's destination is
		// complete. A READ that did not complete must have failed, so when
		// one is incomplete, at least one handle ended FAILED.
		incomplete := 0
		for i, k := range reads {
			got := l.src.read(uint64(peerLossReads+i)*slot, slot)
			d := firstDiff(got, fromB[uint64(i)*slot:uint64(i+1)*slot])
			if d < 0 {
				continue
			}
			incomplete++
			if sts[k].State == sdk.StateDone {
				e.t.Errorf("READ handle %d ended DONE after its peer was killed, but its destination differs at byte %d of %d: "+
					"a transfer cut by peer loss must end FAILED (REMOTE_DISCONNECT), never DONE", ids[k], d, slot)
			}
		}
		e.t.Logf("%d of %d READs were incomplete when every handle was terminal", incomplete, len(reads))
		if incomplete > 0 && failed == 0 {
			e.t.Errorf("%d READs never completed after their peer was killed, yet no handle ended FAILED: a transfer cut by peer loss must end FAILED (REMOTE_DISCONNECT)", incomplete)
		}

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
