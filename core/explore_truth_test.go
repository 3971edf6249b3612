package core

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// The world's ground truth: what each call created natively, which request
// each handle works for, and when a hold began (explore_world_test.go).

// learn records what a call created natively: handles and what they
// touch, dlists, regions, peers. The double numbers what it creates from
// one counter, item by item, skipping the failed item skip; ids first+1 to
// last are what this call created, whether or not core saw its result.
// What a call that failed after taking effect created is an orphan: core
// cannot name it, so only a fence of its epoch ends it.
func (w *world) learn(wk Work, first, last uint64, skip int, orphan bool) {
	e := wk.Epoch
	if orphan && last > first {
		w.orphans[e] = true
	}
	id := first
	each := func(n int, f func(k int, id uint64)) {
		for k := range n {
			if k == skip || id >= last {
				continue
			}
			id++
			f(k, id)
		}
	}
	switch wk.Kind {
	case WorkPost:
		each(len(wk.Posts), func(k int, id uint64) {
			p := wk.Posts[k]
			wp := &wpost{local: p.Local, remote: p.Remote, at: w.now, orphan: orphan}
			pool := w.dlists[e][p.Local].pool
			for _, b := range p.LocalIndices {
				wp.blocks = append(wp.blocks, BlockRef{pool, b})
			}
			wp.req = w.holderOf(wp.blocks)
			w.touch[e][sdk.HandleID(id)] = wp
		})
	case WorkRegisterMemory:
		each(len(wk.Regions), func(k int, id uint64) {
			n, _ := strconv.Atoi(strings.TrimPrefix(wk.Regions[k].Path, "kv"))
			if n < len(w.pools) {
				w.regions[e][sdk.RegionID(id)] = w.pools[n]
			}
		})
	case WorkPrepareDescriptors:
		each(len(wk.Dlists), func(k int, id uint64) {
			l := wk.Dlists[k]
			if l.Peer == 0 {
				w.dlists[e][sdk.DlistID(id)] = wdlist{pool: w.regions[e][l.Descriptors[0].Region], orphan: orphan}
			} else {
				w.dlists[e][sdk.DlistID(id)] = wdlist{peer: l.Peer, orphan: orphan}
			}
		})
	case WorkLoadPeers:
		// Agents are named peer and rank (peerSpec): "p0" is rank 0 of p.
		each(len(wk.Peers), func(k int, id uint64) {
			w.peerIDs[e][sdk.PeerID(id)] = strings.TrimRight(wk.Peers[k].Name, "0123456789")
			w.resend[e].loaded(sdk.PeerID(id), wk.Peers[k].Name)
		})
	}
}

// retain restarts the hold clock of the running handles of the attached
// epoch that match: their session closed, so they are retained from now,
// and the hold cap counts from here (rule 8).
func (w *world) retain(match func(p *wpost) bool) {
	d := w.ds[w.epoch]
	if d == nil || w.dead[w.epoch] {
		return
	}
	for _, h := range d.live() {
		if p := w.touch[w.epoch][h]; p != nil && !d.handles[h].Terminal() && match(p) {
			p.at = w.now
		}
	}
}

// mustFail marks the unreported requests that match as bound to fail.
func (w *world) mustFail(match func(r *wreq) bool) {
	for _, id := range w.order {
		if r := w.issued[id]; !r.reported && match(r) {
			r.mustFail = true
		}
	}
}

// deadline is the earliest deadline the world knows of after now, zero
// when none: a running handle's hold cap (as checkHolds measures it) or
// an unreported send's or receive's lease. The explorer ticks to it as
// well as to core's own Next.At, so that a deadline core forgot is
// reached all the same.
func (w *world) deadline() time.Time {
	var at time.Time
	earliest := func(t time.Time) {
		if t.After(w.now) && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	for e, d := range w.ds {
		if w.dead[e] || w.c.fenceWant[e] || w.cfg.holdCap <= 0 {
			continue
		}
		for _, h := range d.live() {
			if p := w.touch[e][h]; p != nil && !d.handles[h].Terminal() && !w.quarantined(p.blocks) {
				earliest(p.at.Add(w.cfg.holdCap))
			}
		}
	}
	for _, id := range w.order {
		if r := w.issued[id]; !r.reported && r.kind != "read" {
			earliest(r.at.Add(w.cfg.lease))
		}
	}
	return at
}

// holderOf is the unreported request that holds blocks, or nil.
func (w *world) holderOf(blocks []BlockRef) *wreq {
	for _, id := range w.order {
		if r := w.issued[id]; !r.reported && len(blocks) > 0 && slices.Contains(r.blocks, blocks[0]) {
			return r
		}
	}
	return nil
}

// ended records that handle h of epoch e ended in st (a running handle
// whose transport died counts as failed).
func (w *world) ended(e Epoch, h sdk.HandleID, st sdk.State) {
	p := w.touch[e][h]
	if p == nil || p.req == nil {
		return
	}
	switch st {
	case sdk.StateDone:
		p.req.done++
	case sdk.StateFailed, sdk.StateCanceled:
		p.req.mustFail = true
	}
}
