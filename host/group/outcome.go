package group

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/custody-dev/custody/core"
)

// Outcome is a request's union outcome across ranks (rule 10).
type Outcome struct {
	Request core.RequestID
	// Resolved is true once every rank is terminal (reported, or lost).
	// Until then the request is pending, whatever some ranks reported.
	Resolved bool
	// State is the union: TimedOut if any rank timed out, else Failed if
	// any rank failed, was lost or left a malformed record, else Succeeded.
	State State
	// Rank is the lowest rank whose state decided State (-1 on success).
	Rank int
	// Reason is that rank's reason.
	Reason string
	// Ranks is each rank's state; 0 where it is still pending.
	Ranks []State
	// Pending lists the ranks not yet terminal (when !Resolved).
	Pending []int
}

// request is one id this rank reported, until its keys are gone.
type request struct {
	// snap is each rank's member id when this rank reported the request: a
	// rank whose member has changed since is lost for this request.
	snap    []string
	mine    Terminal
	written bool
	// stateRev is the revision of the transaction that wrote mine.
	stateRev int64
	out      *Outcome
	last     Outcome
	// returned: Resolve has returned out; del: this rank deletes the
	// request's keys (every rank's state is in, and it is the lowest live
	// rank) with the next Report; deleted: it did.
	returned, del, deleted bool
}

type requests struct {
	m map[core.RequestID]*request
	// fresh lists the requests whose own side changed (reported, written)
	// since Resolve last folded them.
	fresh map[core.RequestID]*request
	// writes and reads count etcd transactions, for Stats.
	writes, reads atomic.Uint64
}

func newRequests() requests {
	return requests{m: map[core.RequestID]*request{}, fresh: map[core.RequestID]*request{}}
}

// Stats counts the etcd transactions Report and Resolve made.
type Stats struct {
	WriteTxns uint64
	ReadTxns  uint64
	// InFlight is the number of request ids this rank still tracks.
	InFlight int
	// Unwritten is the number of writes (states, acknowledgements,
	// deletions) waiting for the next Report.
	Unwritten int
}

// Stats returns the counters since Open.
func (g *Group) Stats() Stats {
	g.reqMu.Lock()
	defer g.reqMu.Unlock()
	st := Stats{WriteTxns: g.reqs.writes.Load(), ReadTxns: g.reqs.reads.Load(), InFlight: len(g.reqs.m)}
	if !g.cfg.Solo() {
		for _, r := range g.reqs.m {
			if !r.written || r.del {
				st.Unwritten++
			}
		}
	}
	return st
}

// Report records this rank's local terminal states and publishes them, with
// the deletion of the requests whose keys this rank collects (every rank's
// state is in, and it is the lowest live rank), in one etcd transaction
// (more only past etcd's 128 operations per transaction). Call it once per
// round, with the round's new terminal states (possibly none).
//
// Input is checked whole first: an empty, oversized or invalid id, an
// unknown state, or a request already reported with another state is an
// error and changes nothing. Reporting the same state again is a no-op. A
// state once accepted is never lost: if etcd fails, Report returns the
// error (matching ErrCoordinator) and publishes it at the next call.
// A reason longer than MaxReasonLen is cut.
func (g *Group) Report(ctx context.Context, terminals []Terminal) error {
	if err := g.checkJoined(); err != nil {
		return err
	}
	g.reqMu.Lock()
	defer g.reqMu.Unlock()
	seen := map[core.RequestID]State{}
	for _, t := range terminals {
		if err := checkRequestID(t.Request); err != nil {
			return fmt.Errorf("group %q rank %d: report: %w", g.cfg.Engine, g.cfg.Rank, err)
		}
		if _, ok := stateNames[t.State]; !ok {
			return fmt.Errorf("group %q rank %d: report of request %q: %v is not a terminal state: %w", g.cfg.Engine, g.cfg.Rank, t.Request, t.State, ErrBadArgument)
		}
		prev, ok := seen[t.Request]
		if r := g.reqs.m[t.Request]; r != nil {
			prev, ok = r.mine.State, true
		}
		if ok && prev != t.State {
			return fmt.Errorf("group %q rank %d: request %q was reported %v, now %v: %w; a terminal state stays terminal", g.cfg.Engine, g.cfg.Rank, t.Request, prev, t.State, ErrAlreadyReported)
		}
		seen[t.Request] = t.State
	}
	snap := g.members()
	for _, t := range terminals {
		if g.reqs.m[t.Request] != nil {
			continue
		}
		t.Reason = truncate(t.Reason)
		r := &request{snap: snap, mine: t, written: g.cfg.Solo()}
		g.reqs.m[t.Request] = r
		if !g.cfg.Solo() {
			g.reqs.fresh[t.Request] = r
		}
	}
	if g.cfg.Solo() {
		// Nothing to publish; forget what Resolve has returned.
		for id, r := range g.reqs.m {
			if r.out != nil {
				delete(g.reqs.m, id)
			}
		}
		return nil
	}
	return g.flush(ctx)
}

