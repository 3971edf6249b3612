package ledger

import (
	"fmt"

	"github.com/custody-dev/custody/core"
)

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

// fold folds one request's keys, as the view holds them, into the
// request: its outcome once every rank is terminal; then what it owes. A
// request resolves only when every rank's state is in, lost or expired,
// so its states record counts it done at once: the record is deleted once
// every request in it is resolved, and no rank that has yet to report
// finds it gone (an expiry stands for the states of the ranks it found
// pending, and outlives the records). The lowest live rank deletes the
// expiries once every live rank's state is in, and another takes over if
// it goes before it did; an expiry of a rank that never reports ends with
// its lease. A rank that reported finds the keys kept in its view until
// it folded them (view.go).
func (l *Ledger) fold(r *request, e *viewEntry, now []string) {
	var kvs map[string]*viewKey
	if e != nil {
		kvs = e.keys
	}
	ranks, exp, expLive := l.readRanks(r, kvs, now)
	if !r.phase.resolved() {
		states := make([]State, len(ranks))
		reasons := make([]string, len(ranks))
		for i, v := range ranks {
			states[i], reasons[i] = v.state, v.reason
		}
		o := union(r.id, states, reasons)
		if exp != nil && o.Resolved {
			// An expiry is written only while some rank had not reported,
			// so it decides the union even once late states arrived: a
			// timeout wins over a late success, on every rank alike.
			o.State, o.Rank, o.Reason = TimedOut, exp.Rank, exp.Reason
		}
		r.last = o
		if !o.Resolved {
			return
		}
		r.out, r.phase = o, Resolved
		l.resolvedIn(r)
		l.log.Debug("group_request_resolved", "request", r.id, "state", o.State, "rank", o.Rank)
	}
	reported := true // every live rank's state is in
	for rank, v := range ranks {
		if !v.stored && !lostFor(r, rank, now) {
			reported = false
			break
		}
	}
	collector := -1
	for rank := range ranks {
		if !lostFor(r, rank, now) {
			collector = rank
			break
		}
	}
	r.phase = r.phase.folded(expLive, reported && collector == l.cfg.Rank)
}

// readRanks reads each rank's state of one request, the expiry with the
// lowest rank if any rank wrote one (expire.go), and whether an expiry
// key is still in etcd.
func (l *Ledger) readRanks(r *request, kvs map[string]*viewKey, now []string) ([]rankView, *Expiry, bool) {
	id := r.id
	ranks := make([]rankView, l.cfg.Size)
	var exp *Expiry
	expLive := false
	// A record under this rank's number that this member did not write
	// (another process's, or a forgery) can only fail the request here.
	var foreign rankView
	for _, key := range sortedKeys(kvs) {
		k := kvs[key]
		switch k.kind {
		case 't':
			expLive = expLive || !k.gone
			if exp == nil || k.exp.Rank < exp.Rank {
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
			if k.rank == l.cfg.Rank {
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
	// is published (a rank that resolved before and then died would
	// otherwise disagree with the ranks that count it lost), and the view
	// holds every event before its write (counts).
	if l.counts(r.rec) {
		ranks[l.cfg.Rank] = worse(rankView{state: r.mine.State, reason: r.mine.Reason, stored: true}, foreign)
	}
	for rank := range ranks {
		if ranks[rank].state == 0 && lostFor(r, rank, now) {
			ranks[rank].state = Failed
			ranks[rank].reason = fmt.Sprintf("rank %d was lost (member %q, lease gone) before it reported request %q", rank, r.snap[rank], id)
		}
		if ranks[rank].state == 0 && exp != nil {
			ranks[rank].state, ranks[rank].reason = TimedOut, exp.Reason
		}
	}
	return ranks, exp, expLive
}

// lostFor reports whether rank is lost for request r: it had no member when
// r was reported, or its member has changed or gone since.
func lostFor(r *request, rank int, now []string) bool {
	return r.snap[rank] == "" || now[rank] != r.snap[rank]
}

// solved is the outcome of a request of a group of size 1: this rank's
// own state.
func solved(id core.RequestID, mine Terminal) Outcome {
	return union(id, []State{mine.State}, []string{mine.Reason})
}
