package core

import (
	"slices"

	"github.com/custody-dev/custody/sdk"
)

// The explorer's invariants, each a rule of docs/guarantees.md, checked
// against the world's ground truth (what each double really holds and
// what each handle really touches), never against core's own records.

// checkWork checks Work as core hands it out: no id of a fenced epoch
// (rule 14), no Release of a handle still running (rule 1), no Unload,
// ReleaseDescriptors or Deregister of what a handle or dlist still uses,
// and Close last (rule 12).
func (w *world) checkWork(wk Work) {
	if w.dead[wk.Epoch] || wk.Epoch != w.epoch {
		w.fail("rule 14: work %d (%v) is for epoch %d, fenced or not attached (attached: %d)", wk.ID, wk.Kind, wk.Epoch, w.epoch)
		return
	}
	d := w.ds[wk.Epoch]
	uses := func(pred func(p *wpost) bool) sdk.HandleID {
		for _, h := range d.live() {
			if p := w.touch[wk.Epoch][h]; p != nil && !p.orphan && pred(p) && !w.quarantined(p.blocks) {
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
// of failed, and a failed receive's blocks invalid or quarantined in the
// same report (rule 3).
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
		line := "finished " + string(id)
		if !ok {
			line = "failed " + string(id) + ": " + failCode(f.Reason)
		}
		w.log = append(w.log, line)
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
