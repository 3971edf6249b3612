package host

import (
	"errors"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/sdk"
)

// absorb hands core's Work to the executor, logs its alerts, acts on its
// fence requests and adds its finished report to the one the engine will
// fetch; and again for what acting on it produced (a peer removed, ...).
// The results of Work answered locally meanwhile go to core before it
// returns, with what follows from them.
func (h *Host) absorb(rd core.Ready) {
	h.absorbReady(rd)
	if len(h.failing) > 0 {
		h.watchRecoveries()
	}
	if h.draining {
		return // an outer absorb is handing them over
	}
	h.draining = true
	for i := 0; i < len(h.local); i++ { // apply may append more
		if h.apply(h.local[i]) {
			h.backoff = 0
		}
	}
	clear(h.local)
	h.local = h.local[:0]
	h.draining = false
}

func (h *Host) absorbReady(rd core.Ready) {
	for {
		h.next = rd.Next
		if !h.absorb1(rd) {
			return
		}
		rd = h.core.Ready()
	}
}

// absorb1 acts on one Ready; it reports whether acting on it called into
// core (a fence reported, a stale peer removed), so that the Ready that
// follows, and its schedule, must be taken too.
func (h *Host) absorb1(rd core.Ready) bool {
	touched := false
	jobs := make([]job, 0, len(rd.Work))
	for _, w := range rd.Work {
		j := job{w: w}
		if w.Epoch == h.epoch && h.tp != nil {
			j.tp, j.most = h.tp, callItems(h.desc)
			// With nothing at the executor, nothing handed out before w
			// is unanswered: w may be answered here without reordering.
			if h.queued() == 0 && len(jobs) == 0 {
				if r, ok := runLocal(h.tp, w); ok {
					h.local = append(h.local, r)
					continue
				}
			}
		}
		jobs = append(jobs, j)
	}
	h.submitted += uint64(len(jobs))
	h.exec.submit(jobs...)
	for _, a := range rd.Alerts {
		h.alert(a)
	}
	for _, e := range rd.Fence {
		if e == h.epoch && h.tp != nil {
			touched = h.fence("core asked for a fence: a transfer was held past the cap, a call's outcome is unknown or the transport is wedged") || touched
		} else {
			h.core.Fenced(e) // that process is already dead
			touched = true
		}
	}
	// A ranked host holds the requests finished here back for the group
	// (holdBack), but is done with them all the same: what the group's
	// outcome needs, holdBack copied.
	finished := rd
	if h.ranks != nil {
		rd = h.holdBack(rd)
	}
	h.rep.add(rd)
	rd = finished
	// A request held back for the group is counted by its union outcome,
	// when the rank sync reports it (ranks.go), not by its outcome here.
	done := func(id core.RequestID, outcome string) {
		ri := h.reqs[id]
		delete(h.reqs, id)
		if h.ranks == nil {
			h.metrics.countRequest(outcome, ri.op, ri.bytes)
		}
	}
	for _, id := range rd.FinishedSending {
		done(id, "ok")
	}
	for _, id := range rd.FinishedReceiving {
		done(id, "ok")
	}
	for _, f := range rd.Failed {
		peer := h.reqs[f.Request].peer
		done(f.Request, "failed")
		if errors.Is(f.Reason, sdk.ErrRemoteDisconnect) && peer != "" {
			touched = h.dropStalePeer(peer) || touched
		}
	}
	return touched
}

// callItems is how many items one batched call to a transport of desc may
// carry: what it states, within what core puts in one call.
func callItems(desc sdk.Description) int {
	if m := int(desc.Limits.MaxItemsPerCall); m > 0 && m < core.DefaultBatch {
		return m
	}
	return core.DefaultBatch
}

func (h *Host) alert(a core.Alert) {
	h.metrics.Failures.WithLabelValues(a.Kind).Inc()
	if a.Kind == "handshake_failed" && h.handshakeFailed(a) {
		return // logged once per change (handshake_backoff.go)
	}
	if a.Kind == "hold_cap_fence" || a.Kind == "transfer_force_released" {
		h.metrics.Escalations.Inc()
	}
	args := []any{"failure_type", a.Kind}
	if a.Peer != "" {
		args = append(args, "peer", a.Peer)
	}
	if a.Request != "" {
		args = append(args, "request", string(a.Request))
	}
	if a.Handle != (core.Ref{}) {
		args = append(args, "handle", a.Handle.String())
	}
	if a.Err != nil {
		args = append(args, "error", a.Err.Error())
	}
	if a.Level == core.AlertError {
		h.log.Error("transfer failure", args...)
	} else {
		h.log.Warn("transfer failure", args...)
	}
}