// op is one pending write of flush.
type op struct {
	id   core.RequestID
	r    *request
	kind byte // 's' state, 'd' delete
}

// flush writes every pending state, ack and delete, in as few transactions
// as etcd allows. Each transaction is guarded by this rank's membership:
// once its lease is gone, nothing it writes lands (a lost rank is fenced out
// of the union). Called with reqMu held.
func (g *Group) flush(ctx context.Context) error {
	var ops []op
	for id, r := range g.reqs.m {
		switch {
		case !r.written:
			ops = append(ops, op{id, r, 's'})
		case r.del:
			ops = append(ops, op{id, r, 'd'})
		}
	}
	memberKey := g.keys.member(g.cfg.Rank)
	guard := clientv3.Compare(clientv3.LeaseValue(memberKey), "=", g.lease)
	var errs []string
	for len(ops) > 0 {
		n, cmps := 0, 1
		maxOps := g.cfg.Coordinator.MaxTxnOps
		for n < len(ops) && n < maxOps && (ops[n].kind != 's' || cmps < maxOps) {
			if ops[n].kind == 's' {
				cmps++
			}
			n++
		}
		chunk := ops[:n]
		ifs := []clientv3.Cmp{guard}
		thens := make([]clientv3.Op, 0, n)
		for _, o := range chunk {
			id := string(o.id)
			switch o.kind {
			case 's':
				key := g.keys.state(id, g.cfg.Rank)
				ifs = append(ifs, clientv3.Compare(clientv3.CreateRevision(key), "=", 0))
				thens = append(thens, clientv3.OpPut(key, encodeState(g.cfg.Rank, g.member, o.r.mine)))
			case 'd':
				thens = append(thens, clientv3.OpDelete(g.keys.request(id), clientv3.WithPrefix()))
			}
		}
		octx, cancel := g.opCtx(ctx)
		resp, err := g.cli.Txn(octx).If(ifs...).Then(thens...).Else(clientv3.OpGet(memberKey)).Commit()
		cancel()
		g.reqs.writes.Add(1)
		if err != nil {
			return g.wrap(fmt.Sprintf("publishing %d terminal states and acknowledgements", len(ops)), err)
		}
		if !resp.Succeeded {
			kvs := resp.Responses[0].GetResponseRange().Kvs
			if len(kvs) == 0 || clientv3.LeaseID(kvs[0].Lease) != g.lease {
				g.mu.Lock()
				g.selfLost = true
				g.mu.Unlock()
				g.notify()
				return fmt.Errorf("group %q rank %d: publishing terminal states: this rank's membership key is gone: %w; fail every request and restart the host", g.cfg.Engine, g.cfg.Rank, ErrSessionLost)
			}
			// A state key exists already: an earlier, unanswered attempt
			// of ours, or someone else's record.
			conflicts, err := g.reconcile(ctx, chunk)
			if err != nil {
				return err
			}
			errs = append(errs, conflicts...)
			ops = pendingOps(ops)
			continue
		}
		for _, o := range chunk {
			g.reqs.fresh[o.id] = o.r
			switch o.kind {
			case 's':
				o.r.written, o.r.stateRev = true, resp.Header.Revision
			case 'd':
				// The view sees the keys go, and forgets the request then.
				o.r.del, o.r.deleted = false, true
			}
		}
		ops = ops[n:]
	}
	if len(errs) > 0 {
		return fmt.Errorf("group %q rank %d: %s: %w", g.cfg.Engine, g.cfg.Rank, strings.Join(errs, "; "), ErrMalformed)
	}
	return nil
}

// pendingOps drops the ops reconcile settled.
func pendingOps(ops []op) []op {
	out := ops[:0]
	for _, o := range ops {
		if o.kind != 's' || !o.r.written {
			out = append(out, o)
		}
	}
	return out
}

