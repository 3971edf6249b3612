package core

import (
	"slices"

	"github.com/custody-dev/custody/sdk"
)

// The explorer's invariants, each a rule of docs/guarantees.md, checked
// against the world's ground truth (what each double really holds and
// what each handle really touches), never against core's own records.

// checkWork checks Work as core hands it out: no fenced epoch, and no id
// its epoch did not issue (rule 14), no Release of a handle still running
// (rule 1), no Unload, ReleaseDescriptors or Deregister of what a handle
// (force-released ones too) or dlist still uses (rules 7 and 12), no
// written or consumed notification early or after a failure (rule 4), and
// Close last (rule 12).
func (w *world) checkWork(wk Work) {
	if w.dead[wk.Epoch] || wk.Epoch != w.epoch {
		w.fail("rule 14: work %d (%v) is for epoch %d, fenced or not attached (attached: %d)", wk.ID, wk.Kind, wk.Epoch, w.epoch)
		return
	}
	w.checkIDs(wk)
	w.checkResend(wk)
	d := w.ds[wk.Epoch]
	// A handle force-released by escalation (its blocks quarantined) still
	// uses what it used: the transport holds it until a fence.
	uses := func(pred func(p *wpost) bool) sdk.HandleID {
		for _, h := range d.live() {
			if p := w.touch[wk.Epoch][h]; p != nil && !p.orphan && pred(p) {
				return h
			}
		}
		return 0
	}
	switch wk.Kind {
	case WorkRelease:
		for _, h := range wk.Handles {
			if st, ok := d.handles[h]; ok && !st.Terminal() {
				w.fail("rule 1: work %d releases handle %d, which is %v", wk.ID, h, st)
			}
		}
	case WorkUnloadPeers:
		for _, p := range wk.PeerIDs {
			if h := uses(func(x *wpost) bool { return w.dlists[wk.Epoch][x.remote].peer == p }); h != 0 {
				w.fail("rule 7: work %d unloads peer %d while handle %d uses its dlist", wk.ID, p, h)
			}
			for l := range d.dlists {
				if x := w.dlists[wk.Epoch][l]; x.peer == p && !x.orphan {
					w.fail("rule 12: work %d unloads peer %d before its dlist %d is released", wk.ID, p, l)
				}
			}
		}
	case WorkReleaseDescriptors:
		for _, l := range wk.DlistIDs {
			if h := uses(func(x *wpost) bool { return x.local == l || x.remote == l }); h != 0 {
				w.fail("rule 7: work %d releases dlist %d while handle %d uses it", wk.ID, l, h)
			}
		}
	case WorkDeregisterMemory:
		for _, r := range wk.RegionIDs {
			pool := w.regions[wk.Epoch][r]
			for l := range d.dlists {
				if x := w.dlists[wk.Epoch][l]; x.peer == 0 && x.pool == pool && !x.orphan {
					w.fail("rule 12: work %d deregisters region %d before its dlist %d is released", wk.ID, r, l)
				}
			}
		}
	case WorkSendNotifications:
		w.checkNotes(wk)
	case WorkPost:
		w.checkRides(wk)
	case WorkClose:
		if h := uses(func(*wpost) bool { return true }); h != 0 {
			w.fail("rule 12: work %d closes the transport while handle %d is held", wk.ID, h)
		}
		// What a call that timed out created is no one's to release: the
		// fence asked for with it (checkOwners) ends it, Close or not.
		if !w.orphans[wk.Epoch] && (len(d.dlists) > 0 || len(d.peers) > 0) {
			w.fail("rule 12: work %d closes the transport with %d dlists and %d peers held", wk.ID, len(d.dlists), len(d.peers))
		}
	}
}

// checkNotes checks the notifications of wk (rule 4 and core's doc): a
// push's written notification only once every part of it is DONE and
// released, never after a failure; a receive's consumed notification only
// once every producer said written, never after a failure.
func (w *world) checkNotes(wk Work) {
	for _, n := range wk.Notes {
		id, _, written := parseWritten(n.Message)
		if !written {
			var ok bool
			if id, _, ok = parseConsumed(n.Message); !ok {
				continue
			}
		}
		r := w.issued[id]
		if r == nil {
			continue
		}
		switch {
		case written && r.kind == "write", !written && r.kind == "read":
			if r.mustFail || r.done < len(r.blocks) || w.touches(r) != 0 {
				w.fail("rule 4: work %d notifies %q of %s %q with %d of its %d parts done (bound to fail: %v, a handle unreleased: %v)", wk.ID, n.Message, r.kind, id, r.done, len(r.blocks), r.mustFail, w.touches(r) != 0)
			}
		case !written && r.kind == "recv":
			if r.mustFail || len(r.notified) < w.cfg.ranks {
				w.fail("rule 4: work %d notifies %q of receive %q with %d of its %d producers' written notifications (bound to fail: %v)", wk.ID, n.Message, id, len(r.notified), w.cfg.ranks, r.mustFail)
			}
		}
	}
}

