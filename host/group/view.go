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
	"github.com/custody-dev/custody/host/group/ledger"
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
	// reqs maps a request id to what the view holds of it: each rank's
	// state read from the states records of other members, and the
	// expiries, by etcd key, decoded once as they arrive. It holds what
	// etcd holds (bounded by etcd's quota), and the keys deleted since
	// Resolve last folded them (gone lists the ids whose keys all went): a
	// rank that has yet to fold a request when another rank deletes its
	// record folds what it saw.
	reqs map[core.RequestID]*viewEntry
	gone map[core.RequestID]struct{}
	// batches are the states records of other members the view holds, by
	// key (this member's own are never decoded: the union reads this
	// rank's state from what it reported); orphans those whose member no
	// longer holds its rank, which the lowest live rank deletes.
	batches map[string]*viewBatch
	orphans map[string]*viewBatch
	// dirty lists the ids whose keys changed since Resolve last folded
	// them; allDirty says membership changed (or the view was reloaded),
	// which may change any request.
	dirty    map[core.RequestID]struct{}
	allDirty bool
	// moved is closed, and replaced, whenever rev advances.
	moved chan struct{}
}

// viewEntry is one request's keys; gone once every one was deleted.
type viewEntry struct {
	keys map[string]*viewKey
	// live counts the keys not yet deleted.
	live int
	gone bool
}

// viewBatch is a states record of another member: its rank and member,
// and the requests it holds a state of.
type viewBatch struct {
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
	exp  expiry
	gone bool
}

func newReqView() reqView {
	return reqView{reqs: map[core.RequestID]*viewEntry{}, gone: map[core.RequestID]struct{}{},
		batches: map[string]*viewBatch{}, orphans: map[string]*viewBatch{},
		dirty: map[core.RequestID]struct{}{}, moved: make(chan struct{})}
}

// put adds one key of id to the view. Called with v.mu held.
func (v *reqView) put(id core.RequestID, key string, k *viewKey) {
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
// key left. It says whether the view held the key. Called with v.mu held.
func (v *reqView) drop(id core.RequestID, key string) bool {
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
		// Kept until Resolve folded it (reqView.reqs).
		e.gone = true
		v.gone[id] = struct{}{}
	}
	return true
}

// applyBatch adds a states record of another member to the view: each
// request it names gets the rank's state, or a failure where the record
// is malformed. A record that names no request it can be trusted for is
// logged and changes nothing. Called with rv.mu and g.mu held.
func (g *Group) applyBatch(key string, rank int, member string, value []byte) bool {
	entries, err := ledger.DecodeStates(value, rank, member)
	if err != nil {
		g.log.Error("group_malformed_states", "key", fmt.Sprintf("%.200q", key), "requests", len(entries), "error", err)
	}
	if old := g.rv.batches[key]; old != nil {
		// Rewritten in place (only by a writer that is not a rank).
		for _, id := range old.ids {
			g.rv.drop(id, key)
		}
	}
	b := &viewBatch{rank: rank, member: member, ids: make([]core.RequestID, 0, len(entries))}
	for _, en := range entries {
		g.rv.put(en.ID, key, &viewKey{kind: 's', rank: rank, member: member, state: en.State, reason: en.Reason, err: err})
		b.ids = append(b.ids, en.ID)
	}
	g.rv.batches[key] = b
	if g.orphan(b) {
		g.rv.orphans[key] = b
	}
	return len(b.ids) > 0
}

// dropBatch applies the deletion of a states record. Called with rv.mu held.
func (g *Group) dropBatch(key string) bool {
	b := g.rv.batches[key]
	if b == nil {
		return false // this member's own, or never seen
	}
	delete(g.rv.batches, key)
	delete(g.rv.orphans, key)
	touched := false
	for _, id := range b.ids {
		touched = g.rv.drop(id, key) || touched
	}
	return touched
}

// ownBatch says whether a states key is one this member allocated and
// wrote: its records are never decoded. Called with g.mu held.
func (g *Group) ownBatch(rank int, member string, seq uint64) bool {
	if rank != g.cfg.Rank || member != g.member || seq > g.ownSeq.Load() {
		return false
	}
	_, taken := g.taken[seq]
	return !taken
}

// orphan says whether a states record of another writer is one no live
// member deletes as its own: its member no longer holds its rank, or it
// lies under this member's own keys, which this member did not allocate
// (foreign: a forgery, or a writer that took the key first). Called with
// g.mu held.
func (g *Group) orphan(b *viewBatch) bool {
	return g.view[b.rank].member != b.member || g.foreign(b)
}

