package host

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/host/group"
)

// ErrPoisoned is returned for a request on a pool that some rank of the
// group could not prove safe (rule 11); the engine sees
// FailedPrecondition.
var ErrPoisoned = errors.New("pool poisoned")

// ErrUnionFailed is the reason a request that succeeded on this rank fails
// here too: another rank failed it, timed out or was lost (rule 10).
var ErrUnionFailed = errors.New("request failed on another rank of the group")

// rankSync holds a ranked host's finished requests back from the engine
// until every rank of the group is terminal, then hands the engine the
// union outcome (rule 10); and it poisons the pools of quarantined
// blocks on every rank (rule 11). It runs on its own goroutine, so the
// owner never waits for etcd: the owner hands it each round's finished
// requests (hold), and it reports them to the group, resolves them and adds
// the outcomes to the report log once resolved.
//
// Every request id the engine issues on a ranked host is taken to be issued
// on every rank (one logical request, tensor parallelism). A request that
// stays pending because a live rank never reports it is expired once this
// rank has held it past the hold cap (escalation.cap, the same on every
// rank): it then fails as timed out on every rank.
type rankSync struct {
	g       *group.Group
	log     hclog.Logger
	metrics *Metrics
	out     *outbox
	// publishEvery paces the writes of terminal states (publishEvery).
	publishEvery time.Duration

	mu       sync.Mutex
	in       []*heldReq
	busy     bool              // other requests ran on this rank when in was last added to
	toPoison map[string]string // pool -> reason, not yet published
	poisoned map[string]string // every pool this rank knows poisoned -> reason
	lost     error             // this rank's membership is gone
	kick     chan struct{}

	// book is the sync goroutine's own: the requests reported and not
	// resolved, and what to do about them.
	book rankBook

	// Counters, for Status, metrics and the benchmark.
	unionFailed atomic.Uint64 // failed here only because another rank failed
	expired     atomic.Uint64 // requests this rank expired past the hold cap
	resolved    atomic.Uint64
	pending     atomic.Int64 // len(held) after the last step
	waitNanos   atomic.Int64 // summed time from local terminal to resolution

	cancel context.CancelFunc
	done   chan struct{}
}

// collectEvery bounds how long the deletion of this rank's states records
// whose requests every rank finished (and of expiries) waits for a
// round's terminal states to ride along with: while requests finish they
// cost no write of their own.
const collectEvery = 50 * time.Millisecond

// publishEvery paces this rank's writes of terminal states while other
// requests run on it: a rank that wrote less than publishEvery ago holds
// the states that finish meanwhile until publishEvery has passed, then
// writes them all in one transaction. A rank that wrote longer ago, or
// that runs no other request (nothing could ride along), writes at once,
// so a lone request waits for nothing; under load each state waits at most
// publishEvery, and the group costs one etcd write per rank per
// publishEvery instead of one per round (rounds that finish a request or
// two each, on a prefill rank where each consumer's notification ends its
// own). Each write costs etcd a transaction (raft, WAL, apply, a watch
// event for every rank), which dominates what a group costs per pull
// (custody bench ranks measures it); 20 ms bounds the wait a state adds
// under load, while a lone request waits for nothing.
var publishEvery = 20 * time.Millisecond // a var for tests

func newRankSync(h *Host) *rankSync {
	return &rankSync{
		g: h.group, log: h.log.Named("ranks"), metrics: h.metrics, out: &h.rep,
		publishEvery: publishEvery,
		toPoison:     map[string]string{}, poisoned: map[string]string{},
		kick: make(chan struct{}, 1),
		book: rankBook{holdCap: h.cfg.Escalation.Cap, self: h.group.Rank(), held: map[core.RequestID]*heldReq{}},
	}
}

// start runs the sync goroutine until stop.
func (r *rankSync) start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan struct{})
	go func() { defer close(r.done); r.run(ctx) }()
}

// stop ends the sync goroutine and waits for it. Requests still held are
// not reported: the host is going away, and with it the engine's API.
func (r *rankSync) stop() {
	if r.cancel != nil {
		r.cancel()
		<-r.done
	}
}

func (r *rankSync) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// hold hands the sync goroutine requests finished on this rank (owner);
// busy says other requests still run on this rank.
func (r *rankSync) hold(reqs []*heldReq, busy bool) {
	if len(reqs) == 0 {
		return
	}
	r.mu.Lock()
	r.in = append(r.in, reqs...)
	r.busy = busy
	r.mu.Unlock()
	r.wake()
}

