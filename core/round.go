package core

import (
	"context"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// Poll runs one round and returns what it produced. In order it: drains the
// Inbox (handshakes, fences); drains consumer notifications; learns handle
// state changes (from the transport's EventSource when it has one, so the
// round's cost follows the number of changes, else by polling every live
// handle in batches); releases terminal handles (a failed Release keeps the
// handle and its blocks, retried next round); releases the natives of
// retired peers no handle uses any more (poll_retired); expires leases;
// escalates handles held past the cap; and reports every request that
// finished. Transport failures never abort a round: they become Alerts and
// the work is retried next round. Every transport call uses ctx, which
// should carry the round's deadline.
func (c *Core) Poll(ctx context.Context, now time.Time) Ready {
	c.setNow(now)
	c.drainInbox(ctx)
	if c.tr != nil {
		c.drainNotifications(ctx)
		c.collectStates(ctx)
		c.releaseTerminal(ctx)
		c.releaseRetired(ctx)
	}
	c.expireLeases()
	c.expireHolds()
	c.finishDirty(ctx)
	c.live.shrink()
	c.reqs.shrink()
	for e := range c.fenceWant {
		c.out.Fence = append(c.out.Fence, e)
	}
	out := c.out
	c.out = Ready{}
	return out
}

func (c *Core) drainInbox(ctx context.Context) {
	c.inBuf = c.inbox.take(c.inBuf)
	for i, in := range c.inBuf {
		switch in.kind {
		case inputHandshakeDone:
			if err := c.ConnectPeer(ctx, in.spec); err != nil {
				c.alert(Alert{Level: AlertWarn, Kind: "handshake_failed", Peer: in.spec.Name, Err: err})
				c.failWaiting(in.spec.Name, err) // also when refused before any native call
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

// drainNotifications counts consumed notifications against their sends and
// written notifications against their receives (noteNotification).
// Notifications of unknown requests are kept (bounded in number and age)
// for a send or receive not registered yet; those of a send or receive
// reported lately are dropped; other messages are ignored.
func (c *Core) drainNotifications(ctx context.Context) {
	if !c.desc.Capabilities.Notifications {
		return
	}
	c.expireEarly()
	ns, err := c.tr.Notifications(ctx, 0)
	if err != nil {
		c.alert(Alert{Level: AlertWarn, Kind: "notifications_failed", Err: err})
		return
	}
	for _, n := range ns {
		if id, ok := parseWritten(n.Message); ok {
			c.noteNotification(id, n.From, true)
		} else if id, ok := parseConsumed(n.Message); ok {
			c.noteNotification(id, n.From, false)
		}
	}
}

// collectStates learns which live handles changed state.
func (c *Core) collectStates(ctx context.Context) {
	if c.events != nil && !c.resync {
		evs, err := c.events.Events(ctx, 0)
		if err != nil {
			// A drained batch may be lost with the reply: poll every live
			// handle once to resynchronise.
			c.alert(Alert{Level: AlertWarn, Kind: "events_failed", Err: err})
			c.resync = true
		}
		for _, ev := range evs {
			if x := c.live.get(ev.Handle); x != nil {
				c.setState(x, ev.State, ev.Reason)
			}
		}
		if !c.resync {
			return
		}
	}
	xs := c.xBuf[:0]
	for x := range c.live.all() {
		if !x.state.Terminal() && x.ref.Epoch == c.epoch {
			xs = append(xs, x)
		}
	}
	if c.pollHandles(ctx, xs) {
		c.resync = false
	}
	clear(xs)
	c.xBuf = xs[:0]
}

// pollHandles polls xs in batches and applies their states. A poll error,
// for an item or a call, leaves the state unknown: never terminal (rule 1).
// It reports whether every call succeeded.
func (c *Core) pollHandles(ctx context.Context, xs []*xfer) bool {
	ok := true
	ids := make([]sdk.HandleID, 0, min(len(xs), c.batch))
	each(len(xs), c.batch, func(lo, hi int) {
		ids = ids[:0]
		for _, x := range xs[lo:hi] {
			ids = append(ids, x.ref.Handle)
		}
		sts, err := c.tr.Poll(ctx, ids)
		if err != nil {
			ok = false
			c.alert(Alert{Level: AlertWarn, Kind: "transfer_poll_failed", Err: err})
			return
		}
		for k, x := range xs[lo:hi] {
			if k >= len(sts) {
				break
			}
			if sts[k].Err != nil {
				c.alert(Alert{Level: AlertWarn, Kind: "transfer_poll_failed", Request: x.req.id, Handle: x.ref, Err: sts[k].Err})
				continue
			}
			c.setState(x, sts[k].State, sts[k].Reason)
		}
	})
	return ok
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

// releaseTerminal releases queued terminal handles. A handle whose Release
// fails stays tracked, with its blocks, and is retried next round (rule 2).
func (c *Core) releaseTerminal(ctx context.Context) {
	if len(c.releaseQ) == 0 || c.tr == nil {
		return
	}
	q := c.releaseQ
	keep := q[:0]
	ids := c.idBuf[:0]
	each(len(q), c.batch, func(lo, hi int) {
		ids = ids[:0]
		for _, x := range q[lo:hi] {
			ids = append(ids, x.ref.Handle)
		}
		errs, err := c.tr.Release(ctx, ids)
		for k, x := range q[lo:hi] {
			if x.flags&fGone != 0 {
				continue
			}
			if e := itemErr(errs, k, err); e != nil && !isNotFound(e, err) {
				c.alert(Alert{Level: AlertWarn, Kind: "transfer_release_failed", Peer: x.peerName(), Request: x.req.id, Handle: x.ref, Err: e})
				keep = append(keep, x)
				continue
			}
			c.gone(x, true)
		}
	})
	clear(q[len(keep):])
	c.releaseQ = keep
	c.idBuf = ids[:0]
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
		x.req.peer.refs--
	} else {
		c.leaked[x.ref] = x
	}
}

// finishDirty reports every touched request that has finished.
func (c *Core) finishDirty(ctx context.Context) {
	for i, r := range c.dirty {
		r.flags &^= rDirty
		c.tryFinish(ctx, r)
		c.dirty[i] = nil
	}
	c.dirty = shrink(c.dirty)
}

// tryFinish emits r's one terminal report if r has drained: no handle left,
// no handshake or fence awaited, for a send its consumers notified or its
// lease over, and for a receive its producers' writes reported or proven
// stopped (recvSettled). Blocks go back to the engine here and only here.
func (c *Core) tryFinish(ctx context.Context, r *request) {
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
			c.notifyWritten(ctx, r)
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
		c.out.Failed = append(c.out.Failed, Failure{Request: r.id, Sending: !receiving, Reason: r.failed})
	case r.kind == kindRead:
		c.notifyProducer(ctx, r)
		c.out.FinishedReceiving = append(c.out.FinishedReceiving, r.id)
	case r.kind == kindRecv:
		c.notifyConsumed(ctx, r, c.recvs[r.id])
		c.out.FinishedReceiving = append(c.out.FinishedReceiving, r.id)
	default:
		if r.notified < r.consumers {
			c.alert(Alert{Level: AlertWarn, Kind: "send_lease_expired", Peer: r.peerName(), Request: r.id, Err: sdk.Errorf(sdk.CodeTimeout, "%d of %d consumers notified before the lease expired", r.notified, r.consumers)})
		}
		c.out.FinishedSending = append(c.out.FinishedSending, r.id)
	}
}

// notifyProducer sends the consumed notification to each rank r read from.
func (c *Core) notifyProducer(ctx context.Context, r *request) {
	if r.flags&rNotify != 0 {
		c.notifyRanks(ctx, r, ConsumedMessage(r.id), "consumed_notification_failed")
	}
}

// notifyRanks sends msg once to each rank of r's peer that r's transfers
// moved bytes with, if the peer is still connected in this epoch; kind is
// the alert of a send that failed.
func (c *Core) notifyRanks(ctx context.Context, r *request, msg []byte, kind string) {
	p := r.peer
	if p == nil || p.retired || c.tr == nil || p.epoch != c.epoch {
		return
	}
	var msgs []sdk.OutboundNotification
	seen := make([]bool, len(p.ranks))
	for i := range r.xs {
		if rk := r.xs[i].rank; !seen[rk] {
			seen[rk] = true
			msgs = append(msgs, sdk.OutboundNotification{Peer: p.ranks[rk].id, Message: msg})
		}
	}
	c.send(ctx, msgs, kind, p.name, r.id)
}

// shrink empties a reused buffer, dropping its array when a burst left it
// much larger than a round needs, so memory follows what is in flight.
func shrink[T any](s []T) []T {
	if cap(s) > 4096 {
		return nil
	}
	return s[:0]
}
