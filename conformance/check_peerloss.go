package conformance

import (
	"math/bits"
	"os"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// Peer loss is exercised in rounds. A kill ends a peer for good, so every
// round starts a fresh pair of agents (two processes out of process),
// kills one and waits for the survivor to see it: each round costs process
// starts and a loss bound that the other checks' repetitions do not, and
// peerLossRounds rounds that cut transfers keep the check within seconds.
// Each round has peerLossReads READs and peerLossWrites WRITEs running at
// the kill, each into a slot of its own, so that every cut transfer is
// held to the rule: a transport breaking it for one transfer in ten passes
// the 4 x 16 cut transfers with probability 0.9^64 (1.2e-3).
const (
	peerLossRounds = 4
	peerLossReads  = 8
	peerLossWrites = 8
	// peerLossRegionCap bounds each agent's region of a round: a source
	// slot and one destination slot per transfer.
	peerLossRegionCap = 512 << 20
)

// checkPeerLoss: killing a peer's process ends every transfer with it, as
// Describe's PeerLoss promises, within the promised bound.
var checkPeerLoss = check{
	name: "peer-loss/bounded",
	doc: "when a peer's process is killed during READs and WRITEs with it, each handle ends DONE (then its destination is complete) or FAILED (REMOTE_DISCONNECT), within Limits.PeerLossBoundMillis " +
		"(PeerLoss reported), or the surviving process exits within it (process-exits); a post after the loss fails the same way; no call hangs. " +
		"4 kills, each on fresh agents with 8 READs and 8 WRITEs running, sized from the measured bandwidth and doubled until the kill cuts some of them (a round none was cut by does not count); " +
		"skipped, saying so, when even the cap was over before the kill",
	needs: needsRemote,
	run: func(e *env) {
		a, b := e.agent(), e.agent()
		if b.ag.Kill == nil {
			e.t.Skipf("the factory cannot kill one agent alone (Agent.Kill is nil: an in-process transport); run the suite out of process to check peer loss")
		}
		limit := e.peerLossCap()
		bw := e.measure(a, b, min(uint64(flightProbe), limit))
		n := pow2(uint64(bw * flightTarget.Seconds() / (peerLossReads + peerLossWrites)))
		n = min(max(n, flightMin), limit)
		e.t.Logf("peer loss: %.2f GB/s measured: starting at %d bytes a transfer, up to %d", bw/1e9, n, limit)
		kills, cut := 0, 0
		for kills < peerLossRounds {
			if a == nil {
				a, b = e.agent(), e.agent()
			}
			c := e.peerLossRound(a, b, n)
			a, b = nil, nil
			if e.t.Failed() {
				return
			}
			if c > 0 {
				kills++
				cut += c
				continue
			}
			if n >= limit {
				if cut == 0 {
					e.t.Skipf("peer loss: even transfers of %d bytes (the cap: %d MiB regions, or Limits.MaxTransferBytes) had all landed when their peer was killed, at a measured %.2f GB/s: nothing was cut, so nothing was checked",
						n, peerLossRegionCap>>20, bw/1e9)
				}
				e.t.Logf("peer loss: only %d of %d kills cut a transfer, up to the cap of %d bytes: a transport breaking the rule for one transfer in ten passes with probability %.2g",
					kills, peerLossRounds, n, missChance(cut))
				return
			}
			e.t.Logf("peer loss: every transfer of %d bytes had landed before the kill: doubling", n)
			n = min(2*n, limit)
		}
		e.t.Logf("peer loss: %d kills cut %d transfers (a transport breaking the rule for one in ten passes with probability %.2g)", kills, cut, missChance(cut))
	},
}

// peerLossCap is the largest transfer the peer-loss check grows to: what
// keeps each region within peerLossRegionCap, and the flight cap.
func (e *env) peerLossCap() uint64 {
	per := uint64(peerLossRegionCap / (1 + max(peerLossReads, peerLossWrites)))
	return min(uint64(1)<<(bits.Len64(per)-1), e.flightCap())
}

// lossMove is one transfer of a peer-loss round: its destination slot and
// the bytes it must hold should the transfer end DONE.
type lossMove struct {
	op   sdk.Op
	dst  *region
	off  uint64
	want []byte
}

// peerLossRound posts peerLossReads READs and peerLossWrites WRITEs of n
// bytes each between a and b, kills b, and holds every handle to the rule.
// It returns how many transfers the kill cut: those whose destination was
// incomplete once every handle had ended. A round that cut none exercised
// nothing. It frees what it can of the round before it returns.
func (e *env) peerLossRound(a, b *agent, n uint64) int {
	e.t.Helper()
	// a's region: the WRITE source, then a slot per READ; b's region: the
	// READ source, then a slot per WRITE. Fresh files are zeros, unlike
	// the sources.
	ra, rb := a.region((1+peerLossReads)*n), b.region((1+peerLossWrites)*n)
	defer ra.discard()
	defer rb.discard()
	toB, fromB := pattern(11+n, n), pattern(12+n, n)
	ra.write(0, toB)
	rb.write(0, fromB)
	peer := a.loadPeer(b)
	var lds, rds []sdk.Descriptor
	for i := range uint64(1 + peerLossReads) {
		lds = append(lds, ra.desc(i*n, n))
	}
	for i := range uint64(1 + peerLossWrites) {
		rds = append(rds, rb.desc(i*n, n))
	}
	ld, rd := a.dlist(0, lds...), a.dlist(peer, rds...)
	var specs []sdk.PostSpec
	var moves []lossMove
	for i := range uint32(max(peerLossReads, peerLossWrites)) {
		if i < peerLossWrites {
			specs = append(specs, sdk.PostSpec{Op: sdk.OpWrite, Local: ld, LocalIndices: []uint32{0}, Remote: rd, RemoteIndices: []uint32{1 + i}})
			moves = append(moves, lossMove{sdk.OpWrite, rb, uint64(1+i) * n, toB})
		}
		if i < peerLossReads {
			specs = append(specs, sdk.PostSpec{Op: sdk.OpRead, Local: ld, LocalIndices: []uint32{1 + i}, Remote: rd, RemoteIndices: []uint32{0}})
			moves = append(moves, lossMove{sdk.OpRead, ra, uint64(1+i) * n, fromB})
		}
	}
	ids := a.post(specs...)
	// Just before the kill: which transfers still have their last bytes
	// to land? Only the log says it; what the kill cut is told by the
	// bytes once every handle ended.
	running := 0
	for i, s := range a.poll(ids...) {
		if s.Err == nil && s.State == sdk.StateInProgress && !landed(moves[i], n-4096, 4096) {
			running++
		}
	}
	b.kill()
	killed := time.Now()
	bound := e.lossBound()
	slack := bound/2 + 2*time.Second
	if e.desc.PeerLoss == sdk.PeerLossProcessExits {
		if a.ag.Exited == nil {
			e.t.Fatalf("the transport claims PeerLoss %q but the factory gives no Agent.Exited to verify it", e.desc.PeerLoss)
		}
		select {
		case <-a.ag.Exited:
			a.killed = true
		case <-time.After(bound + slack):
			e.t.Fatalf("the transport claims PeerLoss %q but the survivor's process still runs %v after its peer was killed (bound %v)", e.desc.PeerLoss, bound+slack, bound)
		}
		cut := 0
		for _, m := range moves {
			if !landed(m, 0, n) {
				cut++
			}
		}
		return cut
	}
	sts := a.waitFor(bound+slack, ids...)
	took := time.Since(killed)
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
	checkLost("transfer running when the peer died", ids, sts)
	// A handle reported DONE moved every byte: its destination is complete
	// (a WRITE's too: b's memory is a shared file mapping, which keeps what
	// landed once b is gone). A transfer the kill cut must end FAILED.
	cut, failed := 0, 0
	for i, m := range moves {
		if sts[i].State == sdk.StateFailed {
			failed++
		}
		got := m.dst.read(m.off, n)
		d := firstDiff(got, m.want)
		if d < 0 {
			continue
		}
		cut++
		if sts[i].State == sdk.StateDone {
			e.t.Errorf("%v handle %d ended DONE after its peer was killed, but its destination differs at byte %d of %d: "+
				"a transfer cut by peer loss must end FAILED (REMOTE_DISCONNECT), never DONE", m.op, ids[i], d, n)
		}
	}
	e.t.Logf("round of %d-byte transfers: %d of %d still had their last bytes to land just before the kill; %d were cut; %d ended FAILED; all terminal %v after the kill (bound %v)",
		n, running, len(ids), cut, failed, took.Round(time.Millisecond), bound)
	if e.t.Failed() {
		return cut
	}

	// A transfer posted after the loss fails too: at Post, or as a handle
	// that ends FAILED within the bound.
	ctx, cancel := e.callCtx()
	res, err := a.tr.Post(ctx, []sdk.PostSpec{specs[0]})
	cancel()
	switch {
	case err != nil:
		if !is(err, sdk.CodeRemoteDisconnect) {
			e.t.Errorf("Post to the dead peer: %v, want REMOTE_DISCONNECT or a handle that fails", err)
		}
	case len(res) != 1:
		e.t.Fatalf("Post of 1 item: %d results", len(res))
	case res[0].Err != nil:
		if !is(res[0].Err, sdk.CodeRemoteDisconnect) {
			e.t.Errorf("Post to the dead peer: %v, want REMOTE_DISCONNECT or a handle that fails", res[0].Err)
		}
	default:
		h := res[0].ID
		track(a, &a.heldHandles, h)
		st := a.waitFor(bound+slack, h)
		if st[0].State != sdk.StateFailed {
			e.t.Errorf("a WRITE posted to the dead peer ended %v, want FAILED (REMOTE_DISCONNECT)", st[0].State)
		}
		checkLost("transfer posted after the peer died", []sdk.HandleID{h}, st)
		ids = append(ids, h)
	}
	if e.t.Failed() {
		return cut
	}
	// Free the round on the survivor, so that the next round's regions
	// replace this one's rather than add to them.
	a.release(ids...)
	a.releaseDlists(ld, rd)
	a.unloadPeer(peer)
	a.deregister(ra.ID)
	return cut
}

// landed reports whether the k bytes at offset off of m's destination hold
// what m moves there.
func landed(m lossMove, off, k uint64) bool {
	got := m.dst.read(m.off+off, k)
	return string(got) == string(m.want[off:off+k])
}

// discard removes the region's file and closes the suite's descriptor of
// it: its memory is returned once no process maps it any more, rather
// than when the check ends.
func (r *region) discard() {
	if err := os.Remove(r.File.Name()); err != nil && !os.IsNotExist(err) {
		r.a.t.Logf("remove region file %s: %v", r.File.Name(), err)
	}
	_ = r.File.Close()
}
