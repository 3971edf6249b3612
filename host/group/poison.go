package group

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/custody-dev/custody/host/group/ledger"
)

// Poison marks pool poisoned for the whole group, durably: the record has
// no lease, survives every rank's restart, and is seen by every rank through
// its watch (and by a rank opened later, at Open). The first record wins;
// poisoning a poisoned pool is a no-op. The pool counts as poisoned on this
// rank as soon as Poison is called, even if etcd then fails: a pool is never
// less poisoned than this rank knows. Call it when core quarantines a block.
func (g *Group) Poison(ctx context.Context, pool, reason string) error {
	if err := ledger.CheckPoolName(pool); err != nil {
		return err
	}
	if err := g.checkOpen(); err != nil {
		return err
	}
	rec := PoisonRecord{Pool: pool, Reason: ledger.Truncate(reason), Rank: g.cfg.Rank, Member: g.member, At: time.Now().UTC()}
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
	key := g.keys.Poison(pool)
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
	if err := ledger.CheckPoolName(pool); err != nil {
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
	_, err := g.cli.Delete(octx, g.keys.Poison(pool))
	g.reqs.writes.Add(1)
	if err != nil {
		return g.wrap(fmt.Sprintf("clearing the poison of pool %q", pool), err)
	}
	return nil
}

// applyPoison applies one poison event. Called with g.mu held.
func (g *Group) applyPoison(ev *clientv3.Event) {
	pool := g.keys.PoolOf(string(ev.Kv.Key))
	if ev.Type == clientv3.EventTypeDelete {
		delete(g.poison, pool)
	} else {
		g.poison[pool] = ledger.DecodePoison(pool, ev.Kv.Value)
	}
	g.notify()
}

// resyncPoison replaces the poison set with kvs. Called with g.mu held.
func (g *Group) resyncPoison(kvs []*mvccpb.KeyValue) {
	next := map[string]PoisonRecord{}
	for _, kv := range kvs {
		pool := g.keys.PoolOf(string(kv.Key))
		next[pool] = ledger.DecodePoison(pool, kv.Value)
	}
	g.poison = next
	g.notify()
}
