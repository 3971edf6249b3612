package group

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

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
	mode = mode.Canonical()
	g.mu.Lock()
	if g.joined || g.mode.Transport != "" {
		g.mu.Unlock()
		return fmt.Errorf("group %q rank %d: Join called twice", g.cfg.Engine, g.cfg.Rank)
	}
	g.mode = mode
	if g.cfg.Solo() {
		g.joined = true
	}
	g.mu.Unlock()
	if g.cfg.Solo() {
		return nil
	}
	if err := g.publishMember(ctx, mode); err != nil {
		return err
	}
	snap, err := g.awaitAll(ctx)
	if err != nil {
		return err
	}
	if err := g.agree(snap); err != nil {
		return err
	}
	g.mu.Lock()
	g.joined = true
	g.mu.Unlock()
	g.log.Info("group_joined", "engine", g.cfg.Engine, "rank", g.cfg.Rank, "size", g.cfg.Size, "member", g.member)
	return nil
}

// publishMember writes this rank's member record if no member holds the
// rank, in one transaction with a read of all members, so that the record
// and the read share one revision.
func (g *Group) publishMember(ctx context.Context, mode Mode) error {
	raw, err := json.Marshal(memberRecord{Proto: ledger.Proto, Engine: g.cfg.Engine, Rank: g.cfg.Rank, Size: g.cfg.Size, Member: g.member, Mode: mode})
	if err != nil {
		return err
	}
	key := g.keys.Member(g.cfg.Rank)
	octx, cancel := g.opCtx(ctx)
	defer cancel()
	resp, err := g.cli.Txn(octx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(raw), clientv3.WithLease(g.lease))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return g.wrap(fmt.Sprintf("publishing rank %d's mode", g.cfg.Rank), err)
	}
	if resp.Succeeded {
		return nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	holder, lease := "(unreadable record)", int64(0)
	if len(kvs) == 1 {
		lease = kvs[0].Lease
		if rec, err := decodeMember(kvs[0].Value, g.cfg.Rank); err == nil {
			holder = rec.Member
		}
		if holder == g.member {
			return nil
		}
	}
	return fmt.Errorf("group %q: rank %d is already held by member %s (lease %x); this host (member %s) is refused: another host is configured with rank %d, or an earlier process of this rank is alive or its lease (TTL %v) has not yet expired: %w",
		g.cfg.Engine, g.cfg.Rank, holder, lease, g.member, g.cfg.Rank, g.cfg.Timeouts.LeaseTTL, ErrDuplicateRank)
}

// joinWaits, when set (tests only), is called as Join starts waiting for
// the other ranks, its own record published.
var joinWaits func(*Group)

// awaitAll waits for the first complete view of the group.
func (g *Group) awaitAll(ctx context.Context) ([]memberEntry, error) {
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
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.joinSnap, nil
	case <-t.C:
	case <-ctx.Done():
	case <-g.ctx.Done():
	}
	g.mu.Lock()
	var missing []int
	for r, e := range g.view {
		if !e.present {
			missing = append(missing, r)
		}
	}
	self := g.selfLost
	g.mu.Unlock()
	if self {
		return nil, fmt.Errorf("group %q rank %d: lost its own membership while waiting for the other ranks: %w", g.cfg.Engine, g.cfg.Rank, ErrSessionLost)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("group %q rank %d: waiting for ranks %v to join: %w", g.cfg.Engine, g.cfg.Rank, missing, err)
	}
	return nil, fmt.Errorf("group %q rank %d: ranks %v never joined within %v: %w; start them, and check that their group.engine, group.size and coordinator match",
		g.cfg.Engine, g.cfg.Rank, missing, g.cfg.Timeouts.Join, ErrRankMissing)
}

// agree checks every rank's record against rank 0's. It reads nothing of
// this rank's own, so every rank reaches the same verdict.
func (g *Group) agree(snap []memberEntry) error {
	var errs []error
	for r, e := range snap {
		if e.err != nil {
			errs = append(errs, fmt.Errorf("group %q: %w", g.cfg.Engine, e.err))
			continue
		}
		if e.rec.Engine != g.cfg.Engine || e.rec.Size != g.cfg.Size {
			errs = append(errs, fmt.Errorf("group %q: rank %d is configured for engine %q of size %d, rank 0 for engine %q of size %d: %w",
				g.cfg.Engine, r, e.rec.Engine, e.rec.Size, snap[0].rec.Engine, snap[0].rec.Size, ErrModeMismatch))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	ref := snap[0].rec.Mode
	for r := 1; r < len(snap); r++ {
		if d := Diff(ref, snap[r].rec.Mode); len(d) > 0 {
			errs = append(errs, &ModeMismatchError{Engine: g.cfg.Engine, Rank: r, RefRank: 0, Diffs: d})
		}
	}
	return errors.Join(errs...)
}

// Mode is the mode this rank joined with (zero before Join).
func (g *Group) Mode() Mode {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mode
}

func (g *Group) checkJoined() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.closed:
		return fmt.Errorf("group %q rank %d: %w", g.cfg.Engine, g.cfg.Rank, ErrClosed)
	case g.selfLost:
		return fmt.Errorf("group %q rank %d: %w: fail every request and restart the host", g.cfg.Engine, g.cfg.Rank, ErrSessionLost)
	case !g.joined:
		return fmt.Errorf("group %q rank %d: %w: call Join first", g.cfg.Engine, g.cfg.Rank, ErrNotJoined)
	}
	return nil
}
