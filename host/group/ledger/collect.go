package ledger

// Every states record is deleted by exactly one rank: its writer, once
// every rank's state of each of its requests is in or expired (book.go).
// A record no live member deletes as its own is an orphan: its member no
// longer holds its rank (the lowest live rank deletes it), or it lies
// under this member's own keys without this member having written it (a
// forgery, or a writer that took the key first: this member deletes it).
// Either goes once the requests it names no longer wait on this rank: a
// lost rank's state counts for the requests it reported before it went,
// and is read from the view of a rank that saw it until folded, never
// again from etcd.

// ownRecord says whether a states key is one this member allocated and
// wrote: its records are never decoded.
func (l *Ledger) ownRecord(rank int, member string, seq uint64) bool {
	if rank != l.cfg.Rank || member != l.cfg.Member || seq > l.book.seq {
		return false
	}
	_, taken := l.book.taken[seq]
	return !taken
}

// orphan says whether a states record of another writer is one no live
// member deletes as its own.
func (l *Ledger) orphan(rec *viewRecord) bool {
	return l.members.view[rec.rank].member != rec.member || l.foreign(rec)
}

// foreign says whether a states record of another writer lies under this
// member's own keys.
func (l *Ledger) foreign(rec *viewRecord) bool {
	return rec.rank == l.cfg.Rank && rec.member == l.cfg.Member
}

// reorphan recomputes which states records are orphans, after membership
// changed.
func (l *Ledger) reorphan() {
	v := &l.view
	clear(v.orphans)
	for key, rec := range v.records {
		if l.orphan(rec) {
			v.orphans[key] = rec
		}
	}
}

// collectOrphans marks for deletion with the next write the orphans this
// rank deletes (all of them on the lowest live rank, the foreign ones
// under this member's keys on any) whose requests are all resolved here
// or were never reported here.
func (l *Ledger) collectOrphans(now []string) {
	if len(l.view.orphans) == 0 {
		return
	}
	lowest := l.lowestLive(now)
	for key, rec := range l.view.orphans {
		if _, ok := l.book.collect[key]; ok || !(lowest || l.foreign(rec)) {
			continue // collected already, or by a lower rank
		}
		done := true
		for _, id := range rec.ids {
			if r := l.book.reqs[id]; r != nil && !r.phase.resolved() {
				done = false
				break
			}
		}
		if done {
			l.book.collect[key] = struct{}{}
		}
	}
}