// reconcile reads the state keys of chunk that already exist. One holding
// exactly what we meant to write is an earlier attempt of ours that landed
// unanswered; anything else was not written by this member: it stays (a
// state key is written once) and the union reads it as it is, so a foreign
// or malformed record can only fail the request, never make it succeed.
func (g *Group) reconcile(ctx context.Context, chunk []op) ([]string, error) {
	var gets []clientv3.Op
	var states []op
	for _, o := range chunk {
		if o.kind == 's' {
			gets = append(gets, clientv3.OpGet(g.keys.state(string(o.id), g.cfg.Rank)))
			states = append(states, o)
		}
	}
	octx, cancel := g.opCtx(ctx)
	resp, err := g.cli.Txn(octx).Then(gets...).Commit()
	cancel()
	g.reqs.reads.Add(1)
	if err != nil {
		return nil, g.wrap("reading conflicting terminal states", err)
	}
	var conflicts []string
	for i, o := range states {
		kvs := resp.Responses[i].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue
		}
		o.r.written = true
		if string(kvs[0].Value) != encodeState(g.cfg.Rank, g.member, o.r.mine) {
			conflicts = append(conflicts, fmt.Sprintf("request %q already has a state under rank %d's key that this member did not write (%.80q); request ids must be unique, and the request cannot succeeded", o.id, g.cfg.Rank, kvs[0].Value))
		}
	}
	return conflicts, nil
}

// Outcome resolves one request as of now: it Syncs, then Resolves.
func (g *Group) Outcome(ctx context.Context, id core.RequestID) (Outcome, error) {
	if err := g.Sync(ctx); err != nil {
		return Outcome{}, err
	}
	out, err := g.Resolve(ctx, []core.RequestID{id})
	if err != nil {
		return Outcome{}, err
	}
	return out[0], nil
}

// Resolve returns the union outcome of each request, in order, as this
// rank's watch of the group has seen every rank's state: it reads no etcd
// (call Sync first to see every state reported before the call; a host
// waits on Changed instead, which the watch signals). A request is Resolved once every rank has reported it terminal or is lost
// (its lease gone, or its member replaced, since this rank reported it);
// until then it is pending. A resolved outcome is final: Resolve returns it
// again unchanged, and the acknowledgement that lets the group delete the
// request's keys goes out with the next Report.
//
// Every id must have been reported by this rank first (ErrUnknownRequest);
// a bad id fails the whole call and changes nothing.
func (g *Group) Resolve(ctx context.Context, ids []core.RequestID) ([]Outcome, error) {
	if err := g.checkJoined(); err != nil {
		return nil, err
	}
	g.reqMu.Lock()
	defer g.reqMu.Unlock()
	for _, id := range ids {
		if err := checkRequestID(id); err != nil {
			return nil, fmt.Errorf("group %q rank %d: resolve: %w", g.cfg.Engine, g.cfg.Rank, err)
		}
		if g.reqs.m[id] == nil {
			return nil, fmt.Errorf("group %q rank %d: resolve: request %q: %w: report its local terminal state first", g.cfg.Engine, g.cfg.Rank, id, ErrUnknownRequest)
		}
	}
	if g.cfg.Solo() {
		out := make([]Outcome, len(ids))
		for i, id := range ids {
			r := g.reqs.m[id]
			if r.out == nil {
				o := union(id, []State{r.mine.State}, []string{r.mine.Reason})
				r.out = &o
			}
			out[i] = *r.out
		}
		return out, nil
	}
	// Fold what the watch has seen into what is unresolved, and into what
	// this rank may collect: only the requests whose keys changed since, or
	// all of them when membership changed. The membership read under the
	// view's lock is the one the view was applied with.
	g.rv.mu.Lock()
	defer g.rv.mu.Unlock()
	now := g.members()
	fold := func(id core.RequestID, r *request) {
		if r.out == nil || !r.del {
			g.apply(id, r, g.rv.reqs[id], now)
		}
	}
	if g.rv.allDirty {
		for id, r := range g.reqs.m {
			fold(id, r)
		}
	} else {
		for id := range g.rv.dirty {
			if r := g.reqs.m[id]; r != nil {
				fold(id, r)
			}
		}
		for id, r := range g.reqs.fresh {
			if g.reqs.m[id] == r {
				fold(id, r)
			}
		}
	}
	clear(g.rv.dirty)
	clear(g.reqs.fresh)
	g.rv.allDirty = false
	out := make([]Outcome, len(ids))
	for i, id := range ids {
		r := g.reqs.m[id]
		if r.out != nil {
			out[i] = *r.out
			r.returned = true
		} else {
			out[i] = r.last
		}
	}
	// Forget what was deleted: the keys the view kept for a request until
	// this rank folded them, and the request once Resolve returned it.
	for id := range g.rv.gone {
		e := g.rv.reqs[id]
		r := g.reqs.m[id]
		if r != nil && (r.out == nil || !r.returned || (e != nil && !e.gone)) {
			continue
		}
		if r != nil {
			delete(g.reqs.m, id)
		}
		if e != nil && e.gone {
			delete(g.rv.reqs, id)
		}
		delete(g.rv.gone, id)
	}
	return out, nil
}

// rankView is what one request's keys say of one rank.
type rankView struct {
	state  State
	reason string
	// stored: the rank's state key is there (lost is false).
	stored bool
}

