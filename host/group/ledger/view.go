package ledger

import (
	"fmt"
	"strings"

	"github.com/custody-dev/custody/core"
)

// The view is this rank's copy of its engine's keys (members, requests,
// poison), fed by one watch of the engine's prefix. One watch, not one per
// kind of key, so that every event is applied in etcd's revision order: a
// rank's terminal state and the loss of its membership are seen in the
// order they happened, by every rank alike, which the union needs (a rank
// that reported before it died is not counted lost for that request).
// Resolve reads the view and never etcd.

// view holds the request keys the watch has applied, up to rev.
type view struct {
	// rev is the last revision the view is known to hold every event of.
	rev int64
	// reqs maps a request id to what the view holds of it: each rank's
	// state read from the states records of other members, and the
	// expiries, by etcd key, decoded once as they arrive. It holds what
	// etcd holds (bounded by etcd's quota), and the keys deleted since
	// Resolve last folded them (gone lists the ids whose keys all went): a
	// rank that has yet to fold a request when another rank deletes its
	// record folds what it saw.
	reqs map[core.RequestID]*viewEntry
	gone map[core.RequestID]struct{}
	// records are the states records of other writers the view holds, by
	// key (this member's own are never decoded: the union reads this
	// rank's state from what it reported); orphans those no live member
	// deletes as its own (collect.go).
	records map[string]*viewRecord
	orphans map[string]*viewRecord
	// dirty lists the ids whose keys changed since Resolve last folded
	// them; allDirty says membership changed (or the view was reloaded),
	// which may change any request.
	dirty    map[core.RequestID]struct{}
	allDirty bool
}

// viewEntry is one request's keys; gone once every one was deleted.
type viewEntry struct {
	keys map[string]*viewKey
	// live counts the keys not yet deleted.
	live int
	gone bool
}

// viewRecord is a states record of another writer: its rank and member,
// and the requests it holds a state of.
type viewRecord struct {
	rank   int
	member string
	ids    []core.RequestID
}

// viewKey is what one key says of a request: a rank's state ('s', from a
// states record) or an expiry ('t').
type viewKey struct {
	kind byte
	rank int
	// states: the record's member, the state and reason, or why the
	// record is malformed.
	member string
	state  State
	reason string
	err    error
	// expiries.
	exp  Expiry
	gone bool
}

func newView() view {
	return view{reqs: map[core.RequestID]*viewEntry{}, gone: map[core.RequestID]struct{}{},
		records: map[string]*viewRecord{}, orphans: map[string]*viewRecord{},
		dirty: map[core.RequestID]struct{}{}}
}

// put adds one key of id to the view.
func (v *view) put(id core.RequestID, key string, k *viewKey) {
	e := v.reqs[id]
	if e == nil || e.gone {
		// A new request, or the id issued again after its keys went.
		e = &viewEntry{keys: map[string]*viewKey{}}
		v.reqs[id] = e
	}
	if old := e.keys[key]; old == nil || old.gone {
		e.live++
	}
	e.keys[key] = k
	v.dirty[id] = struct{}{}
}

// drop marks one key of id deleted, and the entry gone once it holds no
// key left. It says whether the view held the key.
func (v *view) drop(id core.RequestID, key string) bool {
	e := v.reqs[id]
	if e == nil {
		return false
	}
	k := e.keys[key]
	if k == nil || k.gone {
		return false
	}
	k.gone = true
	e.live--
	v.dirty[id] = struct{}{}
	if e.live == 0 {
		// Kept until Resolve folded it (view.reqs).
		e.gone = true
		v.gone[id] = struct{}{}
	}
	return true
}

// advance records that the view holds everything up to rev.
func (v *view) advance(rev int64) { v.rev = max(v.rev, rev) }

// Apply applies one watch response's events, in order: the view then holds
// every event up to the last one's revision (a watch catching up may send
// later ones next). It says whether anything a rank resolves or reads
// changed (any request key but this member's own states, membership or
// poison; or this rank's own state of an unresolved request counts from
// now on, see counts): the caller signals its waiters then.
func (l *Ledger) Apply(evs []Event) bool {
	changed := false
	for _, ev := range evs {
		changed = l.applyEvent(ev) || changed
		l.view.advance(ev.Rev)
	}
	return l.caughtUp() || changed
}

// Progress records a progress notice of the watch, sent only to a watch
// that has caught up: the view holds every event up to rev. It says, as
// Apply does, whether the caller signals its waiters.
func (l *Ledger) Progress(rev int64) bool {
	l.view.advance(rev)
	return l.caughtUp()
}

