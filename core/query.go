package core

import "time"

// Connected reports whether peer name is connected (published) in the
// attached epoch, so a runtime knows when a request for it needs a handshake
// first.
func (c *Core) Connected(name string) bool {
	p := c.peers[name]
	return p != nil && !p.retired
}

// next is the schedule a Ready carries (Ready.Next).
func (c *Core) next() Next {
	n := Next{Outstanding: len(c.pending)}
	if at, ok := c.nextDeadline(); ok {
		n.At = at
	}
	switch {
	case c.polling():
		n.When = WaitResults
	case c.retrying():
		n.When = WaitRetry
	case c.busy():
		n.When = WaitTransport
	}
	return n
}

// busy reports whether a round may make progress that only the transport
// can announce or that must be retried: a handle in flight or retained, a
// request not yet reported (a send or receive awaiting notifications), a
// release to retry, a retired peer's natives to release, an Inbox input, a
// fence asked for, or Work of a live epoch under way.
func (c *Core) busy() bool {
	return c.live.len() > 0 || c.reqs.len() > 0 || c.retrying() || len(c.dirty) > 0 || c.inbox.len() > 0 || c.outstandingLive() > 0
}

// retrying reports whether a round has work that no transport event will
// announce: a release or a retired peer's native release to retry, or a
// fence asked for and not yet reported.
func (c *Core) retrying() bool {
	return len(c.releaseQ) > 0 || len(c.retryQ) > 0 || len(c.retired) > 0 || len(c.fenceWant) > 0
}

// nextDeadline is the earliest lease or hold-cap deadline a round must
// observe, and false when none is pending.
func (c *Core) nextDeadline() (time.Time, bool) {
	var at int64
	ok := false
	if len(c.leases) > 0 {
		at, ok = c.leases[0].at, true
	}
	if c.holdHead < len(c.holdQ) {
		if h := c.holdQ[c.holdHead].at; !ok || h < at {
			at, ok = h, true
		}
	}
	if !ok {
		return time.Time{}, false
	}
	return time.Unix(0, at), true
}

// polling reports whether a round's queries (Notifications, Events, Poll)
// are still outstanding.
func (c *Core) polling() bool { return c.roundOut > 0 }
