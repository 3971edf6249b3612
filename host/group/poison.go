package group

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// maxPoisonRecord bounds a poison record read from etcd.
const maxPoisonRecord = 4096

// PoisonRecord is a pool poisoned on every rank (rule 11): a block
// of it could not be proven safe on some rank, so no rank may hand out its
// blocks again until an operator clears it.
type PoisonRecord struct {
	Pool   string    `json:"pool"`
	Reason string    `json:"reason"`
	Rank   int       `json:"rank"`
	Member string    `json:"member"`
	At     time.Time `json:"at"`
}

// Poison marks pool poisoned for the whole group, durably: the record has
// no lease, survives every rank's restart, and is seen by every rank through
// its watch (and by a rank opened later, at Open). The first record wins;
// poisoning a poisoned pool is a no-op. The pool counts as poisoned on this
// rank as soon as Poison is called, even if etcd then fails: a pool is never
// less poisoned than this rank knows. Call it when core quarantines a block.
func (g *Group) Poison(ctx context.Context, pool, reason string) error {
	if err := checkPoolName(pool); err != nil {
		return err
	}
	if err := g.checkOpen(); err != nil {
		return err
	}
	rec := PoisonRecord{Pool: pool, Reason: truncate(reason), Rank: g.cfg.Rank, Member: g.member, At: time.Now().UTC()}
	g.mu.Lock()
	if _, ok := g.poison[pool]; !ok {
		g.poison[pool] = rec
	}
	g.mu.Unlock()
	g.notify()
	g.log.Error("group_pool_poisoned", "engine", g.cfg.Engine, "pool", pool, "rank", g.cfg.Rank, "reason", rec.Reason)
	if g.cfg.Solo() {
		return nil
	}
	raw, _ := json.Marshal(rec)
	key := g.keys.poison(pool)
	octx, cancel := g.opCtx(ctx)
	defer cancel()
	_, err := g.cli.Txn(octx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(raw))).
		Commit()
	g.reqs.writes.Add(1)
	if err != nil {
		return g.wrap(fmt.Sprintf("publishing the poison of pool %q (it stays poisoned on this rank; call Poison again)", pool), err)
	}
	return nil
}

// Poisoned lists the poisoned pools, sorted by name, as this rank knows
// them now (its own Poison calls and every record its watch has seen).
func (g *Group) Poisoned() []PoisonRecord {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]PoisonRecord, 0, len(g.poison))
	for _, r := range g.poison {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pool < out[j].Pool })
	return out
}

// IsPoisoned reports whether pool is poisoned, and the record.
func (g *Group) IsPoisoned(pool string) (PoisonRecord, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.poison[pool]
	return r, ok
}

// ClearPoison removes pool's poison from etcd: an operator's action, taken
// once the pool's memory is known safe again (for instance after every
// rank's engine restarted). The ranks see it through their watch. It is the
// only way poison goes away.
func (g *Group) ClearPoison(ctx context.Context, pool string) error {
	if err := checkPoolName(pool); err != nil {
		return err
	}
	if err := g.checkOpen(); err != nil {
		return err
	}
	g.log.Warn("group_pool_poison_cleared", "engine", g.cfg.Engine, "pool", pool, "rank", g.cfg.Rank)
	if g.cfg.Solo() {
		g.mu.Lock()
		delete(g.poison, pool)
		g.mu.Unlock()
		g.notify()
		return nil
	}
	octx, cancel := g.opCtx(ctx)
	defer cancel()
	_, err := g.cli.Delete(octx, g.keys.poison(pool))
	g.reqs.writes.Add(1)
	if err != nil {
		return g.wrap(fmt.Sprintf("clearing the poison of pool %q", pool), err)
	}
	return nil
}

// applyPoison applies one poison event. Called with g.mu held.
func (g *Group) applyPoison(ev *clientv3.Event) {
	pool := poolOfKey(g.keys, string(ev.Kv.Key))
	if ev.Type == clientv3.EventTypeDelete {
		delete(g.poison, pool)
	} else {
		g.poison[pool] = decodePoison(pool, ev.Kv.Value)
	}
	g.notify()
}

// resyncPoison replaces the poison set with kvs. Called with g.mu held.
func (g *Group) resyncPoison(kvs []*mvccpb.KeyValue) {
	next := map[string]PoisonRecord{}
	for _, kv := range kvs {
		pool := poolOfKey(g.keys, string(kv.Key))
		next[pool] = decodePoison(pool, kv.Value)
	}
	g.poison = next
	g.notify()
}

// poolOfKey is the pool a poison key names (the key itself if it does not
// unescape).
func poolOfKey(k keys, key string) string {
	pool, err := url.PathUnescape(strings.TrimPrefix(key, k.poisons()))
	if err != nil {
		return key
	}
	return pool
}

// decodePoison reads a poison record. A malformed one still poisons its
// pool: poison fails safe.
func decodePoison(pool string, raw []byte) PoisonRecord {
	var rec PoisonRecord
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if len(raw) > maxPoisonRecord {
		return PoisonRecord{Pool: pool, Rank: -1, Reason: fmt.Sprintf("poison record of %d bytes, over the %d limit (%v); the pool stays poisoned", len(raw), maxPoisonRecord, ErrMalformed)}
	}
	if err := dec.Decode(&rec); err != nil || rec.Pool != pool {
		return PoisonRecord{Pool: pool, Rank: -1, Reason: fmt.Sprintf("malformed poison record (%v, %.80q); the pool stays poisoned", ErrMalformed, raw)}
	}
	return rec
}

func checkPoolName(pool string) error {
	if pool == "" || len(pool) > maxNameLen || !utf8.ValidString(pool) {
		return fmt.Errorf("pool name %.40q: want 1-%d bytes of UTF-8: %w", pool, maxNameLen, ErrBadArgument)
	}
	return nil
}
