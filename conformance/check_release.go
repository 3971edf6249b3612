package conformance

import (
	"github.com/custody-dev/custody/sdk"
)

// bigTransfer is the size the suite uses when it needs bytes to be moving
// for a while.
const bigTransfer = 64 << 20

// checkReleaseRunning: Release of a running handle is refused and changes
// nothing; a Release that succeeds proves the handle was terminal, so the
// destination must be complete at that moment.
var checkReleaseRunning = check{
	name:  "contract/release-running-busy",
	doc:   "Release of a running handle is BUSY and the handle stays pollable and is later releasable; a Release that returns OK leaves no byte still moving",
	needs: movesData,
	run: func(e *env) {
		l := e.link(bigTransfer)
		const attempts = 5
		for n := range attempts {
			want := pattern(uint64(100+n), bigTransfer)
			l.src.write(0, want)
			h := l.a.post(l.spec(sdk.OpWrite))[0]
			// Just before Release: is the handle running, with at least
			// half of its bytes still to land? Then an OK can only mean
			// Release waited for the transfer, or freed a running handle.
			running := l.a.poll(h)[0].State == sdk.StateInProgress && !landed(l.dst, want, bigTransfer/2) && !landed(l.dst, want, bigTransfer-4096)
			ctx, cancel := e.callCtx()
			errs, err := l.a.tr.Release(ctx, []sdk.HandleID{h})
			cancel()
			switch c := codeOf(errs, err); c {
			case sdk.CodeOK:
				untrack(l.a, &l.a.heldHandles, h)
				if running {
					e.t.Fatalf("Release(handle %d) returned OK, but Poll said IN_PROGRESS just before the call and at least half of its %d bytes had not landed: "+
						"Release waited for the transfer, or released a running handle (Release never waits; a running handle is BUSY)", h, bigTransfer)
				}
				// Allowed only if the transfer had already ended: every
				// byte must be in place now and stay so.
				if !expectBytes(l.dst, 0, want, "right after Release of handle "+itoa(uint64(h))+" returned OK") {
					e.t.Fatalf("Release(handle %d) returned OK while its bytes were still moving: a running handle must be refused with BUSY", h)
				}
				continue
			case sdk.CodeBusy:
				st := l.a.poll(h)[0]
				if st.Err != nil {
					e.t.Fatalf("Poll(handle %d) after its Release was refused BUSY: %v; a refused Release must leave the handle valid", h, st.Err)
				}
				end := l.a.wait(h)[0]
				if end.State != sdk.StateDone {
					e.t.Fatalf("handle %d ended %v (%v), want DONE", h, end.State, end.Reason)
				}
				expectBytes(l.dst, 0, want, "after DONE")
				l.a.release(h)
				return
			default:
				e.t.Fatalf("Release(running handle %d): code %v (%v), want BUSY", h, c, firstErr(errs, err))
			}
		}
		e.t.Skipf("each of %d transfers of %d bytes was over before Release could be asked: cannot observe a running handle on this transport", attempts, bigTransfer)
	},
}

// checkReleaseTwice: the second Release of a handle, and Release of an id
// never issued, are NOT_FOUND.
var checkReleaseTwice = check{
	name:  "contract/release-twice",
	doc:   "releasing a handle twice is NOT_FOUND the second time, as is releasing an id never issued; neither changes anything",
	needs: movesData,
	run: func(e *env) {
		l := e.link(4096)
		h := l.a.post(l.spec(sdk.OpWrite))[0]
		l.a.wait(h)
		l.a.release(h)
		before := l.a.resources()
		for _, tc := range []struct {
			name string
			id   sdk.HandleID
		}{{"released", h}, {"never issued", unknownHandle}, {"zero", 0}} {
			ctx, cancel := e.callCtx()
			errs, err := l.a.tr.Release(ctx, []sdk.HandleID{tc.id})
			cancel()
			if c := codeOf(errs, err); c != sdk.CodeNotFound {
				e.t.Errorf("Release(%s handle %d): code %v (%v), want NOT_FOUND", tc.name, tc.id, c, firstErr(errs, err))
			}
		}
		if after := l.a.resources(); after != before {
			e.t.Errorf("Release of released or unknown handles changed Resources: %+v, then %+v", before, after)
		}
	},
}

// landed reports whether the 4096 bytes of r at off already hold want's.
func landed(r *region, want []byte, off uint64) bool {
	r.a.t.Helper()
	return string(r.read(off, 4096)) == string(want[off:off+4096])
}
