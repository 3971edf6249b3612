package core

import (
	"fmt"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// RemovePeer closes the peer's session and retires it (rules 6 and 7, seed
// 002). Its requests fail with ErrPeerRemoved; their running handles are
// canceled and polled once ("wait" mode: the Cancel, then a Poll, in the
// next Ready); handles that stopped are released, the rest are retained with
// their blocks pinned (OwnerRetained) until they stop, bounded by the hold
// cap. Sends to the peer keep their blocks until their lease expires. The
// peer's dlists and native peer handles are released once no retained
// handle uses them. Completions of retired handles only ever finish their
// own (failed) requests, so a peer reconnected under the same name never
// sees them. Requests waiting for the peer's handshake fail at once, and a
// handshake under way is rolled back instead of published. Removing an
// unknown peer is an error that changes nothing.
func (c *Core) RemovePeer(now time.Time, name string) error {
	c.setNow(now)
	p := c.peers[name]
	hs := c.shaking[name]
	if p == nil && hs == nil && len(c.waiting[name]) == 0 {
		return fmt.Errorf("core: remove peer %q: not connected and nothing waits for it", name)
	}
	reason := fmt.Errorf("peer %q: %w", name, ErrPeerRemoved)
	c.failWaiting(name, reason)
	if hs != nil {
		hs.removed = true
	}
	if p != nil {
		c.retire(p, reason)
	}
	return nil
}

// retire unpublishes p, fails its requests and retains their running
// handles; the Cancel and Poll of those still running, and the release of
// what stopped, are in the next Ready.
func (c *Core) retire(p *peer, reason error) {
	delete(c.peers, p.name)
	p.retired = true
	p.due = true
	c.retired = append(c.retired, p)
	var held []*xfer
	for x := range c.live.all() {
		if x.req.peer == p {
			held = append(held, x)
		}
	}
	for r := range c.reqs.all() {
		if r.peer == p {
			c.fail(r, reason)
		}
	}
	for _, x := range held {
		x.flags |= fRetained
		c.pin(x, OwnerRetained)
		c.hold(x)
	}
	c.cancelAndPoll(p.name, held)
}

// cancelAndPoll hands out the Cancel of the handles of xs still running,
// then a Poll of them, so those that stopped are released at once.
func (c *Core) cancelAndPoll(peer string, xs []*xfer) {
	var running []*xfer
	for _, x := range xs {
		if !x.state.Terminal() {
			running = append(running, x)
		}
	}
	if len(running) == 0 {
		return
	}
	each(len(running), c.batch, func(lo, hi int) {
		batch := running[lo:hi:hi]
		c.emit(Work{Kind: WorkCancel, Handles: handleIDs(batch)}, func(res Result, err error) {
			if err == errWorkFenced {
				return
			}
			for k, x := range batch {
				if e := itemErr(res.Errs, k, err); e != nil {
					c.alert(Alert{Level: AlertWarn, Kind: "transfer_cancel_failed", Peer: peer, Request: x.req.id, Handle: x.ref, Err: e})
				}
			}
		})
	})
	c.pollHandles(running, nil)
}

// releaseRetired hands out the release of the dlists, then the native peer
// handles, of every retired peer no live handle references any more
// (poll_retired's second half), once per round and whenever the last
// handle of one is released. What fails stays and is retried next round.
func (c *Core) releaseRetired() {
	var due []*peer
	for _, p := range c.retired {
		if p.refs == 0 && p.due && !p.releasing {
			p.due, p.releasing = false, true
			due = append(due, p)
		}
	}
	if len(due) == 0 {
		return
	}
	var lists []sdk.DlistID
	var listAt []*rank
	var listPeer []*peer
	for _, p := range due {
		for ri := range p.ranks {
			if r := &p.ranks[ri]; r.dlist != 0 {
				lists = append(lists, r.dlist)
				listAt = append(listAt, r)
				listPeer = append(listPeer, p)
			}
		}
	}
	unload := func() {
		var ids []sdk.PeerID
		var idAt []*sdk.PeerID
		var idPeer []*peer
		for _, p := range due {
			for ri := range p.ranks {
				r := &p.ranks[ri]
				if r.dlist != 0 {
					continue
				}
				for _, id := range []*sdk.PeerID{&r.id, &r.notify} {
					if *id != 0 {
						ids = append(ids, *id)
						idAt = append(idAt, id)
						idPeer = append(idPeer, p)
					}
				}
			}
		}
		finish := func() {
			for _, p := range due {
				p.releasing = false
			}
			c.dropReleased()
		}
		if len(ids) == 0 {
			finish()
			return
		}
		c.emit(Work{Kind: WorkUnloadPeers, PeerIDs: ids}, func(res Result, err error) {
			if err != errWorkFenced {
				for k, id := range idAt {
					if e := itemErr(res.Errs, k, err); e != nil && !isNotFound(e, err) {
						c.alert(Alert{Level: AlertWarn, Kind: "peer_unload_failed", Peer: idPeer[k].name, Err: e})
						continue
					}
					*id = 0
				}
			}
			finish()
		})
	}
	if len(lists) == 0 {
		unload()
		return
	}
	c.emit(Work{Kind: WorkReleaseDescriptors, DlistIDs: lists}, func(res Result, err error) {
		if err == errWorkFenced {
			for _, p := range due {
				p.releasing = false
			}
			return
		}
		for k, r := range listAt {
			if e := itemErr(res.Errs, k, err); e != nil && !isNotFound(e, err) {
				c.alert(Alert{Level: AlertWarn, Kind: "peer_dlist_release_failed", Peer: listPeer[k].name, Err: e})
				continue
			}
			r.dlist = 0
		}
		unload()
	})
}

// dropReleased forgets the retired peers whose every native is released.
func (c *Core) dropReleased() {
	out := c.retired[:0]
	for _, p := range c.retired {
		if !p.released() {
			out = append(out, p)
		}
	}
	clear(c.retired[len(out):])
	c.retired = out
}

func (p *peer) released() bool {
	if p.reloading > 0 {
		return false
	}
	for _, r := range p.ranks {
		if r.id != 0 || r.dlist != 0 || r.notify != 0 {
			return false
		}
	}
	return true
}
