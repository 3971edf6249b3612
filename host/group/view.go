package group

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/custody-dev/custody/core"
)

// The view is this rank's copy of its engine's keys (members, requests,
// poison), kept by one watch of the engine's prefix. One watch, not one per
// kind of key, so that every event is applied in etcd's revision order: a
// rank's terminal state and the loss of its membership are seen in the
// order they happened, by every rank alike, which the union needs (a rank
// that reported before it died is not counted lost for that request).
// Resolve reads the view and never etcd; Sync waits until the view holds
// every write made before it was called.

// reqView holds the request keys the watch has applied, up to rev.
type reqView struct {
	mu sync.Mutex
	// rev is the last revision the view is known to hold every event of.
	rev int64
	// reqs maps a request id to its keys: the part after req/<id>/ to the
	// key, decoded once as it arrives. It holds what etcd holds (bounded by
	// etcd's quota), and the keys of requests deleted since Resolve last
	// folded them (gone lists those): a rank that has yet to fold a request
	// when another rank collects its keys folds what it saw.
	reqs map[core.RequestID]*viewEntry
	gone map[core.RequestID]struct{}
	// dirty lists the ids whose keys changed since Resolve last folded
	// them; allDirty says membership changed (or the view was reloaded),
	// which may change any request.
	dirty    map[core.RequestID]struct{}
	allDirty bool
	// moved is closed, and replaced, whenever rev advances.
	moved chan struct{}
}

// viewEntry is one request's keys; gone once they were deleted.
type viewEntry struct {
	keys map[string]*viewKey
	gone bool
}

// viewKey is one request key as read: its kind ('s' state, 't' expiry),
// rank, and what its value decodes to.
type viewKey struct {
	kind byte
	rank int
	// state keys of other ranks: the record, its state, or why it is
	// malformed (this rank's own are not decoded).
	rec   stateRecord
	state State
	err   error
	// expiry keys.
	exp expiry
}

func newReqView() reqView {
	return reqView{reqs: map[core.RequestID]*viewEntry{}, gone: map[core.RequestID]struct{}{},
		dirty: map[core.RequestID]struct{}{}, moved: make(chan struct{})}
}

// decodeViewKey parses and decodes one request key of id: rest is the part
// after req/<id>/. A key of no rank of the group is an error (logged, and
// left out of the view).
func (g *Group) decodeViewKey(id core.RequestID, rest string, value []byte) (*viewKey, error) {
	kind, rank, err := parseRequestKey(rest, g.cfg.Size)
	if err != nil {
		return nil, err
	}
	k := &viewKey{kind: kind, rank: rank}
	switch kind {
	case 's':
		if rank == g.cfg.Rank {
			// The union reads this rank's own state from what it
			// reported (readRanks), never from its key: half of the
			// state keys a rank sees are its own, and not decoding them
			// halves the view's JSON work. Report's transaction refuses
			// a key it did not write (reconcile).
			break
		}
		k.rec, k.state, k.err = decodeState(value, rank)
		if k.err != nil {
			g.log.Error("group_malformed_state", "request", id, "rank", rank, "error", k.err)
		}
	case 't':
		k.exp = decodeExpiry(id, value, rank)
	}
	return k, nil
}

// advance records that the view holds everything up to rev. Called with
// v.mu held.
func (v *reqView) advance(rev int64) {
	if rev > v.rev {
		v.rev = rev
		close(v.moved)
		v.moved = make(chan struct{})
	}
}

