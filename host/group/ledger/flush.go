package ledger

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Flush is one write of this rank: every states record not yet in etcd
// and every deletion due, in as few transactions as etcd allows (one
// states record each, with as many deletions as fit in maxOps). Each
// transaction is guarded by this rank's membership: once its lease is
// gone, nothing it writes lands (a lost rank is fenced out of the union).
//
// The caller runs the transactions Next hands out, one at a time, and
// hands each Result to Done; it stops at the first error, of etcd (the
// state is kept: the next Flush writes it again) or of Done. Once Next has
// nothing left, Err says whether some records went under new keys.
type Flush struct {
	l      *Ledger
	maxOps int
	puts   []*record
	dels   []deletion
	// errs and conflicts count the records whose key another writer took.
	errs      []string
	conflicts int
	// put is the record the transaction in flight writes (nil: none); n
	// the deletions it carries.
	put *record
	n   int
}

// deletion is one pending delete of a Flush.
type deletion struct {
	op   Op
	done func()
}

// maxConflicts bounds how often a Flush moves states to a new record
// because their record's key held one this member did not write.
const maxConflicts = 3

// Flush plans this rank's next write; maxOps is etcd's limit on the
// operations of one transaction.
func (l *Ledger) Flush(maxOps int) *Flush {
	b := &l.book
	var loose []*request
	for _, r := range b.reqs {
		if !r.written() && r.rec == nil {
			loose = append(loose, r)
		}
	}
	sort.Slice(loose, func(i, j int) bool { return loose[i].id < loose[j].id })
	for len(loose) > 0 {
		n := min(len(loose), MaxRecordStates)
		l.newRecord(loose[:n])
		loose = loose[n:]
	}
	f := &Flush{l: l, maxOps: maxOps}
	for _, key := range sortedKeys(b.records) {
		rec := b.records[key]
		switch {
		case !rec.written:
			f.puts = append(f.puts, rec)
		case rec.due:
			f.dels = append(f.dels, deletion{del(key, false), func() { delete(b.records, key) }})
		}
	}
	for _, key := range sortedKeys(b.collect) {
		f.dels = append(f.dels, deletion{del(key, false), func() { delete(b.collect, key) }})
	}
	for _, id := range sortedKeys(b.reqs) {
		if r := b.reqs[id]; r.phase.expiryDue() {
			f.dels = append(f.dels, deletion{del(l.keys.Request(string(id)), true), func() { r.phase = r.phase.expiriesDeleted() }})
		}
	}
	return f
}

// Next is the next transaction to run, if any.
func (f *Flush) Next() (Txn, bool) {
	if len(f.puts) == 0 && len(f.dels) == 0 {
		return Txn{}, false
	}
	l := f.l
	memberKey := l.keys.Member(l.cfg.Rank)
	t := Txn{If: []Cmp{leaseIs(memberKey, l.lease)}, Else: []Op{get(memberKey)}}
	f.put = nil
	if len(f.puts) > 0 {
		f.put = f.puts[0]
		t.If = append(t.If, absent(f.put.key))
		t.Then = append(t.Then, put(f.put.key, f.put.value, 0), put(l.keys.Last(l.cfg.Rank), l.cfg.Member, 0))
		t.Else = append(t.Else, get(f.put.key))
	}
	f.n = 0
	for f.n < len(f.dels) && len(t.Then) < f.maxOps {
		t.Then = append(t.Then, f.dels[f.n].op)
		f.n++
	}
	t.What = fmt.Sprintf("publishing %d deletions", len(f.dels))
	if f.put != nil {
		t.What = fmt.Sprintf("publishing %d terminal states (%s) and %d deletions", len(f.put.reqs), f.put.key, len(f.dels))
	}
	return t, true
}

// Done takes the answer to the transaction Next handed out. It says
// whether the view changed (a record found under a key this member
// allocated), and returns an error that ends the Flush: this rank's
// membership is gone (ErrSessionLost, and SelfLost holds from now on), a
// deletion was refused with the membership in place (ErrCoordinator), or
// too many keys were taken by other writers (ErrMalformed).
func (f *Flush) Done(res Result) (bool, error) {
	l, rec := f.l, f.put
	if res.Succeeded {
		if rec != nil {
			l.landed(rec, res.Rev)
			f.puts = f.puts[1:]
		}
		for _, d := range f.dels[:f.n] {
			d.done()
		}
		f.dels = f.dels[f.n:]
		return false, nil
	}
	if kvs := res.rangeOf(0); len(kvs) == 0 || kvs[0].Lease != l.lease {
		l.members.selfLost = true
		return true, l.errorf("publishing terminal states: this rank's membership key is gone: %w; fail every request and restart the host", ErrSessionLost)
	}
	if rec == nil {
		return false, l.errorf("deleting %d states records refused with this rank's membership in place: %w", f.n, ErrCoordinator)
	}
	// The record's key exists already: an earlier, unanswered attempt of
	// ours, or a record this member did not write.
	got := res.rangeOf(1)
	if len(got) == 1 && string(got[0].Value) == rec.value {
		rev := got[0].ModRev
		if rev == 0 {
			rev = res.Rev // not known: no earlier than etcd's revision now
		}
		l.landed(rec, rev)
		f.puts = f.puts[1:]
		return false, nil
	}
	ids := make([]string, len(rec.reqs))
	for i, r := range rec.reqs {
		ids[i] = fmt.Sprintf("%q", r.mine.Request)
	}
	f.errs = append(f.errs, fmt.Sprintf("states key %s already holds a record this member did not write (%.80q); requests %s are published under a new key, and any rank that read that record fails them", rec.key, firstValue(got), strings.Join(ids, ", ")))
	changed := l.tookKey(rec, got)
	if f.conflicts++; f.conflicts > maxConflicts {
		return changed, f.Err()
	}
	delete(l.book.records, rec.key)
	f.puts[0] = l.newRecord(rec.reqs)
	return changed, nil
}

// Err is the error of the records moved to new keys, once Next has nothing
// left (nil if none was).
func (f *Flush) Err() error {
	if len(f.errs) == 0 {
		return nil
	}
	return f.l.errorf("%s: %w", strings.Join(f.errs, "; "), ErrMalformed)
}

func firstValue(kvs []KV) []byte {
	if len(kvs) == 0 {
		return nil
	}
	return kvs[0].Value
}

// sortedKeys is m's keys in order, so that what the ledger plans does not
// depend on the order of a map.
func sortedKeys[K ~string, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
