package core

import (
	"fmt"

	"github.com/custody-dev/custody/sdk"
)

// Rule 15: a transport may connect to a peer lazily, on the first
// notification to it, and a first notification that was canceled or failed
// can leave the peer's connection unmade for good. So when the first
// notification handed out to a remote rank fails (an item error other than
// INVALID_ARGUMENT, which says the message itself was bad, or a call-level
// error: core cannot tell whether it arrived), the rank is marked stale.
// Before the next notification to it core loads the rank again from the
// metadata it connected with, and sends that notification, and every later
// one, to the new peer id.
//
// Only the first notification to a rank triggers this, at most once per
// connection: a later failure says nothing about the metadata, and each
// reload holds one more native peer handle until the peer is removed, so one
// per rank bounds them. A reload that fails leaves the rank stale (the
// notification it held goes to the old id) and is tried again before the
// next notification.
//
// The old peer id is left alone: the rank's remote dlist, and so its live
// handles, still name it, and UnloadPeers refuses a peer a dlist
// references. Both ids are the peer record's and are released together with
// its other natives once the peer is retired and no handle uses them (rule
// 7). The new id is recorded in the peer record as soon as Done reports it
// (rule 5); if the peer was removed meanwhile it is released with the
// retired peer's natives, and a reload whose outcome is unknown (the call
// timed out) fences the epoch, as a handshake's does.

// note is one notification to rank of a peer; first marks the first handed
// out to the rank.
type note struct {
	rank  int
	to    sdk.PeerID
	first bool
	msg   []byte
	kind  string // the Alert of a send that fails
	id    RequestID
}

// target is the peer id notifications to r go to.
func (r *rank) target() sdk.PeerID {
	if r.notify != 0 {
		return r.notify
	}
	return r.id
}

// notify sends msg to each of ranks of p (a connected peer of the attached
// epoch), alerting kind for each send that fails; a stale rank is reloaded
// first.
func (c *Core) notify(p *peer, ranks []int, msg []byte, kind string, id RequestID) {
	var notes []note
	for _, i := range ranks {
		rk := &p.ranks[i]
		n := note{rank: i, msg: msg, kind: kind, id: id}
		if rk.stale {
			rk.held = append(rk.held, n)
			c.reload(p, i)
			continue
		}
		n.to, n.first = rk.target(), !rk.sent
		rk.sent = true
		notes = append(notes, n)
	}
	c.sendNotes(p, notes)
}

// sendNotes hands out the sending of notes to p's ranks in batches.
func (c *Core) sendNotes(p *peer, notes []note) {
	each(len(notes), c.batch, func(lo, hi int) {
		batch := notes[lo:hi:hi]
		msgs := make([]sdk.OutboundNotification, len(batch))
		for k, n := range batch {
			msgs[k] = sdk.OutboundNotification{Peer: n.to, Message: n.msg}
		}
		c.emit(Work{Kind: WorkSendNotifications, Notes: msgs}, func(res Result, err error) {
			for k, n := range batch {
				e := itemErr(res.Errs, k, err)
				if e == nil {
					if rk := &p.ranks[n.rank]; n.to == rk.id && rk.id != 0 {
						rk.proven = true
					}
					continue
				}
				c.alert(Alert{Level: AlertWarn, Kind: n.kind, Peer: p.name, Request: n.id, Err: e})
				if n.first && err != errWorkFenced && sdk.CodeOf(e) != sdk.CodeInvalidArgument && c.connected(p) {
					p.ranks[n.rank].stale = true
				}
			}
		})
	})
}

// rides reports whether a notification to r may ride with a transfer on
// r's dlist (sdk.PostSpec.Notification, which goes to the dlist's peer id)
// instead of a SendNotifications call of its own: once one sent to that id
// went through, while no reload is due (stale, which a reload in progress
// is too) and none replaced the id for notifications (notify). A ride's
// failure is invisible to core (the transport delivers the notification
// once the transfer is DONE, and never otherwise), so the first
// notification to a rank, whose failure rule 15 watches for, never rides.
func (r *rank) rides() bool {
	return r.proven && r.notify == 0 && !r.stale
}

// connected reports whether p is published in the attached epoch.
func (c *Core) connected(p *peer) bool {
	return !p.retired && c.attached && p.epoch == c.epoch
}

// reload loads rank i of p again from its metadata, then sends the
// notifications held for it: to the new id, or to the old one if the
// reload failed.
func (c *Core) reload(p *peer, i int) {
	rk := &p.ranks[i]
	if rk.reloading {
		return
	}
	rk.reloading = true
	p.reloading++
	spec := sdk.PeerSpec{Name: rk.spec.Agent, Metadata: rk.spec.Metadata}
	c.emit(Work{Kind: WorkLoadPeers, Peers: []sdk.PeerSpec{spec}}, func(res Result, err error) {
		rk.reloading = false
		p.reloading--
		callErr := err
		if err == nil {
			if len(res.PeerResults) == 0 {
				err = sdk.Errorf(sdk.CodeBackend, "transport returned 0 results for 1 peer")
			} else if err = res.PeerResults[0].Err; err == nil {
				// The peer record owns it from here (rule 5).
				rk.notify, rk.stale = res.PeerResults[0].ID, false
				p.due = p.due || p.retired
			}
		}
		if err != nil && err != errWorkFenced {
			err = fmt.Errorf("reload rank %d (agent %q) of peer %q from its metadata: %w", i, rk.spec.Agent, p.name, err)
			if callErr != nil && unknownOutcome(callErr) {
				c.requestFence(c.epoch, Alert{Level: AlertError, Kind: "peer_reload_outcome_unknown", Peer: p.name, Err: err})
			} else {
				c.alert(Alert{Level: AlertWarn, Kind: "peer_reload_failed", Peer: p.name, Err: err})
			}
		}
		held := rk.held
		rk.held = nil
		if !c.connected(p) {
			for _, n := range held {
				c.alert(Alert{Level: AlertWarn, Kind: n.kind, Peer: p.name, Request: n.id, Err: fmt.Errorf("peer %q was removed or fenced while rank %d was reloaded: %w", p.name, i, ErrPeerRemoved)})
			}
			return
		}
		for k := range held {
			held[k].to = rk.target()
		}
		c.sendNotes(p, held)
	})
}