// apply folds one request's keys into its local record: its outcome once
// every rank is terminal; and whether this rank deletes the keys: once
// every rank's state is in (or the rank is lost), by the lowest live rank,
// so that no rank that has yet to report finds them gone. A rank that
// reported finds its keys kept in its view until it folded them (view.go).
// Called with reqMu and rv.mu held.
func (g *Group) apply(id core.RequestID, r *request, e *viewEntry, now []string) {
	var kvs map[string]*viewKey
	if e != nil {
		kvs = e.keys
	}
	ranks, exp := g.readRanks(id, r, kvs, now)
	if r.out == nil {
		states := make([]State, len(ranks))
		reasons := make([]string, len(ranks))
		for i, v := range ranks {
			states[i], reasons[i] = v.state, v.reason
		}
		o := union(id, states, reasons)
		if exp != nil && o.Resolved {
			// An expiry is written only while some rank had not reported,
			// so it decides the union even once late states arrived: a
			// timeout wins over a late success, on every rank alike.
			o.State, o.Rank, o.Reason = TimedOut, exp.rank, exp.reason
		}
		r.last = o
		if !o.Resolved {
			return
		}
		r.out = &o
		g.log.Debug("group_request_resolved", "request", id, "state", o.State, "rank", o.Rank)
	}
	if r.deleted || (e != nil && e.gone) {
		return // deleted already
	}
	collector := -1
	for rank, v := range ranks {
		lost := lostFor(r, rank, now)
		if !v.stored && !lost {
			return // a live rank has yet to write its state
		}
		if collector < 0 && !lost {
			collector = rank
		}
	}
	r.del = collector == g.cfg.Rank
}

// readRanks reads each rank's state and ack of one request, and the
// expiry with the lowest rank, if any rank wrote one (expire.go).
func (g *Group) readRanks(id core.RequestID, r *request, kvs map[string]*viewKey, now []string) ([]rankView, *expiry) {
	ranks := make([]rankView, g.cfg.Size)
	var exp *expiry
	for _, k := range kvs {
		rank := k.rank
		switch k.kind {
		case 't':
			if exp == nil || k.exp.rank < exp.rank {
				e := k.exp
				exp = &e
			}
		case 's':
			if rank == g.cfg.Rank {
				continue // this rank's own: what it reported, below
			}
			ranks[rank].stored = true
			switch {
			case k.err != nil:
				ranks[rank].state, ranks[rank].reason = Failed, fmt.Sprintf("request %q: %v", id, k.err)
			case k.rec.Member != r.snap[rank]:
				ranks[rank].state = Failed
				ranks[rank].reason = fmt.Sprintf("request %q: rank %d's state was written by member %s, not by member %q that held the rank when this rank reported the request", id, rank, k.rec.Member, r.snap[rank])
			default:
				ranks[rank].state, ranks[rank].reason = k.state, k.rec.Reason
			}
		}
	}
	// This rank's own state is what it reported, whatever the keys say, and
	// counts only once it is published: a rank that resolved before and
	// then died would otherwise disagree with the ranks that count it lost.
	ranks[g.cfg.Rank].state, ranks[g.cfg.Rank].reason = 0, ""
	if r.written {
		ranks[g.cfg.Rank].state, ranks[g.cfg.Rank].reason = r.mine.State, r.mine.Reason
		ranks[g.cfg.Rank].stored = true
	}
	for rank := range ranks {
		if ranks[rank].state == 0 && lostFor(r, rank, now) {
			ranks[rank].state = Failed
			ranks[rank].reason = fmt.Sprintf("rank %d was lost (member %q, lease gone) before it reported request %q", rank, r.snap[rank], id)
		}
		if ranks[rank].state == 0 && exp != nil {
			ranks[rank].state, ranks[rank].reason = TimedOut, exp.reason
		}
	}
	return ranks, exp
}

// lostFor reports whether rank is lost for request r: it had no member when
// r was reported, or its member has changed or gone since.
func lostFor(r *request, rank int, now []string) bool {
	return r.snap[rank] == "" || now[rank] != r.snap[rank]
}

// union folds per-rank states: pending while any rank is; else a timeout
// wins, then a failure, and success only when every rank succeeded.
func union(id core.RequestID, states []State, reasons []string) Outcome {
	o := Outcome{Request: id, Rank: -1, Ranks: append([]State(nil), states...)}
	for rank, s := range states {
		if s == 0 {
			o.Pending = append(o.Pending, rank)
		}
	}
	if len(o.Pending) > 0 {
		return o
	}
	o.Resolved, o.State = true, Succeeded
	for _, want := range []State{TimedOut, Failed} {
		for rank, s := range states {
			if s == want {
				o.State, o.Rank, o.Reason = want, rank, reasons[rank]
				return o
			}
		}
	}
	return o
}
