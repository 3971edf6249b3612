package host

import (
	"fmt"
	"time"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/host/group"
)

// rankBook is what the rank sync decides about the requests it holds back
// from the engine, with no call to the group: which are new and which an
// id issued twice, when each passes the hold cap, and what the engine is
// told once the union is known. The rank sync's goroutine owns it; its
// step makes the group calls between these decisions (ranks.go).
type rankBook struct {
	holdCap time.Duration
	self    int
	// held are the requests reported and not resolved.
	held map[core.RequestID]*heldReq
}

// heldReq is one request finished on this rank and not yet resolved.
type heldReq struct {
	id        core.RequestID
	sending   bool
	receiving bool
	state     group.State
	failure   *core.Failure
	// invalid and quarantined are this rank's own, as core reported them
	// with the failure; blocks are every block of the request, reported
	// invalid when the request succeeded here and fails in the union.
	invalid, quarantined []core.BlockRef
	blocks               []core.BlockRef
	// op and bytes are the request's, for the metrics of its union
	// outcome (counted once, when it is reported).
	op       string
	bytes    uint64
	at       time.Time
	accepted bool
	// capAt is when this rank ends its wait for the other ranks (at plus
	// the hold cap; later when an expiry failed; zero once one was
	// written, and the watch brings the outcome).
	capAt time.Time
}

// settled counts what one resolve pass handed the engine.
type settled struct {
	resolved, unionFailed uint64
	// waited sums the time from local terminal to resolution.
	waited time.Duration
}

// admit takes the requests the owner finished: each new one is held, its
// hold cap set, with the terminal state to report; an id held already was
// issued again before its first use resolved, which the group cannot tell
// apart, so the second fails here at once (into rd).
func (b *rankBook) admit(in []*heldReq, rd *core.Ready, m *Metrics) ([]*heldReq, []group.Terminal) {
	var fresh []*heldReq
	var terms []group.Terminal
	for _, hr := range in {
		if b.held[hr.id] != nil {
			hr.emitLocal(rd, m, fmt.Errorf("request %q: issued again before its earlier use resolved on every rank: request ids must be unique: %w", hr.id, group.ErrAlreadyReported))
			continue
		}
		hr.capAt = hr.at.Add(b.holdCap)
		b.held[hr.id] = hr
		fresh = append(fresh, hr)
		terms = append(terms, hr.terminal())
	}
	return fresh, terms
}

// accept records that the group took the states of reqs (published, or
// kept for its next write).
func (b *rankBook) accept(reqs ...*heldReq) {
	for _, hr := range reqs {
		hr.accepted = true
	}
}

// refuse fails a request the group refused to take, here at once.
func (b *rankBook) refuse(hr *heldReq, err error, rd *core.Ready, m *Metrics) {
	delete(b.held, hr.id)
	hr.emitLocal(rd, m, fmt.Errorf("request %q: the group refused its state: %w", hr.id, err))
}

// accepted lists the ids the group took, to resolve.
func (b *rankBook) accepted() []core.RequestID {
	var ids []core.RequestID
	for id, hr := range b.held {
		if hr.accepted {
			ids = append(ids, id)
		}
	}
	return ids
}

// resolved hands the engine (into rd) every request the group resolved,
// with the union outcome, and returns those still pending past their hold
// cap at now, to expire, with the longest wait among them.
func (b *rankBook) resolved(outs []group.Outcome, now time.Time, rd *core.Ready, m *Metrics) (late []core.RequestID, waited time.Duration, s settled) {
	for _, o := range outs {
		hr := b.held[o.Request]
		if !o.Resolved {
			if !hr.capAt.IsZero() && !now.Before(hr.capAt) {
				late = append(late, o.Request)
				waited = max(waited, now.Sub(hr.at))
			}
			continue
		}
		delete(b.held, o.Request)
		s.resolved++
		s.waited += now.Sub(hr.at)
		hr.emit(rd, m, o, b.self)
		if o.State != group.Succeeded && hr.state == group.Succeeded {
			s.unionFailed++
		}
	}
	return late, waited, s
}

// expired records the expiry of late: once written, the watch brings the
// outcome; else it is tried again collectEvery after now.
func (b *rankBook) expired(late []core.RequestID, written bool, now time.Time) {
	for _, id := range late {
		if written {
			b.held[id].capAt = time.Time{}
		} else {
			b.held[id].capAt = now.Add(collectEvery)
		}
	}
}

// failAll fails every held request with err (into rd): this rank can no
// longer learn the union.
func (b *rankBook) failAll(rd *core.Ready, m *Metrics, err error) {
	for id, hr := range b.held {
		delete(b.held, id)
		hr.emitLocal(rd, m, fmt.Errorf("request %q: %w", id, err))
	}
}

// nextHoldCap is how long until the first held request passes the hold
// cap (0 if one has), if any is held.
func (b *rankBook) nextHoldCap(now time.Time) (time.Duration, bool) {
	first := time.Time{}
	for _, hr := range b.held {
		if hr.accepted && !hr.capAt.IsZero() && (first.IsZero() || hr.capAt.Before(first)) {
			first = hr.capAt
		}
	}
	if first.IsZero() {
		return 0, false
	}
	return max(first.Sub(now), 0), true
}

// terminal is the request's local terminal state: a failure past the hold
// cap or a lease is a timeout, and a timeout wins in the union.
func (hr *heldReq) terminal() group.Terminal {
	t := group.Terminal{Request: hr.id, State: hr.state}
	if hr.failure != nil && hr.failure.Reason != nil {
		t.Reason = hr.failure.Reason.Error()
	}
	return t
}

// emit adds the request's union outcome to rd, and counts it in m: as it
// finished here when every rank succeeded; else failed, with this rank's
// own invalid blocks (all its blocks, for a receive that succeeded here).
func (hr *heldReq) emit(rd *core.Ready, m *Metrics, o group.Outcome, self int) {
	if o.State == group.Succeeded {
		if hr.sending {
			rd.FinishedSending = append(rd.FinishedSending, hr.id)
		} else {
			rd.FinishedReceiving = append(rd.FinishedReceiving, hr.id)
		}
		m.countRequest("ok", hr.op, hr.bytes)
		return
	}
	if hr.failure != nil {
		f := *hr.failure
		if o.Rank != self {
			f.Reason = fmt.Errorf("%w (and %s on rank %d: %s)", f.Reason, o.State, o.Rank, o.Reason)
		}
		rd.Failed = append(rd.Failed, f)
		rd.InvalidBlocks = append(rd.InvalidBlocks, hr.invalid...)
		rd.Quarantined = append(rd.Quarantined, hr.quarantined...)
		m.countRequest("failed", hr.op, hr.bytes)
		return
	}
	hr.emitLocal(rd, m, fmt.Errorf("request %q %s on rank %d (%s): %w", hr.id, o.State, o.Rank, o.Reason, ErrUnionFailed))
}

// emitLocal fails the request on this rank with err, and counts it in m:
// its own failure's blocks as core reported them, or, for a receive that
// succeeded here, every block of it as invalid.
func (hr *heldReq) emitLocal(rd *core.Ready, m *Metrics, err error) {
	rd.Failed = append(rd.Failed, core.Failure{Request: hr.id, Sending: hr.sending, Reason: err})
	m.countRequest("failed", hr.op, hr.bytes)
	if hr.failure != nil {
		rd.InvalidBlocks = append(rd.InvalidBlocks, hr.invalid...)
		rd.Quarantined = append(rd.Quarantined, hr.quarantined...)
		return
	}
	if hr.receiving {
		rd.InvalidBlocks = append(rd.InvalidBlocks, hr.blocks...)
	}
}
