package conformance

import (
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
	name:  "events/terminal-once",
	doc:   "with Events claimed, each of 32 handles has exactly one terminal event, with the state Poll reports, and none after it was drained; Events(max) returns at most max",
	needs: needsEvents,
	run: func(e *env) {
		l := e.link(1 << 20)
		src, ok := l.a.tr.(sdk.EventSource)
		if !ok {
			e.t.Fatalf("the transport claims Events but %T does not implement sdk.EventSource", l.a.tr)
		}
		specs := make([]sdk.PostSpec, 32)
		for i := range specs {
			specs[i] = l.spec(sdk.OpWrite)
		}
		ids := l.a.post(specs...)
		final := map[sdk.HandleID]sdk.State{}
		for i, st := range l.a.wait(ids...) {
			final[ids[i]] = st.State
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
				e.t.Errorf("Events(max %d) returned %d events", limit, len(evs))
			}
			for _, ev := range evs {
				want, mine := final[ev.Handle]
				if !mine || !ev.State.Terminal() {
					continue
				}
				seen[ev.Handle]++
				if ev.State != want {
					e.t.Errorf("event for handle %d says %v, Poll said %v", ev.Handle, ev.State, want)
				}
			}
		}
		deadline := time.Now().Add(settleTimeout)
		var b backoff
		for len(seen) < len(ids) {
			if time.Now().After(deadline) {
				e.t.Fatalf("terminal events for %d of %d terminal handles after %v", len(seen), len(ids), settleTimeout)
			}
			// Small batches first, so that a bounded drain is covered and
			// an event split across calls is still reported once.
			limit := 3
			if len(seen) >= len(ids)/2 {
				limit = 0
			}
			drain(limit)
			b.wait()
		}
		barrier(e, l)
		drain(1)
		drain(0)
		for id, n := range seen {
			if n != 1 {
				e.t.Errorf("handle %d: %d terminal events, want exactly one", id, n)
			}
		}
	},
}
