package core

import (
	"fmt"

	"github.com/custody-dev/custody/sdk"
)

// bind ties r to p and hands out the Post of its parts. A layout mismatch
// found only now (the request waited for the handshake) or a post failure
// fails r. While the Post is outstanding its parts count as pending and use
// p's dlists, so neither r nor p can be let go.
func (c *Core) bind(r *request, p *peer) {
	r.peer = p
	c.markDirty(r)
	for i := range r.xs {
		x := &r.xs[i]
		if err := c.checkRank(p, i, x.pool, int(x.rank), x.remote()); err != nil {
			c.fail(r, sdk.Errorf(sdk.CodeInvalidArgument, "request %q does not fit peer %q: %v", r.id, p.name, err))
			return
		}
	}
	if !c.attached || p.epoch != c.epoch {
		c.fail(r, ErrNotAttached)
		return
	}
	for i := range r.xs {
		if lp := c.pool(r.xs[i].pool); lp.epoch != c.epoch || lp.local == 0 {
			c.fail(r, fmt.Errorf("request %q part %d: pool %d is not registered in epoch %d: %w", r.id, i, lp.id, c.epoch, ErrNotAttached))
			return
		}
	}
	op := sdk.OpRead
	if r.kind == kindWrite {
		op = sdk.OpWrite
	}
	// The consumed notification of a one-part read rides with its transfer
	// when the rank allows it: the transport delivers it once the read is
	// DONE, and never if it fails, which is when core would send it.
	var ride []byte
	if r.flags&rNotify != 0 && len(r.xs) == 1 && p.ranks[r.xs[0].rank].rides() {
		ride = ConsumedMessage(r.id, r.token)
		r.flags &^= rNotify
	}
	each(len(r.xs), c.batch, func(lo, hi int) {
		posts := make([]sdk.PostSpec, hi-lo)
		for i := lo; i < hi; i++ {
			x := &r.xs[i]
			posts[i-lo] = sdk.PostSpec{Op: op, Local: c.pool(x.pool).local, LocalIndices: x.local(), Remote: p.ranks[x.rank].dlist, RemoteIndices: x.remote(), Notification: ride}
		}
		r.pending += int32(hi - lo)
		p.refs += hi - lo
		c.emit(Work{Kind: WorkPost, Posts: posts}, func(res Result, err error) { c.posted(r, p, lo, hi, res, err) })
	})
}

// posted applies the outcome of the Post of r's parts [lo, hi).
func (c *Core) posted(r *request, p *peer, lo, hi int, res Result, err error) {
	unposted := func(n int) {
		r.pending -= int32(n)
		p.refs -= n
		p.due = p.due || (p.retired && p.refs == 0)
		c.markDirty(r)
	}
	switch {
	case err == errWorkFenced:
		// The process died with whatever the call posted.
		unposted(hi - lo)
		c.fail(r, fmt.Errorf("post request %q: %w", r.id, err))
		return
	case err != nil && unknownOutcome(err):
		// Handles may exist that we cannot name: the blocks stay pinned
		// until the epoch is fenced.
		unposted(hi - lo)
		r.flags |= rFenceWait
		c.requestFence(c.epoch, Alert{Level: AlertError, Kind: "post_outcome_unknown", Peer: p.name, Request: r.id, Err: err})
		c.fail(r, fmt.Errorf("post request %q: %w: %w", r.id, ErrUnknownOutcome, err))
		return
	case err != nil:
		unposted(hi - lo)
		c.fail(r, fmt.Errorf("post request %q parts %d-%d: %w", r.id, lo, hi-1, err))
		return
	}
	var cancel []*xfer
	for k := lo; k < hi; k++ {
		var e error
		switch {
		case k-lo >= len(res.Posts):
			e = sdk.Errorf(sdk.CodeBackend, "transport returned %d results for %d posts", len(res.Posts), hi-lo)
		case res.Posts[k-lo].Err != nil:
			e = res.Posts[k-lo].Err
		}
		if e != nil {
			unposted(1)
			c.alert(Alert{Level: AlertWarn, Kind: "transfer_setup_failed", Peer: p.name, Request: r.id, Err: e})
			c.fail(r, fmt.Errorf("post request %q part %d: %w", r.id, k, e))
			continue
		}
		x := &r.xs[k]
		x.ref, x.state = Ref{c.epoch, res.Posts[k-lo].ID}, sdk.StateInProgress
		c.live.add(x)
		c.hold(x)
		if p.retired {
			// Its session closed while the Post was outstanding: retained,
			// like the handles that ran when the peer was removed (rule 6).
			x.flags |= fRetained
			c.pin(x, OwnerRetained)
			cancel = append(cancel, x)
		}
	}
	if len(cancel) > 0 {
		c.cancelAndPoll(p.name, cancel)
	}
}

// fail records r's first failure; it is reported once r drains.
func (c *Core) fail(r *request, reason error) {
	if r.failed == nil {
		r.failed = reason
	}
	c.markDirty(r)
}

// pin moves the blocks of x's part to owner o (OwnerRetained on retirement).
func (c *Core) pin(x *xfer, o Owner) {
	p := c.pool(x.pool)
	for _, b := range x.local() {
		if p.owner[b] != OwnerQuarantined {
			p.owner[b] = o
		}
	}
}
