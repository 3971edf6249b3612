package group

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/host/group/ledger"
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

// request is one id this rank reported, until it is forgotten.
type request struct {
	// snap is each rank's member id when this rank reported the request: a
	// rank whose member has changed since is lost for this request.
	snap    []string
	mine    Terminal
	written bool
	// batch is the states record of this member that carries mine.
	batch *batch
	out   *Outcome
	last  Outcome
	// returned: Resolve has returned out. complete: every live rank's
	// state is in (its batch counts it done). expLive: the view holds an
	// expiry of it still in etcd; delExp: this rank (the lowest live one)
	// deletes them with the next Report; expDeleted: it did.
	returned, complete, expLive, delExp, expDeleted bool
}

// batch is one states record of this member: the states of one write.
type batch struct {
	key   string
	seq   uint64
	reqs  []*request
	value string
	// left counts its requests not yet complete. written: it landed;
	// del: every request in it is complete, and this rank deletes it with
	// the next Report.
	left         int
	written, del bool
}

type requests struct {
	m map[core.RequestID]*request
	// fresh lists the requests whose own side changed (reported, written)
	// since Resolve last folded them.
	fresh map[core.RequestID]*request
	// batches are this member's states records until deleted, by key;
	// orphans the records of members gone from their rank that this rank,
	// the lowest live one, deletes with the next Report.
	batches map[string]*batch
	orphans map[string]struct{}
	// writes and reads count etcd transactions, for Stats.
	writes, reads atomic.Uint64
}

func newRequests() requests {
	return requests{m: map[core.RequestID]*request{}, fresh: map[core.RequestID]*request{},
		batches: map[string]*batch{}, orphans: map[string]struct{}{}}
}

// Stats counts the etcd transactions Report and Resolve made.
type Stats struct {
	WriteTxns uint64
	ReadTxns  uint64
	// InFlight is the number of request ids this rank still tracks.
	InFlight int
	// Unwritten is the number of writes (states, deletions) waiting for
	// the next Report.
	Unwritten int
}

// Stats returns the counters since Open.
func (g *Group) Stats() Stats {
	g.reqMu.Lock()
	defer g.reqMu.Unlock()
	st := Stats{WriteTxns: g.reqs.writes.Load(), ReadTxns: g.reqs.reads.Load(), InFlight: len(g.reqs.m)}
	if !g.cfg.Solo() {
		for _, r := range g.reqs.m {
			if !r.written || r.delExp {
				st.Unwritten++
			}
		}
		for _, b := range g.reqs.batches {
			if b.del {
				st.Unwritten++
			}
		}
		st.Unwritten += len(g.reqs.orphans)
	}
	return st
}

