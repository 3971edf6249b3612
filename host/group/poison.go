package group

import (
	"context"
	"time"

	"github.com/custody-dev/custody/host/group/ledger"
)

// Poison marks pool poisoned for the whole group, durably (package ledger,
// poison.go): the record has no lease, survives every rank's restart, and
// is seen by every rank through its watch (and by a rank opened later, at
// Open). The first record wins; poisoning a poisoned pool is a no-op. The
// pool counts as poisoned on this rank as soon as Poison is called, even
// if etcd then fails: a pool is never less poisoned than this rank knows.
// Call it when core quarantines a block.
func (g *Group) Poison(ctx context.Context, pool, reason string) error {
	if err := ledger.CheckPoolName(pool); err != nil {
		return err
	}
	if err := g.checkOpen(); err != nil {
		return err
	}
	g.mu.Lock()
	t := g.l.Poison(pool, reason, time.Now().UTC())
	g.mu.Unlock()
	g.notify()
	if g.cfg.Solo() {
		return nil
	}
	if _, err := g.run(ctx, t); err != nil {
		return g.wrap(t.What, err)
	}
	return nil
}

// Poisoned lists the poisoned pools, sorted by name, as this rank knows
// them now (its own Poison calls and every record its watch has seen).
func (g *Group) Poisoned() []PoisonRecord {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.l.Poisoned()
}

// IsPoisoned reports whether pool is poisoned, and the record.
func (g *Group) IsPoisoned(pool string) (PoisonRecord, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.l.IsPoisoned(pool)
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
	g.mu.Lock()
	t := g.l.ClearPoison(pool)
	g.mu.Unlock()
	if g.cfg.Solo() {
		g.notify()
		return nil
	}
	if _, err := g.run(ctx, t); err != nil {
		return g.wrap(t.What, err)
	}
	return nil
}
