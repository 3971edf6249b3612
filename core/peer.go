package core

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// PeerSpec is a remote engine rank group to connect: a name the engine uses
// for it and one RankSpec per remote rank (several under heterogeneous TP).
type PeerSpec struct {
	Name  string
	Ranks []RankSpec
}

// RankSpec is one remote rank: its agent name and metadata blob, and the
// layout of the remote pool its blocks live in. A rank with Blocks == 0 is
// notification-only: it is loaded (so notifications reach it) but no remote
// dlist is prepared for it.
type RankSpec struct {
	Agent     string
	Metadata  []byte
	Region    sdk.RegionID
	Offset    uint64
	BlockSize uint64
	Blocks    uint32
}

// peer is a published (connected) peer: it owns the native peer handle and
// remote dlist of every rank. Removing it retires it: its natives are
// released once no handle references them.
type peer struct {
	name    string
	epoch   Epoch
	ranks   []rank
	refs    int // live or leaked handles that use this peer's dlists
	retired bool
}

type rank struct {
	spec  RankSpec
	id    sdk.PeerID  // zero once unloaded
	dlist sdk.DlistID // zero for notification-only ranks or once released
}

func (s PeerSpec) validate() error {
	if s.Name == "" {
		return errors.New("PeerSpec.Name is empty; name the peer")
	}
	if len(s.Ranks) == 0 {
		return fmt.Errorf("peer %q has no ranks; give one RankSpec per remote rank", s.Name)
	}
	for i, r := range s.Ranks {
		switch {
		case r.Agent == "":
			return fmt.Errorf("peer %q rank %d: Agent is empty", s.Name, i)
		case len(r.Metadata) == 0:
			return fmt.Errorf("peer %q rank %d: Metadata is empty; pass the rank's LocalMetadata blob", s.Name, i)
		case r.Blocks > 0 && r.BlockSize == 0:
			return fmt.Errorf("peer %q rank %d: BlockSize is zero with %d blocks", s.Name, i, r.Blocks)
		}
	}
	return nil
}

// ConnectPeer performs the native half of a handshake: it loads every rank
// (notification-only ranks too) and prepares a remote dlist per rank with
// blocks, journaling each acquisition at once (rule 5, seed 000). Leftovers
// of an earlier failed rollback of this peer are retried first. If any step
// fails, everything this attempt acquired is rolled back in reverse order;
// what cannot be released stays journaled and is retried before the next
// setup of this peer (or at Close). The error returned wraps the original
// handshake failure, never a rollback error (that one is an Alert); requests
// waiting for the peer fail with it. Other peers are untouched. On success
// the peer is published and the requests waiting for it are posted.
func (c *Core) ConnectPeer(ctx context.Context, spec PeerSpec) error {
	if err := spec.validate(); err != nil {
		return fmt.Errorf("core: connect peer: %w", err)
	}
	if c.tr == nil {
		return fmt.Errorf("core: connect peer %q: %w; call Attach first", spec.Name, ErrNotAttached)
	}
	if _, ok := c.peers[spec.Name]; ok {
		return fmt.Errorf("core: connect peer %q: already connected; RemovePeer it first to reconnect", spec.Name)
	}
	_ = c.rollback(ctx, spec.Name, 0) // leftovers of an earlier attempt first
	p, err := c.handshake(ctx, spec)
	if err != nil {
		err = fmt.Errorf("core: connect peer %q: %w", spec.Name, err)
		c.failWaiting(spec.Name, err)
		return err
	}
	c.peers[spec.Name] = p
	w := c.waiting[spec.Name]
	delete(c.waiting, spec.Name)
	for _, r := range w {
		r.flags &^= rWaiting
		c.bind(ctx, r, p)
	}
	return nil
}

