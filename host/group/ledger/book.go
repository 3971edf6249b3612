package ledger

import "github.com/custody-dev/custody/core"

// book is what this rank reported and wrote: each request until it is
// forgotten, and each states record of this member until it is deleted.
type book struct {
	reqs map[core.RequestID]*request
	// fresh lists the requests whose own side changed (reported, written)
	// since Resolve last folded them.
	fresh map[core.RequestID]*request
	// records are this member's states records until deleted, by key;
	// collect the records of other writers that this rank deletes with
	// its next write (collect.go).
	records map[string]*record
	collect map[string]struct{}
	// seq is the last sequence number of a states record this member
	// allocated; taken holds those whose key another writer took first:
	// the view decodes what lies there as a foreign record. Never shrinks
	// (one entry per key taken).
	seq   uint64
	taken map[uint64]struct{}
	// awaiting are this member's records that landed at a revision the
	// view has yet to reach (counts).
	awaiting []*record
}

func newBook() book {
	return book{reqs: map[core.RequestID]*request{}, fresh: map[core.RequestID]*request{},
		records: map[string]*record{}, collect: map[string]struct{}{}, taken: map[uint64]struct{}{}}
}

// request is one id this rank reported, until it is forgotten.
type request struct {
	id core.RequestID
	// snap is each rank's member id when this rank reported the request: a
	// rank whose member has changed since is lost for this request.
	snap  []string
	mine  Terminal
	phase Phase
	// rec is the states record of this member that carries mine (nil
	// until the first flush allocates one).
	rec *record
	// out is the union once resolved; last the union of the last fold
	// while pending.
	out, last Outcome
}

// written: this rank's state of the request is in etcd.
func (r *request) written() bool { return r.rec != nil && r.rec.written }

// record is one states record of this member: the states of one write.
type record struct {
	key   string
	seq   uint64
	reqs  []*request
	value string
	// left counts its requests not yet resolved. written: it landed, at
	// revision rev; due: every request in it is resolved, and this rank
	// deletes it with its next write.
	left         int
	written, due bool
	rev          int64
}

// newRecord allocates a states record of this member for reqs. A request
// may be resolved already (its states moved to a new key after an expiry
// resolved it): the record counts only those still to resolve, and is due
// at once when none is.
func (l *Ledger) newRecord(reqs []*request) *record {
	b := &l.book
	b.seq++
	ts := make([]Terminal, len(reqs))
	left := 0
	for i, r := range reqs {
		ts[i] = r.mine
		if !r.phase.resolved() {
			left++
		}
	}
	rec := &record{key: l.keys.Record(l.cfg.Rank, l.cfg.Member, b.seq), seq: b.seq, reqs: reqs, value: EncodeStates(l.cfg.Rank, l.cfg.Member, ts), left: left, due: left == 0}
	for _, r := range reqs {
		r.rec = rec
	}
	b.records[rec.key] = rec
	return rec
}

// landed records that rec is in etcd.
func (l *Ledger) landed(rec *record, rev int64) {
	rec.written, rec.rev = true, rev
	for _, r := range rec.reqs {
		l.book.fresh[r.mine.Request] = r
	}
	if !l.counts(rec) {
		l.book.awaiting = append(l.book.awaiting, rec)
	}
}

// counts reports whether this rank's own states in rec count in its
// unions: rec is in etcd, and the view holds every event before the write
// that put it there. Counted any sooner, a rank would miss what another
// wrote between its view and its write (an expiry of it, written while it
// was pending, which decides the union on every rank that sees it).
func (l *Ledger) counts(rec *record) bool {
	return rec != nil && rec.written && rec.rev-1 <= l.view.rev
}

// caughtUp is called once the view advanced: the requests of this
// member's records whose own state counts from now on are folded at the
// next Resolve. It says whether one of them is unresolved (its waiters
// should be woken).
func (l *Ledger) caughtUp() bool {
	b := &l.book
	changed := false
	n := 0
	for _, rec := range b.awaiting {
		if !l.counts(rec) {
			b.awaiting[n] = rec
			n++
			continue
		}
		for _, r := range rec.reqs {
			if b.reqs[r.id] == r && !r.phase.resolved() {
				b.fresh[r.id] = r
				changed = true
			}
		}
	}
	clear(b.awaiting[n:])
	b.awaiting = b.awaiting[:n]
	return changed
}

// resolvedIn counts r resolved in the states record that carries it,
// which is deleted once every request in it is: every rank's state of
// them is in, lost or expired, so no rank still needs it.
func (l *Ledger) resolvedIn(r *request) {
	if rec := r.rec; rec != nil {
		if rec.left--; rec.left == 0 {
			rec.due = true
		}
	}
}

// tookKey records that another writer took the key of rec first, holding
// got: this member's view reads that record as a foreign one, as the
// other ranks' views do (they cannot tell it from this member's), and this
// member deletes it once the requests it names are resolved
// (collect.go). It says whether the view changed.
func (l *Ledger) tookKey(rec *record, got []KV) bool {
	l.book.taken[rec.seq] = struct{}{}
	if len(got) == 1 && l.view.records[rec.key] == nil {
		return l.applyRecord(rec.key, l.cfg.Rank, l.cfg.Member, got[0].Value)
	}
	return false
}

// LastSeq is the sequence number of the last states record this member
// allocated.
func (l *Ledger) LastSeq() uint64 { return l.book.seq }
