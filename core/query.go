package core

import "time"

// Connected reports whether peer name is connected (published) in the
// attached epoch, so a runtime knows when a request for it needs a handshake
// first.
func (c *Core) Connected(name string) bool {
	p := c.peers[name]
	return p != nil && !p.retired
}

// Busy reports whether a round may make progress that only the transport
// can announce or that must be retried: a handle in flight or retained, a
// request not yet reported (a send or receive awaiting notifications), a
// release to retry, a retired peer's natives to release, or a fence asked
// for. An idle Core (Busy false) needs no round until a command or a
// deadline (NextDeadline).
func (c *Core) Busy() bool {
	return c.live.len() > 0 || c.reqs.len() > 0 || c.Retrying() || len(c.dirty) > 0 || c.inbox.len() > 0 || c.outstandingLive() > 0
}

// Retrying reports whether a round has work that no transport event will
// announce: a release or a retired peer's native release to retry, or a
// fence asked for and not yet reported. A runtime woken by the transport
// (sdk.Waker) still runs rounds on a timer while this holds.
func (c *Core) Retrying() bool {
	return len(c.releaseQ) > 0 || len(c.retryQ) > 0 || len(c.retired) > 0 || len(c.fenceWant) > 0
}

// NextDeadline is the earliest lease or hold-cap deadline a round must
// observe, and false when none is pending. A runtime that runs no round
// while idle must run one then.
func (c *Core) NextDeadline() (time.Time, bool) {
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

// Polling reports whether a round's queries (Notifications, Events, Poll)
// are still outstanding; a runtime starts the next round once they are
// reported.
func (c *Core) Polling() bool { return c.roundOut > 0 }
