package ledger

import (
	"fmt"
	"time"

	"github.com/custody-dev/custody/core"
)

// A live rank that never reports a request would keep it pending on every
// rank for ever: its lease stays alive, so it is never lost. Expiries
// bound that wait (rule 13). A rank that has waited past its hold cap for
// the others writes an expiry under req/<id>/t/<rank>, in a transaction
// that succeeds only while no rank it saw pending has written any states
// since (their last/<rank> keys) and this rank is still a member. From
// then on every rank reads the request as TimedOut: the ranks still
// pending count as timed out, and the expiry decides the union even where
// the late states arrive afterwards (a timeout wins over a late success).
// A rank that resolved before the expiry was written saw every state key
// present, so the transaction that would write it fails: no two ranks
// ever resolve a request differently.
//
// Nothing needs the states records of an expired request any more: each
// rank deletes its own once every other request in it is resolved, as if
// the ranks the expiry found pending had reported (fold.go). The expiry
// outlives them. The lowest live rank deletes it once every live rank's
// state is in; a rank that never reports leaves it to its lease, which
// ends ExpiryTTL after it was written (at least ten times the wait that
// led to it). A silent rank that reports before then finds the expiry and
// resolves the request TimedOut like the others; one that reports later
// finds no key of the request at all, waits out its own hold cap and
// expires it in turn, TimedOut again. Only a rank reporting past
// ExpiryTTL while another rank's record naming the request is still in
// etcd could resolve it differently, and such a record outlives the
// expiry only while another request in it stays unresolved and unexpired
// for that long.

// CheckExpire refuses an Expire of an invalid id or of one this rank never
// reported.
func (l *Ledger) CheckExpire(ids []core.RequestID) error { return l.checkReported("expire", ids) }

// ExpiryDue folds request id (reported) as the view holds it now and, if
// it is still pending on other ranks, says which ranks it waits for (this
// rank never: its own state is its to write) and the revision up to which
// the view holds every write: the expiry is written only if none of them
// wrote since.
func (l *Ledger) ExpiryDue(id core.RequestID) (pending []int, rev int64, due bool) {
	r := l.book.reqs[id]
	if !r.phase.resolved() {
		l.fold(r, l.view.reqs[id], l.Members())
	}
	for _, p := range r.last.Pending {
		// This rank's own state is its to write (the next Flush), not to
		// expire: it may be in etcd already, its answer lost.
		if p != l.cfg.Rank {
			pending = append(pending, p)
		}
	}
	if r.phase.resolved() || len(pending) == 0 {
		return nil, 0, false
	}
	return pending, l.view.rev, true
}

// ExpiryTxn is the transaction that writes the expiry of id, under lease,
// for the ranks pending in the view at revision rev, after waiting waited:
// it succeeds only while this rank is a member, none of them wrote states
// since, and each still holds the membership the view has of it. A rank
// lost meanwhile is Failed for the request on every rank that folds its
// loss; an expiry written past that loss would make it TimedOut on the
// ranks that fold the expiry first.
func (l *Ledger) ExpiryTxn(id core.RequestID, pending []int, rev int64, waited time.Duration, lease int64) Txn {
	memberKey := l.keys.Member(l.cfg.Rank)
	ifs := []Cmp{leaseIs(memberKey, l.lease)}
	for _, p := range pending {
		ifs = append(ifs, unchangedSince(l.keys.Last(p), rev))
		if m := l.members.view[p]; m.present && m.lease != 0 {
			ifs = append(ifs, leaseIs(l.keys.Member(p), m.lease))
		}
	}
	return Txn{
		What: fmt.Sprintf("expiring request %q", id),
		If:   ifs,
		Then: []Op{put(l.keys.Expiry(string(id), l.cfg.Rank), encodeExpiry(l.cfg.Rank, l.cfg.Member, pending, waited), lease)},
		Else: []Op{get(memberKey)},
	}
}

// ExpiryWritten reads the answer to ExpiryTxn: whether the expiry was
// written, and etcd's revision (once the view holds it, a pending rank's
// write that refused the expiry is in the view: ExpiryDue looks again).
// An expiry refused because this rank's membership is gone is
// ErrSessionLost.
func (l *Ledger) ExpiryWritten(id core.RequestID, pending []int, waited time.Duration, res Result) (bool, int64, error) {
	if res.Succeeded {
		l.log.Warn("group_request_expired", "request", id, "pending", fmt.Sprint(pending), "waited", waited)
		return true, res.Rev, nil
	}
	if kvs := res.rangeOf(0); len(kvs) == 0 || kvs[0].Lease != l.lease {
		return false, 0, l.errorf("expiring request %q: this rank's membership key is gone: %w; fail every request and restart the host", id, ErrSessionLost)
	}
	return false, res.Rev, nil
}

// ExpiryGaveUp is the error of an Expire whose pending ranks wrote states
// after each of attempts views of them.
func (l *Ledger) ExpiryGaveUp(id core.RequestID, attempts int) error {
	return l.errorf("expiring request %q: ranks %v wrote states after each of %d views of them: %w; expire it again later", id, l.book.reqs[id].last.Pending, attempts, ErrCoordinator)
}
