package core

import (
	"errors"
	"slices"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// Poll runs one round at now and returns what it produced, with every
// report and Work accumulated since the last Poll or Ready. In order it:
// drains the Inbox (handshakes, fences); asks for the notifications
// received and for handle state changes (from the transport's EventSource
// when it has one, so the round's cost follows the number of changes, else
// by polling every live handle in batches), unless the previous round's
// queries are still outstanding; releases terminal handles (a failed
// Release keeps the handle and its blocks, retried next round); releases
// the natives of retired peers no handle uses any more (poll_retired);
// expires leases; escalates handles held past the cap; and reports every
// request that finished. Transport failures never abort a round: they
// become Alerts and the work is retried next round. Results reported with
// Done are acted on at once: a handle seen terminal is released in the
// Ready that follows, without waiting for another round.
func (c *Core) Poll(now time.Time) Ready {
	c.setNow(now)
	c.drainInbox()
	for _, x := range c.retryQ {
		c.queueRelease(x)
	}
	clear(c.retryQ)
	c.retryQ = c.retryQ[:0]
	for _, p := range c.retired {
		p.due = true
	}
	if c.attached && c.roundOut == 0 {
		c.drainNotifications()
		c.collectStates()
	}
	c.expireLeases()
	c.expireHolds()
	return c.Ready()
}

// Ready returns the reports and Work accumulated since the last Poll or
// Ready: what commands (Read, ...) and Done produced. It runs no round and
// reads no time, so call it after every command and Done.
func (c *Core) Ready() Ready {
	if c.attached {
		c.releaseTerminal()
		c.releaseRetired()
	}
	c.finishDirty()
	c.live.shrink()
	c.reqs.shrink()
	for e := range c.fenceWant {
		c.out.Fence = append(c.out.Fence, e)
	}
	slices.Sort(c.out.Fence)
	out := c.out
	out.Next = c.next()
	c.out = Ready{}
	return out
}

func (c *Core) drainInbox() {
	c.inBuf = c.inbox.take(c.inBuf)
	for i, in := range c.inBuf {
		switch in.kind {
		case inputHandshakeDone:
			if err := c.ConnectPeer(in.spec); err != nil {
				c.alert(Alert{Level: AlertWarn, Kind: "handshake_failed", Peer: in.spec.Name, Err: err})
				if c.shaking[in.spec.Name] == nil {
					c.failWaiting(in.spec.Name, err) // also when refused before any native call
				}
			}
		case inputHandshakeFailed:
			c.alert(Alert{Level: AlertWarn, Kind: "handshake_failed", Peer: in.peer, Err: in.err})
			c.failWaiting(in.peer, in.err)
		case inputFenced:
			c.applyFence(in.epoch)
		}
		c.inBuf[i] = input{}
	}
}

// drainNotifications asks for the notifications received; their result
// counts consumed notifications against their sends and written ones
// against their receives (noteNotification). Notifications of unknown
// requests are kept (bounded in number and age) for a send or receive not
// registered yet; those of a send or receive reported lately are dropped;
// other messages are ignored.
func (c *Core) drainNotifications() {
	if !c.desc.Capabilities.Notifications {
		return
	}
	c.expireEarly()
	c.emit(Work{Kind: WorkNotifications}, func(res Result, err error) {
		if err != nil {
			if err != errWorkFenced {
				c.alert(Alert{Level: AlertWarn, Kind: "notifications_failed", Err: err})
			}
			return
		}
		for _, n := range res.Notifications {
			if id, tok, ok := parseWritten(n.Message); ok {
				c.noteNotification(id, tok, n.From, true)
			} else if id, tok, ok := parseConsumed(n.Message); ok {
				c.noteNotification(id, tok, n.From, false)
			}
		}
	})
}

// collectStates asks which live handles changed state.
func (c *Core) collectStates() {
	if c.events && !c.resync {
		c.emit(Work{Kind: WorkEvents}, func(res Result, err error) {
			if err == errWorkFenced {
				return
			}
			if err != nil {
				// A drained batch may be lost with the reply: poll every
				// live handle next round to resynchronise.
				c.alert(Alert{Level: AlertWarn, Kind: "events_failed", Err: err})
				c.resync = true
			}
			for _, ev := range res.Events {
				if x := c.live.get(ev.Handle); x != nil {
					c.setState(x, ev.State, ev.Reason)
				}
			}
		})
		return
	}
	xs := c.xBuf[:0]
	for x := range c.live.all() {
		if !x.state.Terminal() && x.ref.Epoch == c.epoch {
			xs = append(xs, x)
		}
	}
	resync := c.resync
	c.pollHandles(xs, func(ok bool) {
		if ok && resync {
			c.resync = false
		}
	})
	clear(xs)
	c.xBuf = xs[:0]
}

// pollHandles polls xs in batches and applies their states. A poll error,
// for an item or a call, leaves the state unknown: never terminal (rule 1).
// Once every batch is reported, done learns whether every call succeeded.
func (c *Core) pollHandles(xs []*xfer, done func(ok bool)) {
	ok, left := true, 0
	each(len(xs), c.batch, func(lo, hi int) {
		left++
		batch := slices.Clone(xs[lo:hi])
		c.emit(Work{Kind: WorkPoll, Handles: handleIDs(batch)}, func(res Result, err error) {
			left--
			switch {
			case err == errWorkFenced:
				ok = false
			case err != nil:
				ok = false
				c.alert(Alert{Level: AlertWarn, Kind: "transfer_poll_failed", Err: err})
			default:
				for k, x := range batch {
					if k >= len(res.States) {
						ok = false
						c.alert(Alert{Level: AlertWarn, Kind: "transfer_poll_failed", Request: x.req.id, Handle: x.ref, Err: sdk.Errorf(sdk.CodeBackend, "transport returned %d states for %d handles", len(res.States), len(batch))})
						break
					}
					if e := res.States[k].Err; e != nil {
						c.alert(Alert{Level: AlertWarn, Kind: "transfer_poll_failed", Request: x.req.id, Handle: x.ref, Err: e})
						continue
					}
					c.setState(x, res.States[k].State, res.States[k].Reason)
				}
			}
			if left == 0 && done != nil {
				done(ok)
			}
		})
	})
}

// setState applies a state the transport reported for x. The first FAILED or
// CANCELED handle fails the request at once; the failure is reported only
// when every handle of the request is released (rule 3).
func (c *Core) setState(x *xfer, st sdk.State, reason error) {
	if x.flags&fGone != 0 || x.state.Terminal() || !st.Terminal() {
		return
	}
	x.state = st
	if st != sdk.StateDone {
		if reason == nil {
			reason = sdk.Errorf(sdk.CodeBackend, "handle %v ended %v", x.ref, st)
		}
		c.alert(Alert{Level: AlertWarn, Kind: "transfer_failed", Peer: x.peerName(), Request: x.req.id, Handle: x.ref, Err: reason})
		c.fail(x.req, reason)
	}
	c.queueRelease(x)
}

func (c *Core) queueRelease(x *xfer) {
	if x.flags&(fQueued|fGone) == 0 {
		x.flags |= fQueued
		c.releaseQ = append(c.releaseQ, x)
	}
}

// releaseTerminal hands out the Release of queued terminal handles. A
// handle whose Release fails stays tracked, with its blocks, and is retried
// next round (rule 2); one whose Release is outstanding stays held.
func (c *Core) releaseTerminal() {
	if len(c.releaseQ) == 0 || !c.attached {
		return
	}
	q := c.releaseQ
	c.releaseQ = nil
	each(len(q), c.batch, func(lo, hi int) {
		batch := q[lo:hi:hi]
		c.emit(Work{Kind: WorkRelease, Handles: handleIDs(batch)}, func(res Result, err error) {
			for k, x := range batch {
				if x.flags&fGone != 0 {
					continue
				}
				x.flags &^= fQueued
				if e := itemErr(res.Errs, k, err); e != nil && !isNotFound(e, err) {
					c.alert(Alert{Level: AlertWarn, Kind: "transfer_release_failed", Peer: x.peerName(), Request: x.req.id, Handle: x.ref, Err: e})
					if c.capPassed(x) { // its cap passed while the Release was under way (expireHolds)
						c.escalate(x)
						if x.flags&fGone != 0 {
							continue
						}
					}
					c.retryQ = append(c.retryQ, x)
					continue
				}
				c.gone(x, true)
			}
		})
	})
}

// handleIDs is the handle of each of xs, for a batched call.
func handleIDs(xs []*xfer) []sdk.HandleID {
	ids := make([]sdk.HandleID, len(xs))
	for k, x := range xs {
		ids[k] = x.ref.Handle
	}
	return ids
}

// gone stops tracking x: released (or fenced) when stopped is true, else
// forgotten by escalation while the transport may still hold it.
func (c *Core) gone(x *xfer, stopped bool) {
	x.flags |= fGone
	x.flags &^= fQueued
	c.live.remove(x)
	x.req.pending--
	c.markDirty(x.req)
	if stopped {
		if p := x.req.peer; p != nil {
			p.refs--
			p.due = p.due || (p.retired && p.refs == 0)
		}
	} else {
		c.leaked[x.ref] = x
	}
}

// finishDirty reports every touched request that has finished.
func (c *Core) finishDirty() {
	for i, r := range c.dirty {
		r.flags &^= rDirty
		c.tryFinish(r)
		c.dirty[i] = nil
	}
	c.dirty = shrink(c.dirty)
}

// tryFinish emits r's one terminal report if r has drained: no handle left,
// no handshake or fence awaited, for a send its consumers notified or its
// lease over, and for a receive its producers' writes reported or proven
// stopped (recvSettled). Blocks go back to the engine here and only here.
func (c *Core) tryFinish(r *request) {
	if r.kind == kindRecv && r.notified >= r.consumers {
		r.flags &^= rFenceWait // its producers reported their writes after all: no need to wait
	}
	if r.flags&(rReported|rWaiting) != 0 || r.pending > 0 || r.flags&rFenceWait != 0 {
		return
	}
	quarantine := false
	switch r.kind {
	case kindWrite, kindSend:
		if r.kind == kindWrite {
			c.notifyWritten(r)
		}
		over := r.flags&(rLeaseOver|rAbandoned) != 0
		if !over && (r.failed != nil || r.notified < r.consumers) {
			return
		}
	case kindRecv:
		q, done := c.recvSettled(r)
		if !done {
			return
		}
		quarantine = q
	}
	r.flags |= rReported
	c.reqs.remove(r)
	c.remember(r)
	receiving := r.kind == kindRead || r.kind == kindRecv
	switch r.kind {
	case kindWrite, kindSend:
		delete(c.sends, r.id)
		c.recent.add(recentKey{r.id, false})
	case kindRecv:
		defer delete(c.recvs, r.id)
		c.recent.add(recentKey{r.id, true})
	}
	var quarantined []BlockRef
	invalid := len(c.out.InvalidBlocks)
	for i := range r.xs {
		x := &r.xs[i]
		p := c.pool(x.pool)
		for _, b := range x.local() {
			if quarantine {
				p.owner[b] = OwnerQuarantined
			}
			if p.owner[b] == OwnerQuarantined {
				quarantined = append(quarantined, BlockRef{x.pool, b})
				continue
			}
			p.owner[b] = OwnerEngine
			if r.failed != nil && receiving {
				c.out.InvalidBlocks = append(c.out.InvalidBlocks, BlockRef{x.pool, b})
			}
		}
	}
	c.out.Quarantined = append(c.out.Quarantined, quarantined...)
	switch {
	case r.failed != nil:
		c.out.Failed = append(c.out.Failed, Failure{
			Request: r.id, Sending: !receiving, Reason: r.failed,
			TimedOut:    errors.Is(r.failed, ErrHoldCap) || errors.Is(r.failed, ErrLeaseExpired),
			Invalid:     slices.Clip(c.out.InvalidBlocks[invalid:]),
			Quarantined: slices.Clip(quarantined),
		})
	case r.kind == kindRead:
		c.notifyProducer(r)
		c.out.FinishedReceiving = append(c.out.FinishedReceiving, r.id)
	case r.kind == kindRecv:
		c.notifyConsumed(r, c.recvs[r.id])
		c.out.FinishedReceiving = append(c.out.FinishedReceiving, r.id)
	default:
		if r.notified < r.consumers {
			c.alert(Alert{Level: AlertWarn, Kind: "send_lease_expired", Peer: r.peerName(), Request: r.id, Err: sdk.Errorf(sdk.CodeTimeout, "%d of %d consumers notified before the lease expired", r.notified, r.consumers)})
		}
		c.out.FinishedSending = append(c.out.FinishedSending, r.id)
	}
}

// notifyProducer sends the consumed notification to each rank r read from.
func (c *Core) notifyProducer(r *request) {
	if r.flags&rNotify != 0 {
		c.notifyRanks(r, ConsumedMessage(r.id, r.token), "consumed_notification_failed")
	}
}

// notifyRanks sends msg once to each rank of r's peer that r's transfers
// moved bytes with, if the peer is still connected in this epoch; kind is
// the alert of a send that failed.
func (c *Core) notifyRanks(r *request, msg []byte, kind string) {
	p := r.peer
	if p == nil || p.retired || !c.attached || p.epoch != c.epoch {
		return
	}
	var ranks []int
	seen := make([]bool, len(p.ranks))
	for i := range r.xs {
		if rk := r.xs[i].rank; !seen[rk] {
			seen[rk] = true
			ranks = append(ranks, int(rk))
		}
	}
	c.notify(p, ranks, msg, kind, r.id)
}

// shrink empties a reused buffer, dropping its array when a burst left it
// much larger than a round needs, so memory follows what is in flight.
func shrink[T any](s []T) []T {
	if cap(s) > 4096 {
		return nil
	}
	return s[:0]
}