// checkRides checks the notifications a Post asks the transport to deliver
// once a transfer is DONE (rule 4, and the engine API's notify_producer):
// only the consumed notification of a one-part read with NotifyProducer,
// on its own transfer. The transport delivers it at that transfer's DONE,
// whatever else happens, so on a read of several parts it would free the
// producer's blocks while a sibling may still fail or run.
func (w *world) checkRides(wk Work) {
	for _, ps := range wk.Posts {
		if len(ps.Notification) == 0 {
			continue
		}
		id, _, ok := parseConsumed(ps.Notification)
		r := w.issued[id]
		switch {
		case !ok || r == nil:
			w.fail("rule 4: work %d posts a transfer carrying %q, not the consumed notification of a read", wk.ID, ps.Notification)
		case r.kind != "read" || !r.notify || len(r.blocks) != 1:
			w.fail("rule 4: work %d posts a transfer carrying the consumed notification of %s %q of %d parts (notify_producer %v): only a one-part read's may ride", wk.ID, r.kind, id, len(r.blocks), r.notify)
		}
	}
}

// touches is a handle of a live transport over r's blocks, or 0.
func (w *world) touches(r *wreq) sdk.HandleID {
	for e, d := range w.ds {
		if w.dead[e] {
			continue
		}
		for _, h := range d.live() {
			if p := w.touch[e][h]; p != nil && slices.ContainsFunc(p.blocks, func(b BlockRef) bool { return slices.Contains(r.blocks, b) }) {
				return h
			}
		}
	}
	return 0
}

// checkIDs checks that every id wk names was issued by its epoch's
// transport (rule 14): a handle, dlist, peer or region of an earlier
// epoch, or one never issued, is a stale id sent to the wrong process.
func (w *world) checkIDs(wk Work) {
	e := wk.Epoch
	stale := func(what string, id uint64) {
		w.fail("rule 14: work %d (%v) for epoch %d names %s %d, which that epoch never issued", wk.ID, wk.Kind, e, what, id)
	}
	for _, h := range wk.Handles {
		if w.touch[e][h] == nil {
			stale("handle", uint64(h))
		}
	}
	dlist := func(l sdk.DlistID) {
		if _, ok := w.dlists[e][l]; !ok {
			stale("dlist", uint64(l))
		}
	}
	peer := func(p sdk.PeerID) {
		if _, ok := w.peerIDs[e][p]; !ok {
			stale("peer", uint64(p))
		}
	}
	region := func(r sdk.RegionID) {
		if _, ok := w.regions[e][r]; !ok {
			stale("region", uint64(r))
		}
	}
	for _, p := range wk.Posts {
		dlist(p.Local)
		dlist(p.Remote)
	}
	for _, l := range wk.DlistIDs {
		dlist(l)
	}
	for _, p := range wk.PeerIDs {
		peer(p)
	}
	for _, n := range wk.Notes {
		peer(n.Peer)
	}
	for _, l := range wk.Dlists {
		if l.Peer != 0 {
			peer(l.Peer)
		} else if len(l.Descriptors) > 0 {
			region(l.Descriptors[0].Region)
		}
	}
	for _, r := range wk.RegionIDs {
		region(r)
	}
}

// quarantined reports whether every block is quarantined: a handle over
// them was force-released, so nothing of them goes back.
func (w *world) quarantined(blocks []BlockRef) bool {
	for _, b := range blocks {
		if w.c.Owner(b) != OwnerQuarantined {
			return false
		}
	}
	return len(blocks) > 0
}

