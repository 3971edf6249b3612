package host

import (
	"fmt"
	"time"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/host/group"
)

// holdBack splits a round's report on a ranked host: the requests it
// finishes or fails go to the rank sync, which reports them to the engine
// once every rank is terminal (ranks.go), each with its own invalid and
// quarantined blocks; what the round reports of no request of this host
// (none is expected) stays in the returned report. The pool of every
// quarantined block is poisoned on every rank (rule 11).
func (h *Host) holdBack(rd core.Ready) core.Ready {
	now := time.Now()
	byID := map[core.RequestID]*heldReq{}
	var held []*heldReq
	add := func(id core.RequestID, hr *heldReq) {
		ri := h.reqs[id]
		hr.id, hr.at, hr.blocks, hr.receiving = id, now, ri.blocks, ri.recv
		hr.op, hr.bytes = ri.op, ri.bytes
		byID[id] = hr
		held = append(held, hr)
	}
	for _, id := range rd.FinishedSending {
		add(id, &heldReq{sending: true, state: group.Succeeded})
	}
	for _, id := range rd.FinishedReceiving {
		add(id, &heldReq{state: group.Succeeded})
	}
	// Every invalid or quarantined block is a failed request's (Failure
	// lists its own); any other stays in the returned report.
	owned := map[core.BlockRef]bool{}
	for i := range rd.Failed {
		f := rd.Failed[i]
		st := group.Failed
		if f.TimedOut {
			st = group.TimedOut
		}
		add(f.Request, &heldReq{sending: f.Sending, state: st, failure: &f, invalid: f.Invalid, quarantined: f.Quarantined})
		for _, b := range f.Invalid {
			owned[b] = true
		}
		for _, b := range f.Quarantined {
			owned[b] = true
			if int(b.Pool) >= 1 && int(b.Pool) <= len(h.pools) {
				h.ranks.poison(h.pools[b.Pool-1].name, fmt.Sprintf("block %d quarantined on rank %d (request %q): a transfer may still touch it", b.Block, h.group.Rank(), f.Request))
			}
		}
	}
	rest := core.Ready{}
	for _, b := range rd.InvalidBlocks {
		if !owned[b] {
			rest.InvalidBlocks = append(rest.InvalidBlocks, b)
		}
	}
	for _, b := range rd.Quarantined {
		if !owned[b] {
			rest.Quarantined = append(rest.Quarantined, b)
			if int(b.Pool) >= 1 && int(b.Pool) <= len(h.pools) {
				h.ranks.poison(h.pools[b.Pool-1].name, fmt.Sprintf("block %d quarantined on rank %d: a transfer may still touch it", b.Block, h.group.Rank()))
			}
		}
	}
	// Requests of this rank that are still running (h.reqs still holds
	// the ones finished here): none, and nothing can ride along with these.
	h.ranks.hold(held, len(h.reqs) > len(held))
	return rest
}

// track remembers a new request; on a ranked host also its blocks, which
// a receive that succeeded here hands back as invalid when the union
// outcome is a failure elsewhere.
func (h *Host) track(id core.RequestID, ri reqInfo, pool core.PoolID, blocks []uint32, parts []core.Part) {
	if h.ranks != nil {
		for _, b := range blocks {
			ri.blocks = append(ri.blocks, core.BlockRef{Pool: pool, Block: b})
		}
		for _, p := range parts {
			for _, b := range p.Local {
				ri.blocks = append(ri.blocks, core.BlockRef{Pool: p.Pool, Block: b})
			}
		}
	}
	h.reqs[id] = ri
}

// admit refuses, on a ranked host, a request on a poisoned pool, an id
// too long for the group, or any request once this rank left its group.
func (h *Host) admit(id core.RequestID, pools ...core.PoolID) error {
	if h.ranks == nil {
		return nil
	}
	names := make([]string, 0, len(pools))
	for _, p := range pools {
		if int(p) >= 1 && int(p) <= len(h.pools) {
			names = append(names, h.pools[p-1].name)
		}
	}
	return h.ranks.admit(id, names)
}

func partPools(parts []core.Part) []core.PoolID {
	out := make([]core.PoolID, len(parts))
	for i, p := range parts {
		out[i] = p.Pool
	}
	return out
}