// run is the sync goroutine. It makes no etcd read: the group's watch
// wakes it (Changed) when another rank's state, ack or loss arrives, the
// owner (kick) when requests finish here; a timer only for the hold cap of
// what is held and for the deletions still to be written.
func (r *rankSync) run(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	lastFlush := time.Now().Add(-r.publishEvery)
	resolve := true
	for {
		now := time.Now()
		since := now.Sub(lastFlush)
		r.mu.Lock()
		publish := since >= r.publishEvery || !r.busy
		r.mu.Unlock()
		flushed := r.step(ctx, since >= collectEvery, publish, resolve)
		if flushed {
			lastFlush = now
		}
		wait := time.Duration(-1)
		at := func(d time.Duration) {
			if d = max(d, 0); wait < 0 || d < wait {
				wait = d
			}
		}
		if d, ok := r.book.nextHoldCap(now); ok {
			at(d)
		}
		if r.g.Stats().Unwritten > 0 {
			at(collectEvery - time.Since(lastFlush))
		}
		r.mu.Lock()
		if len(r.toPoison) > 0 {
			at(collectEvery)
		}
		if len(r.in) > 0 {
			at(r.publishEvery - time.Since(lastFlush))
		}
		r.mu.Unlock()
		if wait >= 0 {
			t.Reset(wait)
		}
		// Only the group's watch (Changed), this rank's own write, and
		// time (the hold cap) change what Resolve returns: a wake-up by
		// the owner alone, whose states wait for publishEvery, skips it.
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
			resolve = false
		case <-r.g.Changed():
			resolve = true
		case <-t.C:
			resolve = true
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
	}
}

// step publishes poison and new terminal states (with the deletions due,
// in one write), resolves what is held from the group's watched view and
// reports what resolved. With no new state it writes only when flush is
// set; new states wait for publish (publishEvery). It resolves when
// resolve is set or it wrote. It says whether it wrote. Every decision is
// the book's (ranks_book.go); step makes the group calls between them.
func (r *rankSync) step(ctx context.Context, flush, publish, resolve bool) bool {
	r.mu.Lock()
	var in []*heldReq
	if publish {
		in = r.in
		r.in = nil
	}
	poison := r.toPoison
	r.toPoison = map[string]string{}
	r.mu.Unlock()

	r.publishPoison(ctx, poison)
	var rd core.Ready
	fresh, terms := r.book.admit(in, &rd, r.metrics)
	var err error
	wrote := len(terms) > 0 || flush
	if wrote {
		err = r.g.Report(ctx, terms)
	}
	switch {
	case err == nil || errors.Is(err, group.ErrCoordinator) || errors.Is(err, group.ErrMalformed):
		// Accepted (published now, or with the next Report).
		r.book.accept(fresh...)
		if err != nil {
			r.log.Warn("reporting terminal states to the group", "failure_type", "group_report_failed", "error", err.Error())
		}
	case errors.Is(err, group.ErrSessionLost), errors.Is(err, group.ErrClosed):
		r.failAll(&rd, err)
		r.out.add(rd)
		r.pending.Store(0)
		return wrote
	default:
		// Refused whole: find the ones refused, one at a time.
		for _, hr := range fresh {
			if err := r.g.Report(ctx, []group.Terminal{hr.terminal()}); err != nil && !errors.Is(err, group.ErrCoordinator) {
				r.book.refuse(hr, err, &rd, r.metrics)
				continue
			}
			r.book.accept(hr)
		}
	}
	if !resolve && !wrote && len(poison) == 0 {
		r.out.add(rd)
		return wrote
	}
	outs, err := r.g.Resolve(ctx, r.book.accepted())
	switch {
	case errors.Is(err, group.ErrSessionLost), errors.Is(err, group.ErrClosed):
		r.failAll(&rd, err)
	case err != nil:
		r.log.Warn("resolving requests with the group", "failure_type", "group_resolve_failed", "error", err.Error())
	default:
		now := time.Now()
		late, waited, s := r.book.resolved(outs, now, &rd, r.metrics)
		r.resolved.Add(s.resolved)
		r.waitNanos.Add(int64(s.waited))
		r.unionFailed.Add(s.unionFailed)
		if len(late) > 0 {
			err := r.g.Expire(ctx, late, waited)
			r.book.expired(late, err == nil, now)
			if err != nil {
				r.log.Warn("expiring requests past the hold cap", "failure_type", "group_expire_failed", "error", err.Error())
			} else {
				r.expired.Add(uint64(len(late)))
			}
		}
	}
	r.out.add(rd)
	r.pending.Store(int64(len(r.book.held)))
	r.metrics.PoisonedPools.Set(float64(len(r.Poisoned())))
	return wrote
}

// failAll fails every held request: this rank is no longer a member, so it
// can no longer learn the union (the other ranks count it lost and fail
// them too). New requests are refused from now on.
func (r *rankSync) failAll(rd *core.Ready, err error) {
	r.mu.Lock()
	if r.lost == nil {
		r.lost = err
	}
	r.mu.Unlock()
	r.log.Error("this rank left its group: failing every held request; restart the host", "failure_type", "group_session_lost", "error", err.Error())
	r.book.failAll(rd, r.metrics, err)
}

// groupStatus is Status's view of the group (owner goroutine).
func (h *Host) groupStatus() *GroupStatus {
	if h.group == nil {
		return nil
	}
	st := h.group.Stats()
	r := h.ranks
	return &GroupStatus{
		Engine: h.cfg.Group.Engine, Rank: h.group.Rank(), Size: h.group.Size(), Live: h.group.Live(),
		Poisoned: r.Poisoned(), Held: uint64(r.pending.Load()), UnionFailed: r.unionFailed.Load(), Expired: r.expired.Load(),
		Writes: st.WriteTxns, Reads: st.ReadTxns,
	}
}
