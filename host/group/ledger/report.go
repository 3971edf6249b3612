package ledger

import "github.com/custody-dev/custody/core"

// Report records this rank's local terminal states; the next Flush
// publishes them. Input is checked whole first: an empty, oversized or
// invalid id, an unknown state, or a request already reported with another
// state is an error and changes nothing. Reporting the same state again is
// a no-op. A reason longer than MaxReasonLen is cut. A group of size 1
// publishes nothing: Report forgets there what Resolve has returned.
func (l *Ledger) Report(terminals []Terminal) error {
	seen := map[core.RequestID]State{}
	for _, t := range terminals {
		if err := CheckRequestID(t.Request); err != nil {
			return l.errorf("report: %w", err)
		}
		if !t.State.Terminal() {
			return l.errorf("report of request %q: %v is not a terminal state: %w", t.Request, t.State, ErrBadArgument)
		}
		prev, ok := seen[t.Request]
		if r := l.book.reqs[t.Request]; r != nil {
			prev, ok = r.mine.State, true
		}
		if ok && prev != t.State {
			return l.errorf("request %q was reported %v, now %v: %w; a terminal state stays terminal", t.Request, prev, t.State, ErrAlreadyReported)
		}
		seen[t.Request] = t.State
	}
	snap := l.Members()
	for _, t := range terminals {
		if l.book.reqs[t.Request] != nil {
			continue
		}
		t.Reason = Truncate(t.Reason)
		r := &request{id: t.Request, snap: snap, mine: t}
		l.book.reqs[t.Request] = r
		if !l.solo() {
			l.book.fresh[t.Request] = r
		}
	}
	if l.solo() {
		for id, r := range l.book.reqs {
			if r.phase.resolved() {
				delete(l.book.reqs, id)
			}
		}
	}
	return nil
}
