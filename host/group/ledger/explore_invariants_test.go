package ledger

import (
	"fmt"
	"strings"

	"github.com/custody-dev/custody/core"
)

// The explorer's invariants, each a rule of docs/guarantees.md, checked
// against the world's ground truth (what etcd was given, which leases
// ended, what each host was handed), never against a ledger's view.

// check runs after every input: each rank's book is read for what it
// reported and resolved (resolved), what the host awaits is still there,
// what was returned stays returned, and every pool the rank saw poisoned
// stays so (rule 11).
func (w *world) check() {
	for n, r := range w.g.ranks {
		p, l := w.procs[n], r.l
		for _, id := range sortedKeys(l.book.reqs) {
			q := l.book.reqs[id]
			if _, ok := p.reported[id]; !ok {
				p.reported[id] = q.mine.State
				p.snaps[id] = append([]string(nil), q.snap...)
				p.awaited[id] = true
			}
			switch {
			case q.phase.resolved():
				w.resolved(n, p, id, q.out)
			case p.outcomes[id].Resolved:
				w.fail("rule 10: r%d (%s): request %q, resolved %s, is pending again", n, p.member, id, renderOutcome(p.outcomes[id]))
			}
			// (A group of size 1 keeps a returned request Resolved until
			// the next Report forgets it.)
			if p.returned[id] && !q.phase.returned() && !w.solo() {
				w.fail("rule 10: r%d (%s): request %q, returned to the host, is %v again", n, p.member, id, q.phase)
			}
		}
		if l.SelfLost() {
			clear(p.awaited) // its host fails every request and restarts
		}
		for _, id := range sortedKeys(p.awaited) {
			if l.book.reqs[id] == nil {
				w.fail("rule 10: r%d (%s): request %q, which its host awaits, is forgotten before Resolve returned it", n, p.member, id)
			}
		}
		for _, pool := range sortedKeys(p.poisoned) {
			if _, ok := l.IsPoisoned(pool); !ok {
				w.fail("rule 11: r%d (%s): pool %q, which it saw poisoned, is no longer poisoned there", n, p.member, pool)
			}
		}
	}
}

// resolved checks an outcome rank n's process p holds resolved: it never
// changes (rule 10: resolution is final); when first seen, it is the
// union of what etcd holds (checkUnion) and, unless the rank knows itself
// lost (its host then fails every request), the same union every other
// rank resolved (agreement).
func (w *world) resolved(n int, p *proc, id core.RequestID, o Outcome) {
	if prev, ok := p.outcomes[id]; ok {
		if prev.State != o.State || prev.Rank != o.Rank || prev.Reason != o.Reason {
			w.fail("rule 10: r%d (%s): the outcome of %q changed from %s to %s", n, p.member, id, renderOutcome(prev), renderOutcome(o))
		}
		return
	}
	p.outcomes[id] = o
	if w.g.ranks[n].l.SelfLost() {
		return
	}
	w.checkUnion(n, p, id, o)
	if d, ok := w.decided[id]; ok {
		if d.State != o.State {
			w.fail("rule 10: r%d (%s) resolved %q %v, r%d (%s) resolved it %v", n, p.member, id, o.State, d.Rank, d.Member, d.State)
		}
		return
	}
	w.decided[id] = decision{State: o.State, Rank: n, Member: p.member}
}