// applyEvent applies one event to the view, membership or poison, and
// says whether it changed what a rank resolves or reads.
func (l *Ledger) applyEvent(ev Event) bool {
	key := ev.Key
	switch {
	case strings.HasPrefix(key, l.keys.Records()):
		rank, member, seq, err := ParseRecordKey(key[len(l.keys.Records()):], l.cfg.Size)
		if err != nil {
			l.log.Error("group_malformed_key", "key", fmt.Sprintf("%.200q", key), "error", err)
			return false
		}
		if ev.Delete {
			return l.dropRecord(key)
		}
		if l.ownRecord(rank, member, seq) {
			// This rank's own states coming back wake no one: nothing
			// this rank resolves changes with them (fold.go reads its own
			// state from what it reported), and a host woken for them
			// would resolve for nothing once per write.
			return false
		}
		return l.applyRecord(key, rank, member, ev.Value)
	case strings.HasPrefix(key, l.keys.Members()):
		l.applyMember(ev)
		l.reorphan()
		l.view.allDirty = true
		return true
	case strings.HasPrefix(key, l.keys.Poisons()):
		l.applyPoison(ev)
		return true
	case strings.HasPrefix(key, l.keys.Requests()):
		id, rest, err := l.keys.parseRequestID(key)
		if err != nil {
			l.log.Error("group_malformed_key", "key", fmt.Sprintf("%.200q", key), "error", err)
			return false
		}
		if ev.Delete {
			return l.view.drop(id, key)
		}
		rank, err := parseRequestKey(rest, l.cfg.Size)
		if err != nil {
			l.log.Error("group_malformed_key", "request", id, "key", fmt.Sprintf("%.200q", key), "error", err)
			return false
		}
		l.view.put(id, key, &viewKey{kind: 't', rank: rank, exp: DecodeExpiry(id, ev.Value, rank)})
		return true
	default:
		l.log.Error("group_unexpected_key", "key", fmt.Sprintf("%.200q", key))
	}
	return false
}

// applyRecord adds a states record of another writer to the view: each
// request it names gets the rank's state, or a failure where the record
// is malformed. A record that names no request it can be trusted for is
// logged and changes nothing.
func (l *Ledger) applyRecord(key string, rank int, member string, value []byte) bool {
	entries, err := DecodeStates(value, rank, member)
	if err != nil {
		l.log.Error("group_malformed_states", "key", fmt.Sprintf("%.200q", key), "requests", len(entries), "error", err)
	}
	v := &l.view
	if old := v.records[key]; old != nil {
		// Rewritten in place (only by a writer that is not a rank).
		for _, id := range old.ids {
			v.drop(id, key)
		}
	}
	rec := &viewRecord{rank: rank, member: member, ids: make([]core.RequestID, 0, len(entries))}
	for _, en := range entries {
		v.put(en.ID, key, &viewKey{kind: 's', rank: rank, member: member, state: en.State, reason: en.Reason, err: err})
		rec.ids = append(rec.ids, en.ID)
	}
	v.records[key] = rec
	if l.orphan(rec) {
		v.orphans[key] = rec
	}
	return len(rec.ids) > 0
}

// dropRecord applies the deletion of a states record.
func (l *Ledger) dropRecord(key string) bool {
	v := &l.view
	rec := v.records[key]
	if rec == nil {
		return false // this member's own, or never seen
	}
	delete(v.records, key)
	delete(v.orphans, key)
	touched := false
	for _, id := range rec.ids {
		touched = v.drop(id, key) || touched
	}
	return touched
}

// Reload replaces the view, membership and poison with kvs, read at rev,
// as after a broken watch. What went while the watch was broken is kept
// as gone, like a deletion seen (a write-once state read before stays
// what it was). The caller signals its waiters.
func (l *Ledger) Reload(kvs []KV, rev int64) {
	var members, poison []KV
	v := &l.view
	old := v.reqs
	v.reqs, v.records = map[core.RequestID]*viewEntry{}, map[string]*viewRecord{}
	for _, kv := range kvs {
		switch {
		case strings.HasPrefix(kv.Key, l.keys.Members()):
			members = append(members, kv)
		case strings.HasPrefix(kv.Key, l.keys.Poisons()):
			poison = append(poison, kv)
		case strings.HasPrefix(kv.Key, l.keys.Records()), strings.HasPrefix(kv.Key, l.keys.Requests()):
			l.applyEvent(Event{Key: kv.Key, Value: kv.Value, Rev: rev})
		}
	}
	for id, e := range old {
		if v.reqs[id] == nil {
			e.gone = true
			v.reqs[id] = e
			v.gone[id] = struct{}{}
		}
	}
	v.allDirty = true
	l.reloadMembers(members, rev)
	l.reloadPoison(poison)
	l.reorphan()
	v.advance(rev)
	l.caughtUp()
}

// HoldsRecord reports whether the view holds the states record under key
// as another writer's.
func (l *Ledger) HoldsRecord(key string) bool { return l.view.records[key] != nil }