// foreign says whether a states record of another writer lies under this
// member's own keys.
func (g *Group) foreign(b *viewBatch) bool {
	return b.rank == g.cfg.Rank && b.member == g.member
}

// reorphan recomputes which states records are orphans. Called with rv.mu
// and g.mu held, after membership changed.
func (g *Group) reorphan() {
	clear(g.rv.orphans)
	for key, b := range g.rv.batches {
		if g.orphan(b) {
			g.rv.orphans[key] = b
		}
	}
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
// member's own states, or membership). Called with rv.mu and g.mu held.
func (g *Group) applyEvent(ev *clientv3.Event) bool {
	key := string(ev.Kv.Key)
	switch {
	case strings.HasPrefix(key, g.keys.Records()):
		rank, member, seq, err := ledger.ParseRecordKey(key[len(g.keys.Records()):], g.cfg.Size)
		if err != nil {
			g.log.Error("group_malformed_key", "key", fmt.Sprintf("%.200q", key), "error", err)
			return false
		}
		if ev.Type == clientv3.EventTypeDelete {
			return g.dropBatch(key)
		}
		if g.ownBatch(rank, member, seq) {
			// This rank's own states coming back wake no one: nothing
			// this rank resolves changes with them (readRanks reads its
			// own state from what it reported), and a host woken for
			// them would resolve for nothing once per write.
			return false
		}
		return g.applyBatch(key, rank, member, ev.Kv.Value)
	case strings.HasPrefix(key, g.keys.Members()):
		g.applyMember(ev)
		g.reorphan()
		g.rv.allDirty = true
		return true
	case strings.HasPrefix(key, g.keys.Poisons()):
		g.applyPoison(ev)
	case strings.HasPrefix(key, g.keys.Requests()):
		id, rest, err := g.parseViewKey(key)
		if err != nil {
			g.log.Error("group_malformed_key", "key", fmt.Sprintf("%.200q", key), "error", err)
			return false
		}
		if ev.Type == clientv3.EventTypeDelete {
			return g.rv.drop(id, key)
		}
		rank, err := ledger.ParseRequestKey(rest, g.cfg.Size)
		if err != nil {
			g.log.Error("group_malformed_key", "request", id, "key", fmt.Sprintf("%.200q", key), "error", err)
			return false
		}
		g.rv.put(id, key, &viewKey{kind: 't', rank: rank, exp: decodeExpiry(id, ev.Kv.Value, rank)})
		return true
	default:
		g.log.Error("group_unexpected_key", "key", fmt.Sprintf("%.200q", key))
	}
	return false
}

// parseViewKey splits a request key into its id and the part after
// req/<id>/.
func (g *Group) parseViewKey(key string) (core.RequestID, string, error) {
	esc, rest, ok := strings.Cut(strings.TrimPrefix(key, g.keys.Requests()), "/")
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
	g.rv.mu.Lock()
	old := g.rv.reqs
	g.rv.reqs, g.rv.batches = map[core.RequestID]*viewEntry{}, map[string]*viewBatch{}
	g.mu.Lock()
	for _, kv := range kvs {
		key := string(kv.Key)
		switch {
		case strings.HasPrefix(key, g.keys.Members()):
			members = append(members, kv)
		case strings.HasPrefix(key, g.keys.Poisons()):
			poison = append(poison, kv)
		case strings.HasPrefix(key, g.keys.Records()), strings.HasPrefix(key, g.keys.Requests()):
			g.applyEvent(&clientv3.Event{Type: clientv3.EventTypePut, Kv: kv})
		}
	}
	// What went while the watch was broken is kept as gone, like a
	// deletion seen (a write-once state read before stays what it was).
	for id, e := range old {
		if g.rv.reqs[id] == nil {
			e.gone = true
			g.rv.reqs[id] = e
			g.rv.gone[id] = struct{}{}
		}
	}
	g.rv.allDirty = true
	g.resyncMembers(members, rev)
	g.resyncPoison(poison)
	g.reorphan()
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
	resp, err := g.cli.Get(octx, g.keys.Base, clientv3.WithPrefix(), clientv3.WithCountOnly())
	cancel()
	g.reqs.reads.Add(1)
	if err != nil {
		return g.wrap("reading the group's revision", err)
	}
	return g.waitView(ctx, resp.Header.Revision)
}

// waitView waits until this rank's view holds every write up to revision
// want.
func (g *Group) waitView(ctx context.Context, want int64) error {
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
