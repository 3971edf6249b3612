package group

import (
	"context"
	"fmt"
	"time"

	"github.com/custody-dev/custody/host/group/ledger"
)

// Join publishes this rank's effective mode under its lease and waits,
// bounded by cfg.Timeouts.Join and ctx, until every rank has published its
// own (rule 9). It then compares every rank's mode with rank 0's.
// Every rank compares the same records, so an asymmetric rank fails startup
// on every rank with the same errors: one per differing rank, naming it, the
// field and both values (ModeMismatchError, ErrModeMismatch, and
// ErrMixedContract where the contract majors or record versions differ).
// A rank that never arrives fails it with ErrRankMissing naming the rank; a
// rank number already held by another live member with ErrDuplicateRank.
// Call Join once, before any transport is built; on error, Close the group
// and stop. For a group of size 1, Join only validates mode.
func (g *Group) Join(ctx context.Context, mode Mode) error {
	if err := mode.Validate(); err != nil {
		return fmt.Errorf("group %q rank %d: %w", g.cfg.Engine, g.cfg.Rank, err)
	}
	if err := g.checkOpen(); err != nil {
		return err
	}
	g.mu.Lock()
	t, err := g.l.Join(mode)
	g.mu.Unlock()
	if err != nil || g.cfg.Solo() {
		return err
	}
	if err := g.publishMember(ctx, t); err != nil {
		return err
	}
	if err := g.awaitAll(ctx); err != nil {
		return err
	}
	g.mu.Lock()
	err = g.l.Agree()
	g.mu.Unlock()
	if err != nil {
		return err
	}
	g.log.Info("group_joined", "engine", g.cfg.Engine, "rank", g.cfg.Rank, "size", g.cfg.Size, "member", g.member)
	return nil
}

// publishMember runs the ledger's write of this rank's member record, if
// no member holds the rank.
func (g *Group) publishMember(ctx context.Context, t ledger.Txn) error {
	res, err := g.run(ctx, t)
	if err != nil {
		return g.wrap(t.What, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.l.MemberWritten(res, g.cfg.Timeouts.LeaseTTL)
}

// joinWaits, when set (tests only), is called as Join starts waiting for
// the other ranks, its own record published.
var joinWaits func(*Group)

// awaitAll waits for the first complete view of the group (JoinReady).
func (g *Group) awaitAll(ctx context.Context) error {
	if joinWaits != nil {
		joinWaits(g)
	}
	t := time.NewTimer(g.cfg.Timeouts.Join)
	defer t.Stop()
	g.mu.Lock()
	ch := g.joinCh
	g.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-t.C:
	case <-ctx.Done():
	case <-g.ctx.Done():
	}
	g.mu.Lock()
	missing, self := g.l.Missing(), g.l.SelfLost()
	g.mu.Unlock()
	if self {
		return fmt.Errorf("group %q rank %d: lost its own membership while waiting for the other ranks: %w", g.cfg.Engine, g.cfg.Rank, ErrSessionLost)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("group %q rank %d: waiting for ranks %v to join: %w", g.cfg.Engine, g.cfg.Rank, missing, err)
	}
	return fmt.Errorf("group %q rank %d: ranks %v never joined within %v: %w; start them, and check that their group.engine, group.size and coordinator match",
		g.cfg.Engine, g.cfg.Rank, missing, g.cfg.Timeouts.Join, ErrRankMissing)
}

// Mode is the mode this rank joined with (zero before Join).
func (g *Group) Mode() Mode {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.l.Mode()
}

func (g *Group) checkJoined() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.closed:
		return fmt.Errorf("group %q rank %d: %w", g.cfg.Engine, g.cfg.Rank, ErrClosed)
	case g.l.SelfLost():
		return fmt.Errorf("group %q rank %d: %w: fail every request and restart the host", g.cfg.Engine, g.cfg.Rank, ErrSessionLost)
	case !g.l.Joined():
		return fmt.Errorf("group %q rank %d: %w: call Join first", g.cfg.Engine, g.cfg.Rank, ErrNotJoined)
	}
	return nil
}
