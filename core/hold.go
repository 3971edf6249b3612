package core

import "fmt"

// holdEntry is a hold-cap deadline. Deadlines are appended in the order of
// the now values the caller passes, which never go backwards, so the queue
// is sorted and each round pops only what expired: its cost follows the
// expiries, not what is in flight.
type holdEntry struct {
	at int64
	x  *xfer
}

// hold (re)starts x's hold-cap clock: at post, and again when x is retained.
func (c *Core) hold(x *xfer) {
	x.deadline = c.now + int64(c.cfg.HoldCap)
	c.holdQ = append(c.holdQ, holdEntry{x.deadline, x})
	// Entries of released handles wait for their deadline to be popped;
	// compact when they outnumber the live ones, so memory follows what is
	// in flight (amortised O(1) per hold).
	if n := len(c.holdQ) - c.holdHead; n > 1024 && n > 4*c.live.len() {
		out := c.holdQ[:0]
		for _, e := range c.holdQ[c.holdHead:] {
			if e.x.flags&fGone == 0 && e.x.deadline == e.at {
				out = append(out, e)
			}
		}
		clear(c.holdQ[len(out):])
		c.holdQ, c.holdHead = out, 0
	}
}

// expireHolds escalates every handle whose hold-cap deadline passed and
// that is still tracked (rule 8), so a handle that never turns terminal
// holds its blocks for the cap at most. A terminal handle whose Release is
// under way is not: its transfer moves nothing any more, and the Release
// (a call with a deadline, rule 13) decides. Released, its request reports
// as it ended; refused, it is escalated then (releaseTerminal), since a
// report before the Release's answer would hand back blocks of a handle
// that may still be held (rule 2).
func (c *Core) expireHolds() {
	for c.holdHead < len(c.holdQ) {
		e := c.holdQ[c.holdHead]
		if e.at > c.now {
			break
		}
		c.holdQ[c.holdHead] = holdEntry{}
		c.holdHead++
		if e.x.flags&(fGone|fEscalated) != 0 || e.x.deadline != e.at || e.x.releasing() {
			continue
		}
		c.escalate(e.x)
	}
	if c.holdHead > 0 && c.holdHead >= len(c.holdQ)/2 {
		n := copy(c.holdQ, c.holdQ[c.holdHead:])
		clear(c.holdQ[n:])
		c.holdQ, c.holdHead = c.holdQ[:n], 0
	}
}

// releasing reports whether x is terminal with its Release queued or under
// way.
func (x *xfer) releasing() bool {
	return x.state.Terminal() && x.flags&fQueued != 0
}

// capPassed reports whether x's hold cap passed with x not escalated.
func (c *Core) capPassed(x *xfer) bool {
	return x.flags&fEscalated == 0 && x.deadline <= c.now
}

// escalate acts on a handle held past the cap, per Config.Escalation. Its
// request fails with ErrHoldCap.
func (c *Core) escalate(x *xfer) {
	x.flags |= fEscalated
	r := x.req
	reason := fmt.Errorf("handle %v of request %q (%v, retained %v) held past %v: %w", x.ref, r.id, x.state, x.flags&fRetained != 0, c.cfg.HoldCap, ErrHoldCap)
	c.fail(r, reason)
	switch c.cfg.Escalation {
	case EscalateFence:
		c.requestFence(x.ref.Epoch, Alert{Level: AlertError, Kind: "hold_cap_fence", Peer: x.peerName(), Request: r.id, Handle: x.ref, Err: reason})
	case EscalateQuarantine:
		// Terminal or not, the transport may still hold x (its Release
		// failed, rule 2): its blocks never go back.
		c.pin(x, OwnerQuarantined)
		c.alert(Alert{Level: AlertError, Kind: "transfer_force_released", Peer: x.peerName(), Request: r.id, Handle: x.ref, Err: fmt.Errorf("%w; its blocks are quarantined", reason)})
		c.gone(x, false)
	case EscalateReleaseAndReuse:
		c.alert(Alert{Level: AlertError, Kind: "transfer_force_released", Peer: x.peerName(), Request: r.id, Handle: x.ref, Err: fmt.Errorf("%w; its blocks are handed back for reuse (EscalateReleaseAndReuse)", reason)})
		c.gone(x, false)
	}
}

// requestFence asks the caller to fence epoch, once per epoch, with a.
func (c *Core) requestFence(epoch Epoch, a Alert) {
	if !c.fenceWant[epoch] {
		c.fenceWant[epoch] = true
		c.alert(a)
	}
}
