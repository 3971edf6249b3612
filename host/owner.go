package host

import (
	"context"
	"fmt"
	"time"

	"github.com/custody-dev/custody/core"
)

// command is an engine call, run on the owner goroutine (do, doWork).
type command struct {
	fn    func(ctx context.Context) error
	reply chan error
	// kick: the command may have created transport work (a post, a cancel,
	// a notification awaited), so a round runs at once after it.
	kick bool
}

// Run is the owner loop. It returns when ctx ends, after tearing down in
// rule 12's order: sessions, then pools, then the transport.
//
// Rounds are event-driven: one runs at once after a command that may have
// created transport work, after a handshake settles, after a fence, and
// whenever the transport wakes the host (sdk.Waker); the round after such a
// command or wake-up waits, while Work is at the executor, until that Work
// is reported (roundNowOrAfterQueued). While something is in
// flight and the transport cannot wake the host, rounds follow each other
// with a backoff that starts at zero and doubles to maxPollBackoff while
// they make no progress. An idle host runs a round only at the next lease
// or hold-cap deadline, so it makes no transport call meanwhile.
func (h *Host) Run(ctx context.Context) error {
	defer close(h.done)
	if h.group != nil {
		// Last, after the transport stopped: the other ranks see this
		// rank leave only once nothing of it can move.
		defer func() { _ = h.group.Close() }()
		h.ranks.start()
		defer h.ranks.stop()
	}
	defer h.exec.close()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		due := false
		select {
		case <-ctx.Done():
			return h.shutdown()
		case r := <-h.exec.results:
			// A result: act on it at once (a handle seen DONE is released
			// in the Work that follows); no round unless it was a round's
			// or a wake-up waited for it.
			if h.done1(r) {
				h.backoff = 0
			}
			woke := h.woken && h.reported >= h.wokeAt
			if woke {
				h.woken = false
			}
			if (woke || h.missed) && h.next.When != core.WaitResults {
				h.round()
			}
			h.schedule(t)
			continue
		case c := <-h.cmds:
			cctx, cancel := h.callCtx()
			c.reply <- c.fn(cctx)
			cancel()
			h.absorb(h.core.Ready())
			if c.kick {
				due = h.roundNowOrAfterQueued()
			}
		case hs := <-h.handshakes:
			h.settle(hs)
			due = true
		case <-h.exited():
			h.fence("transport process exited") // the next round takes core's Ready
			due = true
		case <-h.wake:
			due = h.roundNowOrAfterQueued()
		case <-t.C:
			due = true
		}
		if due {
			h.round()
		}
		h.schedule(t)
	}
}

// roundNowOrAfterQueued is the round a command or a wake-up asks for: now
// when nothing is at the executor, else (woken) once what is there now is
// reported. Its queries would have waited behind that Work at the executor
// anyway, and after it they are answered locally (local.go); usually the
// wake-up announces the completion of the very post the executor reports.
func (h *Host) roundNowOrAfterQueued() bool {
	if h.queued() == 0 {
		return true
	}
	h.woken, h.wokeAt = true, h.submitted
	return false
}

// queued is how much Work the executor has whose result core lacks.
func (h *Host) queued() uint64 { return h.submitted - h.reported }

// done1 hands core one Work's result and absorbs what follows; it reports
// whether that was progress (a report, or more Work: a release, a post).
// A round's query that changed nothing doubles the poll backoff.
func (h *Host) done1(r workResult) bool {
	h.reported++
	return h.apply(r)
}

// apply is done1 for a result of either origin, the executor or runLocal.
func (h *Host) apply(r workResult) bool {
	h.core.Done(r.id, r.res, r.err)
	rd := h.core.Ready()
	progress := !rd.Empty()
	h.absorb(rd)
	if !progress && h.next.When != core.WaitResults {
		h.backoff = min(max(2*h.backoff, minPollBackoff), maxPollBackoff)
	}
	return progress
}

// await hands core the results of Work until cond holds or ctx ends. It runs
// on the owner goroutine, for setup (a pool's registration, a new epoch's)
// that an engine call or a restart must see done before it answers.
func (h *Host) await(ctx context.Context, cond func() bool) error {
	for !cond() {
		if h.next.Outstanding == 0 {
			return fmt.Errorf("waiting for the transport: nothing is under way and the condition does not hold")
		}
		select {
		case r := <-h.exec.results:
			h.done1(r)
		case <-ctx.Done():
			return fmt.Errorf("waiting for the transport: %w", ctx.Err())
		}
	}
	return nil
}

// schedule arms t for the next round: after the backoff while core has work
// only a round can advance (with a waking transport, only work no wake-up
// announces), else at the next deadline, else not at all.
func (h *Host) schedule(t *time.Timer) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	// While a round's queries are out (WaitResults), their results
	// schedule the next.
	switch h.next.When {
	case core.WaitRetry:
		t.Reset(h.backoff)
		return
	case core.WaitTransport:
		if h.wake == nil {
			t.Reset(h.backoff)
			return
		}
	}
	at := h.next.At
	if h.tp == nil && (at.IsZero() || h.restartAt.Before(at)) {
		at = h.restartAt
	}
	if at.IsZero() {
		return
	}
	t.Reset(max(time.Until(at), 0))
}

// do runs fn on the owner goroutine and returns its error. It gives up when
// ctx ends or the host stops before the owner takes the command; once taken,
// the command runs to its end (bounded by the call timeout) and do waits for
// it, so the caller never hears "failed" of something that took effect (a
// report taken, a request recorded).
func (h *Host) do(ctx context.Context, fn func(ctx context.Context) error) error {
	return h.send(ctx, command{fn: fn, reply: make(chan error, 1)})
}

// doWork is do for a command that may create transport work: a round runs
// at once after it.
func (h *Host) doWork(ctx context.Context, fn func(ctx context.Context) error) error {
	return h.send(ctx, command{fn: fn, reply: make(chan error, 1), kick: true})
}

func (h *Host) send(ctx context.Context, c command) error {
	select {
	case h.cmds <- c:
	case <-h.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-c.reply
}

func (h *Host) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), h.cfg.Transport.CallTimeout)
}

func (h *Host) exited() <-chan struct{} {
	if h.tp == nil {
		return nil
	}
	return h.tp.Exited()
}

// round starts one core round (its queries go to the executor) and absorbs
// what it reports.
func (h *Host) round() {
	if h.tp == nil {
		h.restart()
	}
	h.missed = h.next.When == core.WaitResults // core skips its queries: run again once they are in
	h.absorb(h.core.Poll(time.Now()))
	if now := time.Now(); now.Sub(h.lastStats) > 100*time.Millisecond {
		h.lastStats = now
		h.metrics.observe(h.core.Stats())
	}
}
