package conformance

import (
	"github.com/custody-dev/custody/sdk"
)

// unknownHandle is an id no transport of a suite run has handed out.
const unknownHandle = sdk.HandleID(1<<63 + 12345)

// checkPollUnknown: Poll of an unknown or released id is NOT_FOUND, per
// item, with no state.
var checkPollUnknown = check{
	name: "contract/poll-unknown",
	doc: "Poll of an unknown, zero or released id answers NOT_FOUND for that item and no state; the other items of the batch are answered normally: " +
		"--repeat (default 100) batches, 8 at a time, each with a handle of its own released; a transport answering otherwise one time in ten passes with probability 0.9^repeat",
	needs: movesData,
	run: func(e *env) {
		l := e.link(4096)
		l.src.write(0, pattern(1, 4096))
		live := l.a.post(l.spec(sdk.OpWrite))[0]
		l.a.wait(live)
		e.parallel(e.cfg.Repeat, func(t T, _, _ int) {
			a := l.a.as(t)
			done := a.post(l.spec(sdk.OpWrite))[0]
			a.wait(done)
			a.release(done)
			ctx, cancel := e.callCtx()
			defer cancel()
			ids := []sdk.HandleID{unknownHandle, live, 0, done}
			st, err := a.tr.Poll(ctx, ids)
			if err != nil {
				t.Fatalf("Poll(%v): the call failed as a whole (%v); an unknown id is an item error", ids, err)
			}
			if len(st) != len(ids) {
				t.Fatalf("Poll(%v): %d results", ids, len(st))
			}
			for i, s := range st {
				checkStatus(t, ids[i], s)
			}
			for _, i := range []int{0, 2, 3} {
				if !is(st[i].Err, sdk.CodeNotFound) {
					t.Fatalf("Poll(handle %d, %s): got state %v err %v, want NOT_FOUND", ids[i], []string{"never issued", "", "zero", "released"}[i], st[i].State, st[i].Err)
				}
			}
			if st[1].Err != nil || st[1].State != sdk.StateDone {
				t.Fatalf("Poll(live DONE handle %d) next to unknown ids: state %v err %v, want DONE", live, st[1].State, st[1].Err)
			}
		})
	},
}
