package ledger

import "github.com/custody-dev/custody/core"

// Resolve returns the union outcome of each request, in order, as the
// view holds every rank's state. A request is Resolved once every rank
// has reported it terminal or is lost (its lease gone, or its member
// replaced, since this rank reported it); until then it is pending. A
// resolved outcome is final: Resolve returns it again unchanged, and the
// deletions it allows go out with the next Flush.
//
// Every id must have been reported by this rank first (ErrUnknownRequest);
// a bad id fails the whole call and changes nothing.
func (l *Ledger) Resolve(ids []core.RequestID) ([]Outcome, error) {
	if err := l.checkReported("resolve", ids); err != nil {
		return nil, err
	}
	b, v := &l.book, &l.view
	if l.solo() {
		out := make([]Outcome, len(ids))
		for i, id := range ids {
			r := b.reqs[id]
			if !r.phase.resolved() {
				r.out, r.phase = solved(id, r.mine), Resolved
			}
			out[i] = r.out
		}
		return out, nil
	}
	// Fold what the view has seen into what is unresolved, and into what
	// this rank may delete: only the requests whose keys changed since, or
	// all of them when membership changed.
	now := l.Members()
	fold := func(r *request) {
		if !r.phase.resolved() || r.phase.expiryLive() {
			l.fold(r, v.reqs[r.id], now)
		}
	}
	if v.allDirty {
		for _, id := range sortedKeys(b.reqs) {
			fold(b.reqs[id])
		}
	} else {
		for _, id := range sortedKeys(v.dirty) {
			if r := b.reqs[id]; r != nil {
				fold(r)
			}
		}
		for _, id := range sortedKeys(b.fresh) {
			if r := b.fresh[id]; b.reqs[id] == r {
				fold(r)
			}
		}
	}
	clear(v.dirty)
	clear(b.fresh)
	v.allDirty = false
	out := make([]Outcome, len(ids))
	for i, id := range ids {
		r := b.reqs[id]
		if r.phase.resolved() {
			out[i] = r.out
			r.phase = r.phase.returnedNow()
		} else {
			out[i] = r.last
		}
	}
	// Forget what was returned and is no longer in etcd: requests no other
	// rank's record or expiry names here, and those whose keys all went.
	for i, id := range ids {
		if out[i].Resolved && v.reqs[id] == nil {
			l.forget(id)
		}
	}
	for _, id := range sortedKeys(v.gone) {
		if l.forget(id) {
			delete(v.gone, id)
		}
	}
	l.collectOrphans(now)
	return out, nil
}

// forget drops a request this rank resolved and returned, once the view
// holds no key of it that is still in etcd (another rank's record, an
// expiry), and the view's keys of it once they are all deleted. It says
// whether nothing is left to forget.
func (l *Ledger) forget(id core.RequestID) bool {
	e, r := l.view.reqs[id], l.book.reqs[id]
	if r != nil {
		if !r.phase.returned() || (e != nil && !e.gone) {
			return false
		}
		delete(l.book.reqs, id)
	}
	if e != nil && e.gone {
		delete(l.view.reqs, id)
	}
	return true
}