// startWatch loads the engine's keys at one revision, then follows them from
// the next one in a goroutine that stops at Close.
func (g *Group) startWatch(ctx context.Context) error {
	resp, err := g.cli.Get(ctx, g.keys.base, clientv3.WithPrefix())
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
		wch := g.cli.Watch(clientv3.WithRequireLeader(g.ctx), g.keys.base, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		for wr := range wch {
			if err := wr.Err(); err != nil {
				g.log.Warn("group_watch_broken", "prefix", g.keys.base, "revision", rev, "error", err)
				break
			}
			rev = g.applyWatch(wr, rev)
		}
		for g.ctx.Err() == nil {
			ctx, cancel := g.opCtx(g.ctx)
			resp, err := g.cli.Get(ctx, g.keys.base, clientv3.WithPrefix())
			cancel()
			if err == nil {
				rev = resp.Header.Revision
				g.resync(resp.Kvs, rev)
				break
			}
			g.log.Warn("group_watch_resync_failed", "prefix", g.keys.base, "error", err)
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

// applyWatch applies one watch response and returns the revision the view
// now holds. A response with events holds every event up to its last one's
// revision (a watch catching up may send later ones next); a progress
// notice, sent only to a watch that has caught up, holds its header's.
func (g *Group) applyWatch(wr clientv3.WatchResponse, rev int64) int64 {
	g.rv.mu.Lock()
	defer g.rv.mu.Unlock()
	touched := false
	if len(wr.Events) > 0 {
		g.mu.Lock()
		for _, ev := range wr.Events {
			touched = g.applyEvent(ev) || touched
			rev = max(rev, ev.Kv.ModRevision)
		}
		g.mu.Unlock()
	} else if wr.IsProgressNotify() {
		rev = max(rev, wr.Header.Revision)
	}
	g.rv.advance(rev)
	if touched {
		g.notify()
	}
	return rev
}

// applyEvent applies one event to the view, membership or poison; it says
// whether it changed what a rank resolves (any request key but this
// rank's own state, or membership). Called with rv.mu and g.mu held.
func (g *Group) applyEvent(ev *clientv3.Event) bool {
	key := string(ev.Kv.Key)
	switch {
	case strings.HasPrefix(key, g.keys.members()):
		g.applyMember(ev)
		g.rv.allDirty = true
		return true
	case strings.HasPrefix(key, g.keys.poisons()):
		g.applyPoison(ev)
	case strings.HasPrefix(key, g.keys.requests()):
		id, rest, err := g.parseViewKey(key)
		if err != nil {
			g.log.Error("group_malformed_key", "key", fmt.Sprintf("%.200q", key), "error", err)
			return false
		}
		e := g.rv.reqs[id]
		g.rv.dirty[id] = struct{}{}
		if ev.Type == clientv3.EventTypeDelete {
			if e != nil {
				// Kept until Resolve folded it (reqView.reqs).
				e.gone = true
				g.rv.gone[id] = struct{}{}
			}
			return true
		}
		k, err := g.decodeViewKey(id, rest, ev.Kv.Value)
		if err != nil {
			g.log.Error("group_malformed_key", "request", id, "key", fmt.Sprintf("%.200q", key), "error", err)
			return true
		}
		if e == nil || e.gone {
			// A new request, or the id issued again after its keys went.
			e = &viewEntry{keys: map[string]*viewKey{}}
			g.rv.reqs[id] = e
		}
		e.keys[rest] = k
		// This rank's own state coming back wakes no one: nothing this
		// rank resolves changes with it (readRanks reads its own state
		// from what it reported), and a host woken for it would resolve
		// for nothing once per write.
		return k.kind != 's' || k.rank != g.cfg.Rank
	default:
		g.log.Error("group_unexpected_key", "key", fmt.Sprintf("%.200q", key))
	}
	return false
}

// parseViewKey splits a request key into its id and the part after
// req/<id>/.
func (g *Group) parseViewKey(key string) (core.RequestID, string, error) {
	esc, rest, ok := strings.Cut(strings.TrimPrefix(key, g.keys.requests()), "/")
	if !ok {
		return "", "", fmt.Errorf("no key below the request id")
	}
	id, err := url.PathUnescape(esc)
	if err != nil {
		return "", "", fmt.Errorf("request id %.80q is not path-escaped: %w", esc, err)
	}
	return core.RequestID(id), rest, nil
}

// resync replaces the view, membership and poison with kvs, read at rev.
func (g *Group) resync(kvs []*mvccpb.KeyValue, rev int64) {
	var members, poison []*mvccpb.KeyValue
	reqs := map[core.RequestID]*viewEntry{}
	for _, kv := range kvs {
		key := string(kv.Key)
		switch {
		case strings.HasPrefix(key, g.keys.members()):
			members = append(members, kv)
		case strings.HasPrefix(key, g.keys.poisons()):
			poison = append(poison, kv)
		case strings.HasPrefix(key, g.keys.requests()):
			id, rest, err := g.parseViewKey(key)
			if err != nil {
				g.log.Error("group_malformed_key", "key", fmt.Sprintf("%.200q", key), "error", err)
				continue
			}
			k, err := g.decodeViewKey(id, rest, kv.Value)
			if err != nil {
				g.log.Error("group_malformed_key", "key", fmt.Sprintf("%.200q", key), "error", err)
				continue
			}
			if reqs[id] == nil {
				reqs[id] = &viewEntry{keys: map[string]*viewKey{}}
			}
			reqs[id].keys[rest] = k
		}
	}
	g.rv.mu.Lock()
	// What went while the watch was broken is kept as gone, like a
	// deletion seen (a write-once state read before stays what it was).
	for id, e := range g.rv.reqs {
		if reqs[id] == nil {
			e.gone = true
			reqs[id] = e
			g.rv.gone[id] = struct{}{}
		}
	}
	g.rv.reqs = reqs
	g.rv.allDirty = true
	g.mu.Lock()
	g.resyncMembers(members, rev)
	g.resyncPoison(poison)
	g.mu.Unlock()
	g.rv.advance(rev)
	g.rv.mu.Unlock()
	g.notify()
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
	resp, err := g.cli.Get(octx, g.keys.base, clientv3.WithPrefix(), clientv3.WithCountOnly())
	cancel()
	g.reqs.reads.Add(1)
	if err != nil {
		return g.wrap("reading the group's revision", err)
	}
	want := resp.Header.Revision
	for {
		g.rv.mu.Lock()
		rev, moved := g.rv.rev, g.rv.moved
		g.rv.mu.Unlock()
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