// handshake acquires spec's natives under the journal and publishes them as a
// peer, or rolls them back and returns the original error.
func (c *Core) handshake(ctx context.Context, spec PeerSpec) (*peer, error) {
	name := spec.Name
	from := len(c.journal[name])
	fail := func(err error) (*peer, error) {
		_ = c.rollback(ctx, name, from)
		return nil, err
	}
	loads := make([]sdk.PeerSpec, len(spec.Ranks))
	for i, r := range spec.Ranks {
		loads[i] = sdk.PeerSpec{Name: r.Agent, Metadata: r.Metadata}
	}
	res, err := c.tr.LoadPeers(ctx, loads)
	if err != nil {
		if unknownOutcome(err) {
			c.requestFence(c.epoch, Alert{Level: AlertError, Kind: "handshake_outcome_unknown", Peer: name, Err: err})
		}
		return nil, fmt.Errorf("load %d ranks: %w", len(loads), err)
	}
	var firstErr error
	for i := range loads {
		if i >= len(res) {
			firstErr = cmp(firstErr, fmt.Errorf("load rank %d: transport returned %d results for %d ranks", i, len(res), len(loads)))
			continue
		}
		if res[i].Err != nil {
			firstErr = cmp(firstErr, fmt.Errorf("load rank %d (agent %q): %w", i, spec.Ranks[i].Agent, res[i].Err))
			continue
		}
		c.journal[name] = append(c.journal[name], entry{epoch: c.epoch, rank: i, peer: res[i].ID})
	}
	if firstErr != nil {
		return fail(firstErr)
	}
	p := &peer{name: name, epoch: c.epoch, ranks: make([]rank, len(spec.Ranks))}
	for i, r := range spec.Ranks {
		p.ranks[i] = rank{spec: r, id: res[i].ID}
	}
	var lists []sdk.DlistSpec
	var listRank []int
	for i, r := range spec.Ranks {
		if r.Blocks == 0 {
			continue
		}
		descs := make([]sdk.Descriptor, r.Blocks)
		for b := range descs {
			descs[b] = sdk.Descriptor{Region: r.Region, Offset: r.Offset + uint64(b)*r.BlockSize, Length: r.BlockSize}
		}
		lists = append(lists, sdk.DlistSpec{Peer: p.ranks[i].id, Descriptors: descs})
		listRank = append(listRank, i)
	}
	if len(lists) > 0 {
		dres, err := c.tr.PrepareDescriptors(ctx, lists)
		if err != nil {
			if unknownOutcome(err) {
				c.requestFence(c.epoch, Alert{Level: AlertError, Kind: "handshake_outcome_unknown", Peer: name, Err: err})
			}
			return fail(fmt.Errorf("prepare %d remote dlists: %w", len(lists), err))
		}
		for k, i := range listRank {
			if k >= len(dres) {
				firstErr = cmp(firstErr, fmt.Errorf("prepare rank %d dlist: transport returned %d results for %d dlists", i, len(dres), len(lists)))
				continue
			}
			if dres[k].Err != nil {
				firstErr = cmp(firstErr, fmt.Errorf("prepare rank %d (agent %q) dlist: %w", i, spec.Ranks[i].Agent, dres[k].Err))
				continue
			}
			c.journal[name] = append(c.journal[name], entry{epoch: c.epoch, rank: i, dlist: true, list: dres[k].ID})
			p.ranks[i].dlist = dres[k].ID
		}
		if firstErr != nil {
			return fail(firstErr)
		}
	}
	// Publish: the peer record owns the natives from here on.
	if from == 0 {
		delete(c.journal, name)
	} else {
		c.journal[name] = c.journal[name][:from]
	}
	return p, nil
}

func cmp(first, next error) error {
	if first != nil {
		return first
	}
	return next
}

// RemovePeer closes the peer's session and retires it (rules 6 and 7, seed
// 002). Its requests fail with ErrPeerRemoved; their running handles are
// canceled and polled once ("wait" mode, bounded by ctx); handles that
// stopped are released, the rest are retained with their blocks pinned
// (OwnerRetained) until they stop, bounded by the hold cap. Sends to the peer
// keep their blocks until their lease expires. The peer's dlists and native
// peer handles are released at once if no retained handle uses them, else
// by the Poll round in which the last one is released. Completions of
// retired handles only ever finish their own (failed) requests, so a peer
// reconnected under the same name never sees them. Requests waiting for the
// peer's handshake fail at once. Removing an unknown peer is an error that
// changes nothing.
func (c *Core) RemovePeer(ctx context.Context, now time.Time, name string) error {
	c.setNow(now)
	p := c.peers[name]
	if p == nil && len(c.waiting[name]) == 0 {
		return fmt.Errorf("core: remove peer %q: not connected and nothing waits for it", name)
	}
	reason := fmt.Errorf("peer %q: %w", name, ErrPeerRemoved)
	c.failWaiting(name, reason)
	if p == nil {
		return nil
	}
	c.retire(ctx, p, reason)
	return nil
}

