package conformance

import (
	"github.com/custody-dev/custody/sdk"
)

// unknownHandle is an id no transport of a suite run has handed out.
const unknownHandle = sdk.HandleID(1<<63 + 12345)

// checkPollUnknown: Poll of an unknown or released id is NOT_FOUND, per
// item, with no state.
var checkPollUnknown = check{
	name:  "contract/poll-unknown",
	doc:   "Poll of an unknown, zero or released id answers NOT_FOUND for that item and no state; the other items of the batch are answered normally",
	needs: movesData,
	run: func(e *env) {
		l := e.link(4096)
		l.src.write(0, pattern(1, 4096))
		live := l.a.post(l.spec(sdk.OpWrite))[0]
		done := l.a.post(l.spec(sdk.OpWrite))[0]
		l.a.wait(live, done)
		l.a.release(done)

		ctx, cancel := e.callCtx()
		defer cancel()
		ids := []sdk.HandleID{unknownHandle, live, 0, done}
		st, err := l.a.tr.Poll(ctx, ids)
		if err != nil {
			e.t.Fatalf("Poll(%v): the call failed as a whole (%v); an unknown id is an item error", ids, err)
		}
		if len(st) != len(ids) {
			e.t.Fatalf("Poll(%v): %d results", ids, len(st))
		}
		for i, s := range st {
			checkStatus(e.t, ids[i], s)
		}
		for _, i := range []int{0, 2, 3} {
			if !is(st[i].Err, sdk.CodeNotFound) {
				e.t.Errorf("Poll(handle %d, %s): got state %v err %v, want NOT_FOUND", ids[i], []string{"never issued", "", "zero", "released"}[i], st[i].State, st[i].Err)
			}
		}
		if st[1].Err != nil || st[1].State != sdk.StateDone {
			e.t.Errorf("Poll(live DONE handle %d) next to unknown ids: state %v err %v, want DONE", live, st[1].State, st[1].Err)
		}
	},
}
