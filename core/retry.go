package core

import "fmt"

// DefaultMaxRecentRequests is Config.MaxRecentRequests's default: at
// 10,000 requests a second, the retries of the last 6.5 seconds.
const DefaultMaxRecentRequests = 65536

// A call whose reply is lost (a deadline, a broken connection) is retried
// by the engine, which cannot tell whether the first got through. A retry
// carries the first call's id and token, where a new request under a
// reused id carries a new token: so core tells them apart, while the
// request is in flight and for its last MaxRecentRequests reports after.
// Taken as new, a retry after the report would move the blocks again:
// a read into blocks the engine already uses, from blocks its producer
// may already have freed. A zero token (a Read that notifies no one) tells
// nothing: such a call is taken as new once its id is free.

// takenKey is what tells a retry: a request's id, token and kind.
type takenKey struct {
	id    RequestID
	token Token
	kind  reqKind
}

// checkRetry refuses, with ErrDuplicate, a request that repeats one in
// flight or reported lately; and, as any request, one whose id another
// request in flight holds.
func (c *Core) checkRetry(id RequestID, token Token, kind reqKind) error {
	if r := c.reqs.get(id); r != nil {
		if token != 0 && r.token == token && r.kind == kind {
			return fmt.Errorf("request %q is in flight: %w", id, ErrDuplicate)
		}
		return fmt.Errorf("request %q is still in flight; use a new id", id)
	}
	if token != 0 && c.taken.has(takenKey{id, token, kind}) {
		return fmt.Errorf("request %q was reported already: %w", id, ErrDuplicate)
	}
	return nil
}

// remember records a reported request, so that its retries are refused.
func (c *Core) remember(r *request) {
	if r.token != 0 {
		c.taken.add(takenKey{r.id, r.token, r.kind})
	}
}