// retire unpublishes p, fails its requests and retains their running
// handles, then releases what it can at once.
func (c *Core) retire(ctx context.Context, p *peer, reason error) {
	delete(c.peers, p.name)
	p.retired = true
	c.retired = append(c.retired, p)
	held := c.xBuf[:0]
	for x := range c.live.all() {
		if x.req.peer == p {
			held = append(held, x)
		}
	}
	for r := range c.reqs.all() {
		if r.peer == p {
			c.fail(r, reason)
		}
	}
	running := c.idBuf[:0]
	for _, x := range held {
		x.flags |= fRetained
		c.pin(x, OwnerRetained)
		c.hold(x)
		if !x.state.Terminal() {
			running = append(running, x.ref.Handle)
		}
	}
	if len(running) > 0 {
		each(len(running), c.batch, func(lo, hi int) {
			errs, err := c.tr.Cancel(ctx, running[lo:hi])
			for k := lo; k < hi; k++ {
				if e := itemErr(errs, k-lo, err); e != nil {
					c.alert(Alert{Level: AlertWarn, Kind: "transfer_cancel_failed", Peer: p.name, Handle: Ref{Epoch: c.epoch, Handle: running[k]}, Err: e})
				}
			}
		})
		c.pollHandles(ctx, held)
	}
	clear(held)
	c.idBuf, c.xBuf = running[:0], held[:0]
	c.releaseTerminal(ctx)
	c.releaseRetired(ctx)
}

// releaseRetired releases the dlists, then the native peer handles, of every
// retired peer no live handle references any more (poll_retired's second
// half). What fails stays and is retried next round.
func (c *Core) releaseRetired(ctx context.Context) {
	if len(c.retired) == 0 || c.tr == nil {
		return
	}
	var lists []sdk.DlistID
	var listAt [][2]int
	for pi, p := range c.retired {
		if p.refs > 0 {
			continue
		}
		for ri, r := range p.ranks {
			if r.dlist != 0 {
				lists = append(lists, r.dlist)
				listAt = append(listAt, [2]int{pi, ri})
			}
		}
	}
	if len(lists) > 0 {
		errs, err := c.tr.ReleaseDescriptors(ctx, lists)
		for k, at := range listAt {
			p := c.retired[at[0]]
			if e := itemErr(errs, k, err); e != nil && !isNotFound(e, err) {
				c.alert(Alert{Level: AlertWarn, Kind: "peer_dlist_release_failed", Peer: p.name, Err: e})
				continue
			}
			p.ranks[at[1]].dlist = 0
		}
	}
	var ids []sdk.PeerID
	var idAt [][2]int
	for pi, p := range c.retired {
		if p.refs > 0 {
			continue
		}
		for ri, r := range p.ranks {
			if r.dlist == 0 && r.id != 0 {
				ids = append(ids, r.id)
				idAt = append(idAt, [2]int{pi, ri})
			}
		}
	}
	if len(ids) > 0 {
		errs, err := c.tr.UnloadPeers(ctx, ids)
		for k, at := range idAt {
			p := c.retired[at[0]]
			if e := itemErr(errs, k, err); e != nil && !isNotFound(e, err) {
				c.alert(Alert{Level: AlertWarn, Kind: "peer_unload_failed", Peer: p.name, Err: e})
				continue
			}
			p.ranks[at[1]].id = 0
		}
	}
	out := c.retired[:0]
	for _, p := range c.retired {
		if !p.released() {
			out = append(out, p)
		}
	}
	clear(c.retired[len(out):])
	c.retired = out
}

func (p *peer) released() bool {
	for _, r := range p.ranks {
		if r.id != 0 || r.dlist != 0 {
			return false
		}
	}
	return true
}

// NotifyConsumed sends the consumed notification for request id to every
// rank of a connected peer: what a push consumer does once it holds the
// bytes a producer wrote. Per-rank failures are joined in the error.
func (c *Core) NotifyConsumed(ctx context.Context, name string, id RequestID) error {
	p := c.peers[name]
	if p == nil {
		return fmt.Errorf("core: notify peer %q of request %q: peer not connected", name, id)
	}
	msgs := make([]sdk.OutboundNotification, len(p.ranks))
	for i, r := range p.ranks {
		msgs[i] = sdk.OutboundNotification{Peer: r.id, Message: ConsumedMessage(id)}
	}
	errs, err := c.tr.SendNotifications(ctx, msgs)
	if err != nil {
		return fmt.Errorf("core: notify peer %q of request %q: %w", name, id, err)
	}
	var all []error
	for i := range msgs {
		if e := itemErr(errs, i, nil); e != nil {
			all = append(all, fmt.Errorf("rank %d: %w", i, e))
		}
	}
	if len(all) > 0 {
		return fmt.Errorf("core: notify peer %q of request %q: %w", name, id, errors.Join(all...))
	}
	return nil
}
