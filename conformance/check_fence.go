package conformance

import (
	"time"

	"github.com/custody-dev/custody/sdk"
)

// fenceSize is the first WRITE the fence check has running into the agent
// it kills: small enough to snapshot at once, large enough to run a while
// on a slow transport. A round whose WRITE was over before the process
// exited doubles it for the next, up to the suite's cap (flightCap), so
// that a fast NIC is fenced under a running WRITE too.
const fenceSize = 8 << 20

// fenceRounds is how many agents the fence check kills under a running
// WRITE: a round can only catch a late byte if the kill lands while bytes
// are moving, so every round that observes one must hold. Rounds that
// observe nothing grow the WRITE instead; fenceMaxRounds bounds them all.
const (
	fenceRounds    = 5
	fenceMaxRounds = 12
)

// needsFenceIncoming runs on transports that claim their fence stops
// incoming transfers too, which lets the host reuse a dead agent's blocks
// at once (docs/fencing.md).
func needsFenceIncoming(d sdk.Description) string {
	if d.FenceScope != sdk.FenceInitiatedAndIncoming {
		return "transport claims FenceScope " + string(d.FenceScope) + ", not " + string(sdk.FenceInitiatedAndIncoming) +
			": the host never reuses memory a peer may still write into, so there is nothing to check"
	}
	return needsRemote(d)
}

// checkFenceIncoming: killing an agent's process stops a peer's WRITE into
// its memory, as FenceScope initiated-and-incoming promises.
var checkFenceIncoming = check{
	name: "fence/incoming",
	doc: "with FenceScope initiated-and-incoming claimed, a peer's WRITE running into an agent whose process was killed lands no byte after the process exited: " +
		"the region's bytes, snapshot once the process is gone, do not change while the peer's handle turns terminal: not one byte, " +
		"since whatever writes into the memory of an agent with this scope (its own process, or its NIC, which the kernel drains before the process is reaped) is gone with it",
	needs: needsFenceIncoming,
	run: func(e *env) {
		observed := 0
		size := min(uint64(fenceSize), e.flightCap())
		double := func() { size = min(2*size, e.flightCap()) }
		for n := 0; n < fenceMaxRounds && observed < fenceRounds; n++ {
			a, b := e.agent(), e.agent()
			if a.ag.Kill == nil {
				e.t.Skipf("the factory cannot kill one agent alone (Agent.Kill is nil: an in-process transport); run the suite out of process to check the fence")
			}
			if a.ag.Exited == nil {
				e.t.Skipf("the factory gives no Agent.Exited: the suite cannot tell when the killed agent's process is gone, so it cannot check the fence")
			}
			// b WRITEs into a: l.src is b's region, l.dst a's.
			l := e.linkBetween(b, a, size)
			want := pattern(uint64(20+n), size)
			l.src.write(0, want)
			h := b.post(l.spec(sdk.OpWrite))[0]
			if st := b.poll(h)[0]; st.State != sdk.StateInProgress {
				b.wait(h)
				b.release(h)
				double()
				continue // over before the kill: this round cannot observe the fence
			}
			a.kill()
			select {
			case <-a.ag.Exited:
			case <-time.After(callTimeout):
				e.t.Fatalf("agent %q: Kill returned but its process has not exited %v later", a.name, callTimeout)
			}
			snap := l.dst.read(0, size)
			if string(snap) == string(want) {
				b.wait(h)
				b.release(h)
				double()
				continue // every byte landed before the exit: nothing left to fence
			}
			observed++
			st := b.waitFor(e.lossBound()+e.lossBound()/2+2*time.Second, h)[0]
			if got := l.dst.read(0, size); firstDiff(got, snap) >= 0 {
				first, last := changed(got, snap)
				e.t.Errorf("round %d: a WRITE of handle %d (agent %q) into killed agent %q changed its region (bytes %d to %d of %d) after the process had exited (the handle ended %v, %v): "+
					"FenceScope %q promises that a kill stops incoming transfers, so the host would reuse memory that is still being written",
					n, h, b.name, a.name, first, last, size, st.State, st.Reason, e.desc.FenceScope)
			}
			b.release(h)
		}
		if observed == 0 {
			e.t.Skipf("could not observe the fence: in each of %d rounds the WRITE, grown to %d bytes (the cap: the suite's region size or Limits.MaxTransferBytes), was over before its target's process exited",
				fenceMaxRounds, size)
		}
		e.t.Logf("%d rounds killed an agent while a WRITE (up to %d bytes) into it was running", observed, size)
	},
}

// changed returns the first and last index where a and b differ; the
// caller knows they differ.
func changed(a, b []byte) (first, last int) {
	first, last = firstDiff(a, b), len(a)-1
	for last > first && a[last] == b[last] {
		last--
	}
	return first, last
}
