package core

import (
	"fmt"

	"github.com/custody-dev/custody/sdk"
)

// applyFence makes everything of a fenced epoch terminal: its process is
// dead, so no transfer of it moves a byte any more and every native resource
// of it is gone. Requests fail with ErrFenced unless already ended; their
// blocks are safe and are reported by the next round.
func (c *Core) applyFence(e Epoch) {
	if e == 0 || e > c.maxEpoch {
		return
	}
	delete(c.fenceWant, e)
	reason := fmt.Errorf("epoch %d: %w", e, ErrFenced)
	for x := range c.live.all() {
		if x.ref.Epoch != e {
			continue
		}
		if !x.state.Terminal() {
			x.state = sdk.StateFailed
			c.fail(x.req, reason)
		}
		c.gone(x, true)
	}
	c.releaseQ = dropGone(c.releaseQ)
	c.retryQ = dropGone(c.retryQ)
	for ref := range c.leaked {
		if ref.Epoch == e {
			delete(c.leaked, ref)
		}
	}
	incoming := c.desc.FenceScope == sdk.FenceInitiatedAndIncoming
	for r := range c.reqs.all() {
		if r.flags&rFenceWait != 0 && r.peer != nil && r.peer.epoch == e {
			r.flags &^= rFenceWait
			c.markDirty(r)
		}
		if r.peer != nil && r.peer.epoch == e {
			c.fail(r, reason)
		}
		// A send's blocks were reachable only through this epoch's
		// registration; with an incoming fence no consumer reads them now.
		if r.kind == kindSend && incoming && c.pool(r.xs[0].pool).epoch == e {
			r.flags |= rAbandoned
			c.fail(r, reason)
		}
	}
	for name, p := range c.peers {
		if p.epoch == e {
			delete(c.peers, name)
		}
	}
	keepP := c.retired[:0]
	for _, p := range c.retired {
		if p.epoch != e {
			keepP = append(keepP, p)
		}
	}
	clear(c.retired[len(keepP):])
	c.retired = keepP
	for name, j := range c.journal {
		out := j[:0]
		for _, en := range j {
			if en.epoch != e {
				out = append(out, en)
			}
		}
		if len(out) == 0 {
			delete(c.journal, name)
		} else {
			c.journal[name] = out
		}
	}
	for _, p := range c.pools {
		if p.epoch == e {
			p.epoch, p.region, p.local = 0, 0, 0
		}
	}
	stray := c.strayRg[:0]
	for _, s := range c.strayRg {
		if s.epoch != e {
			stray = append(stray, s)
		}
	}
	c.strayRg = stray
	if e == c.epoch && c.attached {
		c.attached, c.events = false, false
	}
	// Calls of the epoch under way died with its process.
	c.abortWork(e)
}

func dropGone(q []*xfer) []*xfer {
	keep := q[:0]
	for _, x := range q {
		if x.flags&fGone == 0 {
			keep = append(keep, x)
		}
	}
	clear(q[len(keep):])
	return keep
}