// Report records this rank's local terminal states and publishes them in
// one states record (more past ledger.MaxRecordStates), with the deletion of this
// member's records whose requests every rank's state is in, and of the
// records the group no longer needs, in one etcd transaction (more only
// past etcd's operations per transaction). Call it once per round, with
// the round's new terminal states (possibly none).
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
		if err := ledger.CheckRequestID(t.Request); err != nil {
			return fmt.Errorf("group %q rank %d: report: %w", g.cfg.Engine, g.cfg.Rank, err)
		}
		if !t.State.Terminal() {
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
		t.Reason = ledger.Truncate(t.Reason)
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

// newBatch allocates a states record of this member for reqs. Called with
// reqMu held.
func (g *Group) newBatch(reqs []*request) *batch {
	seq := g.ownSeq.Add(1)
	ts := make([]Terminal, len(reqs))
	for i, r := range reqs {
		ts[i] = r.mine
	}
	b := &batch{key: g.keys.Record(g.cfg.Rank, g.member, seq), seq: seq, reqs: reqs, value: ledger.EncodeStates(g.cfg.Rank, g.member, ts), left: len(reqs)}
	for _, r := range reqs {
		r.batch = b
	}
	g.reqs.batches[b.key] = b
	return b
}

// deletion is one pending delete of flush.
type deletion struct {
	op   clientv3.Op
	done func()
}

// maxConflicts bounds how often flush moves states to a new record
// because their record's key held one this member did not write.
const maxConflicts = 3

// flush writes every pending states record and deletion, in as few
// transactions as etcd allows: one states record each, with as many
// deletions as fit. Each transaction is guarded by this rank's membership:
// once its lease is gone, nothing it writes lands (a lost rank is fenced
// out of the union). Called with reqMu held.
func (g *Group) flush(ctx context.Context) error {
	var loose []*request
	for _, r := range g.reqs.m {
		if !r.written && r.batch == nil {
			loose = append(loose, r)
		}
	}
	for len(loose) > 0 {
		n := min(len(loose), ledger.MaxRecordStates)
		g.newBatch(loose[:n])
		loose = loose[n:]
	}
	var puts []*batch
	var dels []deletion
	for key, b := range g.reqs.batches {
		switch {
		case !b.written:
			puts = append(puts, b)
		case b.del:
			dels = append(dels, deletion{clientv3.OpDelete(key), func() { delete(g.reqs.batches, key) }})
		}
	}
	sort.Slice(puts, func(i, j int) bool { return puts[i].key < puts[j].key })
	for key := range g.reqs.orphans {
		dels = append(dels, deletion{clientv3.OpDelete(key), func() { delete(g.reqs.orphans, key) }})
	}
	for id, r := range g.reqs.m {
		if r.delExp {
			dels = append(dels, deletion{clientv3.OpDelete(g.keys.Request(string(id)), clientv3.WithPrefix()), func() { r.delExp, r.expDeleted = false, true }})
		}
	}
	memberKey := g.keys.Member(g.cfg.Rank)
	guard := clientv3.Compare(clientv3.LeaseValue(memberKey), "=", g.lease)
	maxOps := g.cfg.Coordinator.MaxTxnOps
	var errs []string
	conflicts := 0
	for len(puts) > 0 || len(dels) > 0 {
		ifs := []clientv3.Cmp{guard}
		var thens []clientv3.Op
		elses := []clientv3.Op{clientv3.OpGet(memberKey)}
		var b *batch
		if len(puts) > 0 {
			b = puts[0]
			ifs = append(ifs, clientv3.Compare(clientv3.CreateRevision(b.key), "=", 0))
			thens = append(thens, clientv3.OpPut(b.key, b.value), clientv3.OpPut(g.keys.Last(g.cfg.Rank), g.member))
			elses = append(elses, clientv3.OpGet(b.key))
		}
		n := 0
		for n < len(dels) && len(thens) < maxOps {
			thens = append(thens, dels[n].op)
			n++
		}
		octx, cancel := g.opCtx(ctx)
		resp, err := g.cli.Txn(octx).If(ifs...).Then(thens...).Else(elses...).Commit()
		cancel()
		g.reqs.writes.Add(1)
		if err != nil {
			what := fmt.Sprintf("publishing %d deletions", len(dels))
			if b != nil {
				what = fmt.Sprintf("publishing %d terminal states (%s) and %d deletions", len(b.reqs), b.key, len(dels))
			}
			return g.wrap(what, err)
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
			if b == nil {
				return fmt.Errorf("group %q rank %d: deleting %d states records refused with this rank's membership in place: %w", g.cfg.Engine, g.cfg.Rank, n, ErrCoordinator)
			}
			// The record's key exists already: an earlier, unanswered
			// attempt of ours, or a record this member did not write.
			got := resp.Responses[1].GetResponseRange().Kvs
			if len(got) == 1 && string(got[0].Value) == b.value {
				g.landed(b)
				puts = puts[1:]
				continue
			}
			ids := make([]string, len(b.reqs))
			for i, r := range b.reqs {
				ids[i] = fmt.Sprintf("%q", r.mine.Request)
			}
			errs = append(errs, fmt.Sprintf("states key %s already holds a record this member did not write (%.80q); requests %s are published under a new key, and any rank that read that record fails them", b.key, firstValue(got), strings.Join(ids, ", ")))
			g.tookKey(b, got)
			if conflicts++; conflicts > maxConflicts {
				return fmt.Errorf("group %q rank %d: %s: %w", g.cfg.Engine, g.cfg.Rank, strings.Join(errs, "; "), ErrMalformed)
			}
			delete(g.reqs.batches, b.key)
			puts[0] = g.newBatch(b.reqs)
			continue
		}
		if b != nil {
			g.landed(b)
			puts = puts[1:]
		}
		for _, d := range dels[:n] {
			d.done()
		}
		dels = dels[n:]
	}
	if len(errs) > 0 {
		return fmt.Errorf("group %q rank %d: %s: %w", g.cfg.Engine, g.cfg.Rank, strings.Join(errs, "; "), ErrMalformed)
	}
	return nil
}

// tookKey records that another writer took the key of b first, holding
// got: this member's view reads that record as a foreign one, as the other
// ranks' views do (they cannot tell it from this member's), and this
// member deletes it once the requests it names are complete
// (collectOrphans). Called with reqMu held.
func (g *Group) tookKey(b *batch, got []*mvccpb.KeyValue) {
	g.rv.mu.Lock()
	defer g.rv.mu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.taken == nil {
		g.taken = map[uint64]struct{}{}
	}
	g.taken[b.seq] = struct{}{}
	if len(got) == 1 && g.rv.batches[b.key] == nil {
		if g.applyBatch(b.key, g.cfg.Rank, g.member, got[0].Value) {
			g.notify()
		}
	}
}

func firstValue(kvs []*mvccpb.KeyValue) []byte {
	if len(kvs) == 0 {
		return nil
	}
	return kvs[0].Value
}

// landed records that b is in etcd. Called with reqMu held.
func (g *Group) landed(b *batch) {
	b.written = true
	for _, r := range b.reqs {
		r.written = true
		g.reqs.fresh[r.mine.Request] = r
	}
}

// completeReq records that every live rank's state of r is in: its states
// record is deleted once every request in it is. Called with reqMu held.
func (g *Group) completeReq(r *request) {
	if r.complete {
		return
	}
	r.complete = true
	if b := r.batch; b != nil {
		if b.left--; b.left == 0 {
			b.del = true
		}
	}
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
// again unchanged, and the deletions it allows go out with the next Report.
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
		if err := ledger.CheckRequestID(id); err != nil {
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
	// this rank may delete: only the requests whose keys changed since, or
	// all of them when membership changed. The membership read under the
	// view's lock is the one the view was applied with.
	g.rv.mu.Lock()
	defer g.rv.mu.Unlock()
	now := g.members()
	fold := func(id core.RequestID, r *request) {
		if r.out == nil || !r.complete || r.expLive {
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
	// Forget what was returned and is no longer in etcd: requests no other
	// rank's record or expiry names here, and those whose keys all went.
	for i, id := range ids {
		if out[i].Resolved && g.rv.reqs[id] == nil {
			g.forget(id)
		}
	}
	for id := range g.rv.gone {
		if g.forget(id) {
			delete(g.rv.gone, id)
		}
	}
	g.collectOrphans(now)
	return out, nil
}

// forget drops a request this rank resolved and returned, once the view
// holds no key of it that is still in etcd (another rank's record, an
// expiry), and the view's keys of it once they are all deleted. It says
// whether nothing is left to forget. Called with reqMu and rv.mu held.
func (g *Group) forget(id core.RequestID) bool {
	e, r := g.rv.reqs[id], g.reqs.m[id]
	if r != nil {
		if r.out == nil || !r.returned || (e != nil && !e.gone) || (e == nil && !r.complete) {
			return false
		}
		// Resolved past an expiry, a request may never complete: its
		// record's other requests need it counted once its keys are gone.
		g.completeReq(r)
		delete(g.reqs.m, id)
	}
	if e != nil && e.gone {
		delete(g.rv.reqs, id)
	}
	return true
}

// collectOrphans marks for deletion the states records of members gone
// from their rank (on the lowest live rank), and the foreign records under
// this member's own keys (view.go), whose requests no longer wait here: a
// lost rank's state counts for the requests it reported before it went,
// and is read from the view of a rank that saw it until folded (reqView),
// never again from etcd. Called with reqMu and rv.mu held.
func (g *Group) collectOrphans(now []string) {
	if len(g.rv.orphans) == 0 {
		return
	}
	lowest := false
	for rank, m := range now {
		if m != "" {
			lowest = rank == g.cfg.Rank
			break
		}
	}
	for key, b := range g.rv.orphans {
		if _, ok := g.reqs.orphans[key]; ok || !(lowest || g.foreign(b)) {
			continue // collected already, or by a lower rank
		}
		done := true
		for _, id := range b.ids {
			if r := g.reqs.m[id]; r != nil && !r.complete {
				done = false
				break
			}
		}
		if done {
			g.reqs.orphans[key] = struct{}{}
		}
	}
}

// rankView is what one request's keys say of one rank.
type rankView struct {
	state  State
	reason string
	// stored: the rank's state is in etcd (lost is false).
	stored bool
}

// worse keeps the more severe of a rank's two states (a timeout over a
// failure over a success), the first of equals.
func worse(a, b rankView) rankView {
	if b.state > a.state {
		b.stored = true
		return b
	}
	a.stored = a.stored || b.stored
	return a
}

// apply folds one request's keys into its local record: its outcome once
// every rank is terminal; and whether it is complete (every live rank's
// state in), after which this rank deletes the states record that carries
// it once every request in it is, and the lowest live rank its expiries:
// no rank that has yet to report finds them gone. A rank that reported
// finds the keys kept in its view until it folded them (view.go).
// Called with reqMu and rv.mu held.
func (g *Group) apply(id core.RequestID, r *request, e *viewEntry, now []string) {
	var kvs map[string]*viewKey
	if e != nil {
		kvs = e.keys
	}
	ranks, exp, expLive := g.readRanks(id, r, kvs, now)
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
	reported := true // every live rank's state is in
	for rank, v := range ranks {
		if !v.stored && !lostFor(r, rank, now) {
			reported = false
			break
		}
	}
	if !r.complete {
		// An expiry stands for the states of the ranks it found pending:
		// it decides the union, so no rank needs the states records any
		// more, and a rank that never reports leaves none behind. The
		// expiry itself outlives them (expire.go).
		if !reported && exp == nil {
			return // a live rank has yet to write its state
		}
		g.completeReq(r)
	}
	// The lowest live rank deletes the expiries once every live rank's
	// state is in, and another takes over if it goes before it did; an
	// expiry of a rank that never reports ends with its lease.
	collector := -1
	for rank := range ranks {
		if !lostFor(r, rank, now) {
			collector = rank
			break
		}
	}
	r.expLive = expLive
	r.delExp = expLive && reported && collector == g.cfg.Rank && !r.expDeleted
}

// readRanks reads each rank's state of one request, the expiry with the
// lowest rank if any rank wrote one (expire.go), and whether an expiry
// key is still in etcd.
func (g *Group) readRanks(id core.RequestID, r *request, kvs map[string]*viewKey, now []string) ([]rankView, *expiry, bool) {
	ranks := make([]rankView, g.cfg.Size)
	var exp *expiry
	expLive := false
	// A record under this rank's number that this member did not write
	// (another process's, or a forgery) can only fail the request here.
	var foreign rankView
	for _, k := range kvs {
		switch k.kind {
		case 't':
			expLive = expLive || !k.gone
			if exp == nil || k.exp.rank < exp.rank {
				e := k.exp
				exp = &e
			}
		case 's':
			v := rankView{stored: true}
			switch {
			case k.err != nil:
				v.state, v.reason = Failed, fmt.Sprintf("request %q: %v", id, k.err)
			case k.member != r.snap[k.rank]:
				v.state = Failed
				v.reason = fmt.Sprintf("request %q: rank %d's state was written by member %s, not by member %q that held the rank when this rank reported the request", id, k.rank, k.member, r.snap[k.rank])
			default:
				v.state, v.reason = k.state, k.reason
			}
			if k.rank == g.cfg.Rank {
				foreign = worse(foreign, v)
				continue
			}
			if ranks[k.rank].stored {
				ranks[k.rank] = worse(ranks[k.rank], v)
			} else {
				ranks[k.rank] = v
			}
		}
	}
	// This rank's own state is what it reported, and counts only once it
	// is published: a rank that resolved before and then died would
	// otherwise disagree with the ranks that count it lost.
	if r.written {
		ranks[g.cfg.Rank] = worse(rankView{state: r.mine.State, reason: r.mine.Reason, stored: true}, foreign)
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
	return ranks, exp, expLive
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