// checkReports checks a Ready's reports: each request once (rule 16), only
// once no handle of a live transport may touch its blocks and every such
// handle is released (rules 1–3), never a success for a request a transfer
// of failed or whose peer was removed or Core closed first, a failed
// receive's blocks invalid or quarantined in the same report (rule 3), and
// a send finished only once its consumers notified or its lease ran out, a
// receive only once its producers notified (rule 4).
func (w *world) checkReports(rd Ready) {
	invalid := map[BlockRef]bool{}
	for _, b := range rd.InvalidBlocks {
		invalid[b] = true
	}
	report := func(id RequestID, ok bool, f *Failure) {
		r := w.issued[id]
		switch {
		case r == nil:
			w.fail("rule 16: request %q reported, never accepted", id)
			return
		case r.reported:
			w.fail("rule 16: request %q reported twice", id)
			return
		}
		r.reported = true
		if !w.quiet {
			line := "finished " + string(id)
			if !ok {
				line = "failed " + string(id) + ": " + failCode(f.Reason)
			}
			w.log = append(w.log, line)
		}
		var quar []BlockRef
		if f != nil {
			quar = f.Quarantined
		}
		for e, d := range w.ds {
			if w.dead[e] {
				continue
			}
			for _, h := range d.live() {
				p := w.touch[e][h]
				if p == nil {
					continue
				}
				for _, b := range p.blocks {
					if slices.Contains(r.blocks, b) && !slices.Contains(quar, b) {
						w.fail("rules 1-3: request %q reported while handle %d/%d (%v) over its block %v is not released", id, e, h, d.handles[h], b)
					}
				}
			}
		}
		if ok && r.mustFail {
			w.fail("rule 3: request %q reported finished, but a transfer of it failed or was fenced", id)
		}
		if ok && (r.kind == "read" || r.kind == "write") && r.done < len(r.blocks) {
			w.fail("rule 3: request %q reported finished with %d of its %d transfers done", id, r.done, len(r.blocks))
		}
		// Rule 4: a send is done when its consumers say so or its lease
		// is over; a receive only when its producers say so (its lease
		// running out fails it).
		if ok && r.kind != "read" && len(r.notified) < w.cfg.ranks && (r.kind == "recv" || w.now.Before(r.at.Add(w.cfg.lease))) {
			w.fail("rule 4: %s %q reported finished with %d of its %d peers' notifications, at +%v (lease %v)", r.kind, id, len(r.notified), w.cfg.ranks, w.now.Sub(r.at), w.cfg.lease)
		}
		if f != nil && (r.kind == "read" || r.kind == "recv") {
			got := append(slices.Clone(f.Invalid), f.Quarantined...)
			if !sameBlocks(got, r.blocks) {
				w.fail("rule 3: failed receive %q lists invalid %v and quarantined %v, not its blocks %v", id, f.Invalid, f.Quarantined, r.blocks)
			}
			for _, b := range f.Invalid {
				if !invalid[b] {
					w.fail("rule 3: failed receive %q: invalid block %v not in the report's InvalidBlocks", id, b)
				}
			}
		}
	}
	for _, id := range rd.FinishedSending {
		report(id, true, nil)
	}
	for _, id := range rd.FinishedReceiving {
		report(id, true, nil)
	}
	for i := range rd.Failed {
		report(rd.Failed[i].Request, false, &rd.Failed[i])
	}
}

func sameBlocks(a, b []BlockRef) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// checkOwners checks who holds the blocks after a step: every block of an
// unreported request is the request's (or quarantined), no block is two
// requests', a block held for a transfer belongs to one, and no block a
// running handle of a live transport touches is the engine's or free
// (rules 1 and 16; the ownership rule of core's doc).
func (w *world) checkOwners() {
	if w.orphans[w.epoch] && !w.dead[w.epoch] && !w.c.fenceWant[w.epoch] {
		w.fail("unknown outcome: a call to epoch %d that timed out created what core cannot name, and no fence of it is asked for", w.epoch)
	}
	// First the running handles: a block one touches that is the
	// engine's or free is the worst case, whoever else should hold it.
	for e, d := range w.ds {
		if w.dead[e] {
			continue
		}
		for _, h := range d.live() {
			p := w.touch[e][h]
			if p == nil || d.handles[h].Terminal() {
				continue
			}
			for _, b := range p.blocks {
				if o := w.c.Owner(b); o == OwnerEngine || o == OwnerFree {
					w.fail("rule 1: block %v is %v while handle %d/%d over it is %v", b, o, e, h, d.handles[h])
				}
			}
		}
	}
	holder := map[BlockRef]RequestID{}
	for _, id := range w.order {
		r := w.issued[id]
		if r.reported {
			continue
		}
		for _, b := range r.blocks {
			if o, dup := holder[b]; dup {
				w.fail("ownership: block %v is held by requests %q and %q", b, o, id)
			}
			holder[b] = id
			if o := w.c.Owner(b); o != OwnerTransfer && o != OwnerRetained && o != OwnerQuarantined {
				w.fail("ownership: block %v of unreported request %q is %v", b, id, o)
			}
		}
	}
	for _, p := range w.pools {
		for i := range uint32(exploreBlocks) {
			b := BlockRef{p, i}
			if o := w.c.Owner(b); (o == OwnerTransfer || o == OwnerRetained) && holder[b] == "" {
				w.fail("ownership: block %v is %v but no unreported request holds it", b, o)
			}
		}
	}
}