// checkUnion checks that rank n resolved request id only once every rank
// was terminal in etcd (its member's state written), lost (its member's
// lease gone) or expired, and to their union: TimedOut if any rank timed
// out or an expiry was written, else Failed if any failed or was lost,
// else Succeeded. A rank's state written by another member than the one
// that held it when rank n reported the request (another process, whose
// request this is not) counts as a failure.
func (w *world) checkUnion(n int, p *proc, id core.RequestID, o Outcome) {
	if w.solo() {
		if want := p.reported[id]; o.State != want {
			w.fail("rule 10: r0 (%s) resolved %q %v, its own state %v", p.member, id, o.State, want)
		}
		return
	}
	snap := p.snaps[id]
	exp := w.expired[id]
	union := Succeeded
	var why []string
	for k := range w.cfg.size {
		var st State
		for m, s := range w.landed[k][id] {
			if m != snap[k] {
				s = Failed
			}
			st = max(st, s)
		}
		what := fmt.Sprintf("rank %d %v", k, st)
		switch {
		case st != 0:
		case snap[k] == "" || w.lost[snap[k]]:
			st, what = Failed, fmt.Sprintf("rank %d lost", k)
		case exp:
			st, what = TimedOut, fmt.Sprintf("rank %d expired", k)
		default:
			w.fail("rule 10: r%d (%s) resolved %q %v while rank %d (member %s) had written no state of it, was not lost, and no expiry was written", n, p.member, id, o.State, k, snap[k])
			return
		}
		union = max(union, st)
		why = append(why, what)
	}
	if exp {
		union = TimedOut
		why = append(why, "an expiry written")
	}
	if o.State != union {
		w.fail("rule 10: r%d (%s) resolved %q %v, but the union of what etcd holds is %v (%s)", n, p.member, id, o.State, union, strings.Join(why, ", "))
	}
}

// checkQuiet checks the group at rest: every rank resolved and returned
// every request it reported and owes no write, and nothing is left: no
// states record (its writer's, or an orphan of a lost member), no expiry
// but of a request some rank still waits on a live member for that never
// reports it (its lease ends it), no request a ledger tracks with no key
// of it left, and every rank holds every poison etcd holds (rule 11).
func (w *world) checkQuiet() {
	k := w.g.keys
	keyed := map[core.RequestID]bool{}
	for _, key := range sortedKeys(w.g.s.kvs) {
		switch {
		case strings.HasPrefix(key, k.Records()):
			rank, member, _, err := ParseRecordKey(strings.TrimPrefix(key, k.Records()), w.cfg.size)
			entries, _ := DecodeStates([]byte(w.g.s.kvs[key].value), rank, member)
			for _, e := range entries {
				keyed[e.ID] = true
			}
			w.fail("quiescence: states record %s (err %v) of %d requests is left in etcd", w.g.rel(key), err, len(entries))
		case strings.HasPrefix(key, k.Requests()):
			id, _, _ := k.parseRequestID(key)
			keyed[id] = true
			if !w.silentFor(id) {
				w.fail("quiescence: expiry %s is left in etcd, though every live rank's state of %q is in", w.g.rel(key), id)
			}
		}
	}
	for n, r := range w.g.ranks {
		p, l := w.procs[n], r.l
		if len(p.awaited) > 0 {
			w.fail("quiescence: r%d (%s) still awaits %v", n, p.member, sortedKeys(p.awaited))
		}
		if r.plan != nil || l.Stats().Unwritten > 0 {
			w.fail("quiescence: r%d (%s) has %d writes unwritten", n, p.member, l.Stats().Unwritten)
		}
		for _, id := range sortedKeys(l.book.reqs) {
			if !keyed[id] {
				w.fail("quiescence: r%d (%s) still tracks %q (%v), of which no key is left", n, p.member, id, l.book.reqs[id].phase)
			}
		}
		for _, id := range sortedKeys(l.view.reqs) {
			if !keyed[id] {
				w.fail("quiescence: r%d (%s)'s view still holds %q, of which no key is left", n, p.member, id)
			}
		}
		for _, key := range sortedKeys(w.g.s.kvs) {
			if strings.HasPrefix(key, k.Poisons()) {
				if _, ok := l.IsPoisoned(k.PoolOf(key)); !ok {
					w.fail("rule 11: r%d (%s) at rest does not hold pool %q poisoned, which etcd holds", n, p.member, k.PoolOf(key))
				}
			}
		}
	}
}

// silentFor says whether some rank's ledger still waits, for request id,
// on a live member that has written no state of it: an expiry stays then,
// until its lease ends it.
func (w *world) silentFor(id core.RequestID) bool {
	for _, r := range w.g.ranks {
		q := r.l.book.reqs[id]
		if q == nil {
			continue
		}
		for k, m := range q.snap {
			if m != "" && !w.lost[m] && w.members[k] == m {
				if _, ok := w.landed[k][id][m]; !ok {
					return true
				}
			}
		}
	}
	return false
}
