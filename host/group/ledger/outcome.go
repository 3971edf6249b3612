package ledger

import "github.com/custody-dev/custody/core"

// Outcome is a request's union outcome across ranks (rule 10).
type Outcome struct {
	Request core.RequestID
	// Resolved is true once every rank is terminal (reported, or lost).
	// Until then the request is pending, whatever some ranks reported.
	Resolved bool
	// State is the union: TimedOut if any rank timed out, else Failed if
	// any rank failed, was lost or left a malformed record, else Succeeded.
	State State
	// Rank is the lowest rank whose state decided State (-1 on success).
	Rank int
	// Reason is that rank's reason.
	Reason string
	// Ranks is each rank's state; 0 where it is still pending.
	Ranks []State
	// Pending lists the ranks not yet terminal (when !Resolved).
	Pending []int
}

// union folds per-rank states: pending while any rank is; else a timeout
// wins, then a failure, and success only when every rank succeeded.
func union(id core.RequestID, states []State, reasons []string) Outcome {
	o := Outcome{Request: id, Rank: -1, Ranks: append([]State(nil), states...)}
	for rank, s := range states {
		if s == 0 {
			o.Pending = append(o.Pending, rank)
		}
	}
	if len(o.Pending) > 0 {
		return o
	}
	o.Resolved, o.State = true, Succeeded
	for _, want := range []State{TimedOut, Failed} {
		for rank, s := range states {
			if s == want {
				o.State, o.Rank, o.Reason = want, rank, reasons[rank]
				return o
			}
		}
	}
	return o
}
