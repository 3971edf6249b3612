package group

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/custody-dev/custody/host/group/ledger"
)

// One watch of the engine's prefix feeds the ledger every event, in
// etcd's revision order (package ledger, view.go); Resolve reads the
// ledger and never etcd; Sync waits until the ledger holds every write
// made before it was called.

// startWatch loads the engine's keys at one revision, then follows them from
// the next one in a goroutine that stops at Close.
func (g *Group) startWatch(ctx context.Context) error {
	resp, err := g.cli.Get(ctx, g.keys.Base, clientv3.WithPrefix())
	if err != nil {
		return g.wrap("loading the group's membership, requests and poison", err)
	}
	rev := resp.Header.Revision
	g.resync(resp.Kvs, rev)
	g.wg.Add(1)
	go g.follow(rev)
	return nil
}

// follow watches the engine's prefix from rev+1 until Close, applying each
// watch response whole. When the watch breaks (compaction, a lost
// connection), it reloads the prefix and resyncs, then watches on.
func (g *Group) follow(rev int64) {
	defer g.wg.Done()
	backoff := 50 * time.Millisecond
	for g.ctx.Err() == nil {
		wch := g.cli.Watch(clientv3.WithRequireLeader(g.ctx), g.keys.Base, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		for wr := range wch {
			if err := wr.Err(); err != nil {
				g.log.Warn("group_watch_broken", "prefix", g.keys.Base, "revision", rev, "error", err)
				break
			}
			rev = g.applyWatch(wr, rev)
		}
		for g.ctx.Err() == nil {
			ctx, cancel := g.opCtx(g.ctx)
			resp, err := g.cli.Get(ctx, g.keys.Base, clientv3.WithPrefix())
			cancel()
			if err == nil {
				rev = resp.Header.Revision
				g.resync(resp.Kvs, rev)
				break
			}
			g.log.Warn("group_watch_resync_failed", "prefix", g.keys.Base, "error", err)
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-g.ctx.Done():
				t.Stop()
			}
			backoff = min(2*backoff, 2*time.Second)
		}
	}
}

// applyWatch feeds one watch response to the ledger and returns the
// revision the view now holds. A response with events holds every event
// up to its last one's revision; a progress notice, sent only to a watch
// that has caught up, holds its header's.
func (g *Group) applyWatch(wr clientv3.WatchResponse, rev int64) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	rev0 := g.l.Rev()
	changed := false
	if len(wr.Events) > 0 {
		evs := make([]ledger.Event, len(wr.Events))
		for i, ev := range wr.Events {
			evs[i] = ledger.Event{Delete: ev.Type == clientv3.EventTypeDelete, Key: string(ev.Kv.Key), Value: ev.Kv.Value, Rev: ev.Kv.ModRevision, Lease: ev.Kv.Lease}
			rev = max(rev, ev.Kv.ModRevision)
		}
		changed = g.l.Apply(evs)
	} else if wr.IsProgressNotify() {
		rev = max(rev, wr.Header.Revision)
		changed = g.l.Progress(rev)
	}
	g.signal(changed, rev0)
	return rev
}

// resync replaces the ledger's view, membership and poison with kvs, read
// at rev.
func (g *Group) resync(kvs []*mvccpb.KeyValue, rev int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	rev0 := g.l.Rev()
	g.l.Reload(kvsOf(kvs), rev)
	g.signal(true, rev0)
}

// Sync waits until this rank's view of the group holds every write made
// before the call, so that a Resolve after it sees every state reported
// before Sync was called. It reads etcd's revision once; a host never
// needs it (the watch wakes it through Changed), tools and tests do.
func (g *Group) Sync(ctx context.Context) error {
	if err := g.checkOpen(); err != nil {
		return err
	}
	if g.cfg.Solo() {
		return nil
	}
	octx, cancel := g.opCtx(ctx)
	resp, err := g.cli.Get(octx, g.keys.Base, clientv3.WithPrefix(), clientv3.WithCountOnly())
	cancel()
	g.reads.Add(1)
	if err != nil {
		return g.wrap("reading the group's revision", err)
	}
	return g.waitView(ctx, resp.Header.Revision)
}

// waitView waits until this rank's view holds every write up to revision
// want.
func (g *Group) waitView(ctx context.Context, want int64) error {
	for {
		g.mu.Lock()
		rev, moved := g.l.Rev(), g.moved
		g.mu.Unlock()
		if rev >= want {
			return nil
		}
		// A watch that has caught up answers with its revision, even when
		// nothing it watches changed since.
		if err := g.cli.RequestProgress(clientv3.WithRequireLeader(g.ctx)); err != nil {
			return g.wrap("asking the group's watch for its progress", err)
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return fmt.Errorf("group %q rank %d: waiting for the watch to reach revision %d (at %d): %w: %w", g.cfg.Engine, g.cfg.Rank, want, rev, ErrCoordinator, ctx.Err())
		case <-g.ctx.Done():
			return fmt.Errorf("group %q rank %d: %w", g.cfg.Engine, g.cfg.Rank, ErrClosed)
		}
	}
}