// checkHolds checks after a round that no running handle of a live
// transport outlived the hold cap without escalation: its epoch's fence
// asked for, or its blocks quarantined (rule 8).
func (w *world) checkHolds() {
	if w.cfg.holdCap <= 0 {
		return
	}
	for e, d := range w.ds {
		if w.dead[e] || w.c.fenceWant[e] {
			continue
		}
		for _, h := range d.live() {
			p := w.touch[e][h]
			if p == nil || d.handles[h].Terminal() || w.quarantined(p.blocks) {
				continue
			}
			if !w.now.Before(p.at.Add(w.cfg.holdCap)) {
				w.fail("rule 8: handle %d/%d, posted at +%v, still runs at +%v past the cap %v without escalation", e, h, p.at.Sub(exploreT0), w.now.Sub(exploreT0), w.cfg.holdCap)
			}
		}
	}
}

// checkNatives checks after a step that every native resource the live
// transport holds is listed by core: a registration or local dlist of a
// pool (or a stray registration), a peer or dlist of a connected or
// retired peer or of the handshake journal, a handle live or
// force-released; or is named by Work still outstanding, whose result
// core is waiting for (rules 5 and 16: every native acquired is released,
// or still held and listed). What a call that timed out created is no
// one's to list: its epoch's fence ends it (checkOwners).
func (w *world) checkNatives() {
	e := w.epoch
	d := w.ds[e]
	if d == nil || w.dead[e] || w.orphans[e] || w.c.epoch != e {
		return
	}
	c := w.c
	peers := map[sdk.PeerID]bool{}
	dlists := map[sdk.DlistID]bool{}
	regions := map[sdk.RegionID]bool{}
	for _, p := range c.pools {
		if p.epoch == e {
			regions[p.region], dlists[p.local] = true, true
		}
	}
	for _, s := range c.strayRg {
		if s.epoch == e {
			regions[s.region] = true
		}
	}
	record := func(p *peer) {
		if p.epoch != e {
			return
		}
		for _, r := range p.ranks {
			peers[r.id], peers[r.notify], dlists[r.dlist] = true, true, true
		}
	}
	for _, p := range c.peers {
		record(p)
	}
	for _, p := range c.retired {
		record(p)
	}
	for _, j := range c.journal {
		for _, en := range j {
			if en.epoch == e {
				peers[en.peer], dlists[en.list] = true, true
			}
		}
	}
	for _, wk := range w.out {
		if wk.Epoch != e {
			continue
		}
		for _, p := range wk.PeerIDs {
			peers[p] = true
		}
		for _, l := range wk.DlistIDs {
			dlists[l] = true
		}
		for _, r := range wk.RegionIDs {
			regions[r] = true
		}
		for _, l := range wk.Dlists {
			if l.Peer == 0 && len(l.Descriptors) > 0 {
				regions[l.Descriptors[0].Region] = true // a pool's registration, its dlist under way
			}
		}
	}
	for id := range d.peers {
		if !peers[id] {
			w.fail("rule 16: peer %d of epoch %d is loaded, but core lists it nowhere", id, e)
		}
	}
	for id := range d.dlists {
		if !dlists[id] {
			w.fail("rule 16: dlist %d of epoch %d is prepared, but core lists it nowhere", id, e)
		}
	}
	for id := range d.regions {
		if !regions[id] {
			w.fail("rule 16: region %d of epoch %d is registered, but core lists it nowhere", id, e)
		}
	}
	for _, h := range d.live() {
		ref := Ref{e, h}
		if x := c.live.get(h); (x == nil || x.ref != ref) && c.leaked[ref] == nil {
			w.fail("rule 16: handle %d of epoch %d is held by the transport, but core lists it nowhere", h, e)
		}
	}
}

// checkClosed checks, once Close returned nil and its last Ready was
// taken, that every request core accepted was reported (rule 16: exactly
// one report each, and a closed Core owes none any more).
func (w *world) checkClosed() {
	for _, id := range w.order {
		if r := w.issued[id]; !r.reported {
			w.fail("rule 16: request %q was accepted and never reported: Close returned nil with it %v", id, w.c.Owner(r.blocks[0]))
		}
	}
}
