package core

import (
	"fmt"
	"slices"
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
// fenced and none attached again) Close fails the requests waiting for a
// handshake and waits for the rest to be reported. If anything is still
// held, or a request is not reported yet, Close releases what it can and
// returns an error wrapping ErrHeld; keep calling Poll (the hold cap and
// the leases bound the wait) and call Close again. Reports Close produced
// are returned by the next Ready; Close returns nil only once every
// request it took is reported (rule 16), and takes none from its first
// call on.
func (c *Core) Close(now time.Time) error {
	c.setNow(now)
	if c.closed {
		return nil
	}
	if !c.attached {
		// Fenced and not attached again: nothing native is left, but requests
		// waiting for a handshake would never be reported otherwise.
		for _, name := range sortedKeys(c.waiting) {
			c.failWaiting(name, fmt.Errorf("core closing: %w", ErrPeerRemoved))
		}
		c.closing = true
		if err := c.unreported(); err != nil {
			return err
		}
		c.closed = true
		return nil
	}
	if !c.closing {
		c.closing = true
		reason := fmt.Errorf("core closing: %w", ErrPeerRemoved)
		for _, name := range sortedKeys(c.peers) {
			c.retire(c.peers[name], reason)
		}
		for _, hs := range c.shaking {
			hs.removed = true
		}
		for _, name := range sortedKeys(c.waiting) {
			c.failWaiting(name, reason)
		}
		// Sends fail, but a consumer may read their blocks while their pool
		// is registered: they are abandoned (reported without their lease)
		// only once releasePools below deregistered it and the fence covers
		// incoming transfers; otherwise they wait for their lease.
		for _, id := range sortedKeys(c.sends) {
			c.fail(c.sends[id], reason)
		}
		// Receives fail too; deregistering their pool below is what stops
		// their producers where the fence covers incoming transfers
		// (ExpectReceive).
		for _, id := range sortedKeys(c.recvs) {
			rv := c.recvs[id]
			rv.r.flags |= rAbandoned
			c.fail(rv.r, reason)
		}
	}
	for _, name := range sortedKeys(c.journal) {
		if !c.rolling[name] && c.shaking[name] == nil {
			c.rollback(name, 0, func(error) {})
		}
	}
	s := c.Stats()
	if s.Live > 0 || s.RetiredPeers > 0 || s.Journal > 0 || s.Leaked > 0 || len(c.shaking) > 0 || c.outstandingLive() > 0 {
		return fmt.Errorf("core: close epoch %d: %d handles (%d retained), %d retired peers, %d journal entries, %d handshakes, %d calls under way and %d force-released handles still held: %w; keep calling Poll and call Close again (force-released handles go only with a fence)",
			c.epoch, s.Live, s.Retained, s.RetiredPeers, s.Journal, len(c.shaking), c.outstandingLive(), s.Leaked, ErrHeld)
	}
	if err := c.closeErr; err != nil {
		// The last attempt failed: say so once, and retry on the next Close.
		c.closeErr = nil
		return fmt.Errorf("core: close epoch %d: %w", c.epoch, err)
	}
	if c.poolsHeld() {
		c.releasePools()
		return fmt.Errorf("core: close epoch %d: releasing the pools' dlists and registrations: %w; call Close again once the Work is done", c.epoch, ErrHeld)
	}
	if err := c.unreported(); err != nil {
		return err
	}
	c.emit(Work{Kind: WorkClose}, func(_ Result, err error) {
		switch {
		case err == errWorkFenced:
		case err != nil:
			c.closeErr = fmt.Errorf("close the transport: %w", err)
		default:
			c.attached, c.events, c.closed = false, false, true
		}
	})
	return fmt.Errorf("core: close epoch %d: closing the transport: %w; call Close again once the Work is done", c.epoch, ErrHeld)
}

// unreported holds Close while a request is not reported yet (rule 16): a
// send whose consumers may still read its blocks (the fence does not cover
// incoming transfers) waits for its lease, which Poll expires; a request
// failed by Close itself is reported by the next Ready.
func (c *Core) unreported() error {
	if n := c.reqs.len(); n > 0 {
		return fmt.Errorf("core: close epoch %d: %d requests not reported yet (sends wait for their lease where the fence does not cover incoming transfers): %w; take Ready, keep calling Poll and call Close again", c.epoch, n, ErrHeld)
	}
	return nil
}

// poolsHeld reports whether a pool's dlist or registration, or a stray
// registration, is still held.
func (c *Core) poolsHeld() bool {
	for _, p := range c.pools {
		if p.local != 0 || p.region != 0 {
			return true
		}
	}
	return len(c.strayRg) > 0
}

// sortedKeys is m's keys in order: whatever a loop over a map hands out
// (reports, Work) must not depend on Go's random map order, so that the same
// inputs give the same Ready.
func sortedKeys[K ~string, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
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

// releasePools hands out the release of every pool's local dlist, then its
// registration; what fails stays recorded for the next Close, which
// returns the first failure (closeErr).
func (c *Core) releasePools() {
	var lists []sdk.DlistID
	var listPool []*pool
	for _, p := range c.pools {
		if p.local != 0 {
			lists = append(lists, p.local)
			listPool = append(listPool, p)
		}
	}
	var firstErr error
	dereg := func() {
		var regions []sdk.RegionID
		var regPool []*pool
		for _, p := range c.pools {
			if p.local == 0 && p.region != 0 {
				regions = append(regions, p.region)
				regPool = append(regPool, p)
			}
		}
		stray := slices.Clone(c.strayRg)
		for _, s := range stray {
			regions = append(regions, s.region)
		}
		done := func() {
			c.closeErr = firstErr
			for _, id := range sortedKeys(c.recvs) {
				c.markDirty(c.recvs[id].r) // reported now that their pool may be deregistered
			}
			if c.desc.FenceScope == sdk.FenceInitiatedAndIncoming {
				for _, id := range sortedKeys(c.sends) {
					if r := c.sends[id]; c.deregistered(r) {
						r.flags |= rAbandoned
						c.markDirty(r)
					}
				}
			}
		}
		if len(regions) == 0 {
			done()
			return
		}
		c.emit(Work{Kind: WorkDeregisterMemory, RegionIDs: regions}, func(res Result, err error) {
			if err == errWorkFenced {
				return
			}
			var keep []strayRegion
			for k := range regions {
				e := itemErr(res.Errs, k, err)
				failed := e != nil && !isNotFound(e, err)
				if failed {
					firstErr = firstErrOf(firstErr, fmt.Errorf("deregister region %d: %w", regions[k], e))
				}
				if k < len(regPool) {
					if !failed {
						regPool[k].region, regPool[k].epoch = 0, 0
					}
				} else if failed {
					keep = append(keep, stray[k-len(regPool)])
				}
			}
			c.strayRg = keep
			done()
		})
	}
	if len(lists) == 0 {
		dereg()
		return
	}
	c.emit(Work{Kind: WorkReleaseDescriptors, DlistIDs: lists}, func(res Result, err error) {
		if err == errWorkFenced {
			return
		}
		for k, p := range listPool {
			if e := itemErr(res.Errs, k, err); e != nil && !isNotFound(e, err) {
				firstErr = firstErrOf(firstErr, fmt.Errorf("release pool %d's local dlist: %w", p.id, e))
				continue
			}
			p.local = 0
		}
		dereg()
	})
}
