package conformance

import (
	"sync"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// needsEvents runs on transports that claim events.
func needsEvents(d sdk.Description) string {
	if !d.Capabilities.Events {
		return "transport does not claim Events"
	}
	return movesData(d)
}

// checkEventsOnce: every handle's turn to a terminal state is reported
// once, with the state Poll reports.
var checkEventsOnce = check{
	name: "events/terminal-once",
	doc: "with Events claimed, each of 2 x --repeat (default 200) handles, posted by 8 goroutines at once, has exactly one terminal event, with the state Poll reports, and none after it was drained; " +
		"Events(max) returns at most max, drained 1, 2 or 3 at a time (about --repeat calls): a transport doubling an event or overrunning max one time in ten passes with probability 0.9^repeat or less",
	needs: needsEvents,
	run: func(e *env) {
		l := e.link(1 << 20)
		src, ok := l.a.tr.(sdk.EventSource)
		if !ok {
			e.t.Fatalf("the transport claims Events but %T does not implement sdk.EventSource", l.a.tr)
		}
		var mu sync.Mutex
		final := map[sdk.HandleID]sdk.State{}
		n := 2 * e.cfg.Repeat
		e.parallel(n, func(t T, _, _ int) {
			a := l.a.as(t)
			h := a.post(l.spec(sdk.OpWrite))[0]
			st := a.wait(h)[0]
			mu.Lock()
			final[h] = st.State
			mu.Unlock()
		})
		if e.t.Failed() {
			return
		}
		ids := make([]sdk.HandleID, 0, n)
		for id := range final {
			ids = append(ids, id)
		}
		seen := map[sdk.HandleID]int{}
		drain := func(limit int) {
			ctx, cancel := e.callCtx()
			defer cancel()
			evs, err := src.Events(ctx, limit)
			if err != nil {
				e.t.Fatalf("Events(max %d): %v", limit, err)
			}
			if limit > 0 && len(evs) > limit {
				e.t.Fatalf("Events(max %d) returned %d events: Events returns at most max", limit, len(evs))
			}
			for _, ev := range evs {
				want, mine := final[ev.Handle]
				if !mine || !ev.State.Terminal() {
					continue
				}
				seen[ev.Handle]++
				if seen[ev.Handle] > 1 {
					e.t.Fatalf("handle %d: %d terminal events, want exactly one", ev.Handle, seen[ev.Handle])
				}
				if ev.State != want {
					e.t.Errorf("event for handle %d says %v, Poll said %v", ev.Handle, ev.State, want)
				}
			}
		}
		deadline := time.Now().Add(settleTimeout)
		var b backoff
		for i := 0; len(seen) < len(ids); i++ {
			if time.Now().After(deadline) {
				e.t.Fatalf("terminal events for %d of %d terminal handles after %v", len(seen), len(ids), settleTimeout)
			}
			// Small batches, so that a bounded drain is covered and an
			// event split across calls is still reported once.
			drain(1 + i%3)
			if i%16 == 15 {
				b.wait()
			}
		}
		barrier(e, l)
		drain(1)
		drain(0)
		l.a.release(ids...)
	},
}
