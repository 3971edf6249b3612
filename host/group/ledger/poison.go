package ledger

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"
)

// Poison is durable and topology-wide (rule 11): a poison record has no
// lease, survives every rank's restart and is seen by every rank through
// its watch (and by a rank opened later, in its first Reload). The first
// record wins. A pool counts as poisoned on this rank as soon as this rank
// poisons it, whether or not the write then lands, and a Reload keeps it
// so: a pool is never less poisoned than this rank knows. Only an
// operator clears it.

// Poison marks pool (a valid name) poisoned at once, unless it is
// already, and returns the transaction that publishes the record (at is
// the time of the poisoning, for the record; a group of size 1 writes
// nothing: the transaction is empty).
func (l *Ledger) Poison(pool, reason string, at time.Time) Txn {
	rec := PoisonRecord{Pool: pool, Reason: Truncate(reason), Rank: l.cfg.Rank, Member: l.cfg.Member, At: at}
	if _, ok := l.poison[pool]; !ok {
		l.poison[pool] = rec
	}
	l.log.Error("group_pool_poisoned", "engine", l.cfg.Engine, "pool", pool, "rank", l.cfg.Rank, "reason", rec.Reason)
	if l.solo() {
		return Txn{}
	}
	raw, _ := json.Marshal(rec)
	key := l.keys.Poison(pool)
	return Txn{
		What: fmt.Sprintf("publishing the poison of pool %q (it stays poisoned on this rank; call Poison again)", pool),
		If:   []Cmp{absent(key)},
		Then: []Op{put(key, string(raw), 0)},
	}
}

// ClearPoison returns the transaction that removes pool's poison: an
// operator's action, taken once the pool's memory is known safe again.
// The ranks see it through their watch. A group of size 1 clears it at
// once and writes nothing.
func (l *Ledger) ClearPoison(pool string) Txn {
	l.log.Warn("group_pool_poison_cleared", "engine", l.cfg.Engine, "pool", pool, "rank", l.cfg.Rank)
	if l.solo() {
		delete(l.poison, pool)
		return Txn{}
	}
	return Txn{
		What: fmt.Sprintf("clearing the poison of pool %q", pool),
		Then: []Op{del(l.keys.Poison(pool), false)},
	}
}

// Poisoned lists the poisoned pools, sorted by name, as this rank knows
// them (its own Poison calls and every record its watch has seen).
func (l *Ledger) Poisoned() []PoisonRecord {
	out := make([]PoisonRecord, 0, len(l.poison))
	for _, r := range l.poison {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pool < out[j].Pool })
	return out
}

// IsPoisoned reports whether pool is poisoned, and the record.
func (l *Ledger) IsPoisoned(pool string) (PoisonRecord, bool) {
	r, ok := l.poison[pool]
	return r, ok
}

// applyPoison applies one poison event.
func (l *Ledger) applyPoison(ev Event) {
	pool := l.keys.PoolOf(ev.Key)
	if ev.Delete {
		delete(l.poison, pool)
	} else {
		l.poison[pool] = DecodePoison(pool, ev.Value)
	}
}

// reloadPoison replaces the poison set with kvs, but for the pools this
// member poisoned itself: they stay poisoned, whether or not their record
// landed (a pool is never less poisoned than this rank knows). An
// operator's clear of such a record while the watch was broken is seen
// at this member's restart (as running ranks keep refusing a cleared
// pool, docs/ranks.md).
func (l *Ledger) reloadPoison(kvs []KV) {
	next := map[string]PoisonRecord{}
	for _, kv := range kvs {
		pool := l.keys.PoolOf(kv.Key)
		next[pool] = DecodePoison(pool, kv.Value)
	}
	for pool, rec := range l.poison {
		if _, ok := next[pool]; !ok && rec.Rank == l.cfg.Rank && rec.Member == l.cfg.Member {
			next[pool] = rec
		}
	}
	l.poison = next
}
