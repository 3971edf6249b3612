package core

import (
	"context"
	"fmt"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// Close tears down in the order rule 12 requires: sessions first (every peer
// is removed, so its transfers are canceled, retained and retired, and
// requests waiting for a handshake fail), then handshake leftovers, then
// the pools' dlists and registrations, and only then the transport. Sends
// and receives fail: the engine is going away. Their blocks come back only
// once no peer can reach them: a send's once its pools are deregistered
// where the fence scope is FenceInitiatedAndIncoming, else at its lease; a
// receive's as ExpectReceive says. With no transport attached (its epoch
// fenced and none attached again) Close only fails the requests waiting
// for a handshake. If anything is still held, Close
// releases what it can and returns an error wrapping ErrHeld; keep calling
// Poll (the hold cap bounds the wait) and call Close again. Reports Close
// produced are returned by the next Poll.
func (c *Core) Close(ctx context.Context, now time.Time) error {
	c.setNow(now)
	if c.closed {
		return nil
	}
	if c.tr == nil {
		// Fenced and not attached again: nothing native is left, but requests
		// waiting for a handshake would never be reported otherwise.
		for name := range c.waiting {
			c.failWaiting(name, fmt.Errorf("core closing: %w", ErrPeerRemoved))
		}
		c.closed = true
		return nil
	}
	for _, p := range c.peers {
		c.retire(ctx, p, fmt.Errorf("core closing: %w", ErrPeerRemoved))
	}
	for name := range c.waiting {
		c.failWaiting(name, fmt.Errorf("core closing: %w", ErrPeerRemoved))
	}
	// Sends fail, but a consumer may read their blocks while their pool is
	// registered: they are abandoned (reported without their lease) only
	// once releasePools below deregistered it and the fence covers incoming
	// transfers; otherwise they wait for their lease.
	for _, r := range c.sends {
		c.fail(r, fmt.Errorf("core closing: %w", ErrPeerRemoved))
	}
	// Receives fail too; deregistering their pool below is what stops their
	// producers where the fence covers incoming transfers (ExpectReceive).
	for _, rv := range c.recvs {
		rv.r.flags |= rAbandoned
		c.fail(rv.r, fmt.Errorf("core closing: %w", ErrPeerRemoved))
	}
	c.releaseTerminal(ctx)
	c.releaseRetired(ctx)
	for name := range c.journal {
		_ = c.rollback(ctx, name, 0)
	}
	s := c.Stats()
	if s.Live > 0 || s.RetiredPeers > 0 || s.Journal > 0 || s.Leaked > 0 {
		return fmt.Errorf("core: close epoch %d: %d handles (%d retained), %d retired peers, %d journal entries and %d force-released handles still held: %w; keep calling Poll and call Close again (force-released handles go only with a fence)",
			c.epoch, s.Live, s.Retained, s.RetiredPeers, s.Journal, s.Leaked, ErrHeld)
	}
	err := c.releasePools(ctx)
	for _, rv := range c.recvs {
		c.markDirty(rv.r) // reported by the next Poll, now that their pool may be deregistered
	}
	if c.desc.FenceScope == sdk.FenceInitiatedAndIncoming {
		for _, r := range c.sends {
			if c.deregistered(r) {
				r.flags |= rAbandoned
				c.markDirty(r)
			}
		}
	}
	if err != nil {
		return fmt.Errorf("core: close epoch %d: %w", c.epoch, err)
	}
	if err := c.tr.Close(ctx); err != nil {
		return fmt.Errorf("core: close epoch %d: close the transport: %w", c.epoch, err)
	}
	c.tr, c.events, c.closed = nil, nil, true
	return nil
}

// deregistered reports whether every pool r's blocks live in is registered
// in no epoch any more, so no consumer can reach them.
func (c *Core) deregistered(r *request) bool {
	for i := range r.xs {
		if c.pool(r.xs[i].pool).region != 0 {
			return false
		}
	}
	return true
}

// releasePools releases every pool's local dlist, then its registration;
// what fails stays recorded for the next Close.
func (c *Core) releasePools(ctx context.Context) error {
	var lists []sdk.DlistID
	var listPool []*pool
	for _, p := range c.pools {
		if p.local != 0 {
			lists = append(lists, p.local)
			listPool = append(listPool, p)
		}
	}
	var firstErr error
	if len(lists) > 0 {
		errs, err := c.tr.ReleaseDescriptors(ctx, lists)
		for k, p := range listPool {
			if e := itemErr(errs, k, err); e != nil && !isNotFound(e, err) {
				firstErr = cmp(firstErr, fmt.Errorf("release pool %d's local dlist: %w", p.id, e))
				continue
			}
			p.local = 0
		}
	}
	var regions []sdk.RegionID
	var regPool []*pool
	for _, p := range c.pools {
		if p.local == 0 && p.region != 0 {
			regions = append(regions, p.region)
			regPool = append(regPool, p)
		}
	}
	for _, s := range c.strayRg {
		regions = append(regions, s.region)
	}
	if len(regions) > 0 {
		errs, err := c.tr.DeregisterMemory(ctx, regions)
		stray := c.strayRg[:0]
		for k := range regions {
			e := itemErr(errs, k, err)
			failed := e != nil && !isNotFound(e, err)
			if failed {
				firstErr = cmp(firstErr, fmt.Errorf("deregister region %d: %w", regions[k], e))
			}
			if k < len(regPool) {
				if !failed {
					regPool[k].region, regPool[k].epoch = 0, 0
				}
			} else if failed {
				stray = append(stray, c.strayRg[k-len(regPool)])
			}
		}
		c.strayRg = stray
	}
	return firstErr
}
