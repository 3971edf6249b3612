package core

import (
	"errors"
	"fmt"

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
	name      string
	epoch     Epoch
	ranks     []rank
	refs      int // live, leaked or posting handles that use this peer's dlists
	retired   bool
	due       bool // retired: release its natives in the next Ready
	releasing bool // retired: a release of its natives is outstanding
	reloading int  // ranks whose metadata reload is outstanding (resend.go)
}

type rank struct {
	spec  RankSpec
	id    sdk.PeerID  // zero once unloaded
	dlist sdk.DlistID // zero for notification-only ranks or once released
	// Rule 15 (resend.go): notify is the id of the rank loaded again after
	// its first notification failed (zero: none, or unloaded); notifications
	// go to it, while the dlist keeps naming id.
	notify    sdk.PeerID
	sent      bool   // a notification to the rank was handed out
	proven    bool   // a notification to id was sent OK: one may ride with a transfer on dlist (rides)
	stale     bool   // reload before the next notification
	reloading bool   // the reload's LoadPeers is outstanding
	held      []note // notifications waiting for the reload
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

// handshake is a ConnectPeer under way: its natives are acquired one batched
// call after another, each journaled as its result arrives.
type handshake struct {
	spec    PeerSpec
	epoch   Epoch
	from    int  // the journal's length before this attempt's acquisitions
	removed bool // RemovePeer or Close came meanwhile: roll back, never publish
}

// ConnectPeer starts the native half of a handshake: it loads every rank
// (notification-only ranks too) and prepares a remote dlist per rank with
// blocks, journaling each acquisition as its result arrives (rule 5, seed
// 000). Leftovers of an earlier failed rollback of this peer are retried
// first. If any step fails, everything this attempt acquired is rolled back
// in reverse order; what cannot be released stays journaled and is retried
// before the next setup of this peer (or at Close). The requests waiting for
// the peer then fail with the original handshake failure, never a rollback
// error (that one is an Alert), and a "handshake_failed" Alert carries it.
// Other peers are untouched. On success the peer is published and the
// requests waiting for it are posted. The returned error is only for bad
// input or a state that refuses the handshake, and then nothing changed.
func (c *Core) ConnectPeer(spec PeerSpec) error {
	if err := spec.validate(); err != nil {
		return fmt.Errorf("core: connect peer: %w", err)
	}
	if !c.attached {
		return fmt.Errorf("core: connect peer %q: %w; call Attach first", spec.Name, ErrNotAttached)
	}
	if c.closing {
		return fmt.Errorf("core: connect peer %q: the Core is closing", spec.Name)
	}
	if _, ok := c.peers[spec.Name]; ok {
		return fmt.Errorf("core: connect peer %q: already connected; RemovePeer it first to reconnect", spec.Name)
	}
	if c.shaking[spec.Name] != nil || c.rolling[spec.Name] {
		return fmt.Errorf("core: connect peer %q: a handshake or rollback of it is under way; wait for it", spec.Name)
	}
	hs := &handshake{spec: spec, epoch: c.epoch}
	c.shaking[spec.Name] = hs
	// Leftovers of an earlier attempt first.
	c.rollback(spec.Name, 0, func(error) { c.loadPeers(hs) })
	return nil
}

// Handshaking reports whether a handshake with peer name is under way.
func (c *Core) Handshaking(name string) bool { return c.shaking[name] != nil }

// alive reports whether hs may go on: its epoch is still attached.
func (c *Core) alive(hs *handshake) bool {
	return c.attached && hs.epoch == c.epoch && c.shaking[hs.spec.Name] == hs
}

// endHandshake ends hs with err: the requests waiting for the peer fail.
func (c *Core) endHandshake(hs *handshake, err error) {
	name := hs.spec.Name
	if c.shaking[name] == hs {
		delete(c.shaking, name)
	}
	err = fmt.Errorf("core: connect peer %q: %w", name, err)
	c.alert(Alert{Level: AlertWarn, Kind: "handshake_failed", Peer: name, Err: err})
	c.failWaiting(name, err)
}

// abandon rolls back what hs acquired, then ends it with err (the original
// failure).
func (c *Core) abandon(hs *handshake, err error) {
	if !c.alive(hs) {
		c.endHandshake(hs, err)
		return
	}
	c.rollback(hs.spec.Name, hs.from, func(error) { c.endHandshake(hs, err) })
}

func (c *Core) loadPeers(hs *handshake) {
	if !c.alive(hs) {
		c.endHandshake(hs, fmt.Errorf("epoch %d: %w", hs.epoch, ErrFenced))
		return
	}
	spec, name := hs.spec, hs.spec.Name
	hs.from = len(c.journal[name])
	loads := make([]sdk.PeerSpec, len(spec.Ranks))
	for i, r := range spec.Ranks {
		loads[i] = sdk.PeerSpec{Name: r.Agent, Metadata: r.Metadata}
	}
	c.emit(Work{Kind: WorkLoadPeers, Peers: loads}, func(res Result, err error) {
		if err == errWorkFenced || !c.alive(hs) {
			c.endHandshake(hs, fmt.Errorf("load %d ranks: %w", len(loads), errWorkFenced))
			return
		}
		if err != nil {
			if unknownOutcome(err) {
				c.requestFence(c.epoch, Alert{Level: AlertError, Kind: "handshake_outcome_unknown", Peer: name, Err: err})
			}
			c.endHandshake(hs, fmt.Errorf("load %d ranks: %w", len(loads), err))
			return
		}
		var firstErr error
		for i := range loads {
			if i >= len(res.PeerResults) {
				firstErr = firstErrOf(firstErr, fmt.Errorf("load rank %d: transport returned %d results for %d ranks", i, len(res.PeerResults), len(loads)))
				continue
			}
			if res.PeerResults[i].Err != nil {
				firstErr = firstErrOf(firstErr, fmt.Errorf("load rank %d (agent %q): %w", i, spec.Ranks[i].Agent, res.PeerResults[i].Err))
				continue
			}
			c.journal[name] = append(c.journal[name], entry{epoch: c.epoch, rank: i, peer: res.PeerResults[i].ID})
		}
		if firstErr != nil {
			c.abandon(hs, firstErr)
			return
		}
		p := &peer{name: name, epoch: c.epoch, ranks: make([]rank, len(spec.Ranks))}
		for i, r := range spec.Ranks {
			p.ranks[i] = rank{spec: r, id: res.PeerResults[i].ID}
		}
		c.prepareRemote(hs, p)
	})
}

// prepareRemote prepares the remote dlist of every rank of p with blocks.
func (c *Core) prepareRemote(hs *handshake, p *peer) {
	spec, name := hs.spec, hs.spec.Name
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
	if len(lists) == 0 {
		c.publish(hs, p)
		return
	}
	c.emit(Work{Kind: WorkPrepareDescriptors, Dlists: lists}, func(res Result, err error) {
		if err == errWorkFenced || !c.alive(hs) {
			c.endHandshake(hs, fmt.Errorf("prepare %d remote dlists: %w", len(lists), errWorkFenced))
			return
		}
		if err != nil {
			if unknownOutcome(err) {
				c.requestFence(c.epoch, Alert{Level: AlertError, Kind: "handshake_outcome_unknown", Peer: name, Err: err})
			}
			c.abandon(hs, fmt.Errorf("prepare %d remote dlists: %w", len(lists), err))
			return
		}
		var firstErr error
		for k, i := range listRank {
			if k >= len(res.DlistResults) {
				firstErr = firstErrOf(firstErr, fmt.Errorf("prepare rank %d dlist: transport returned %d results for %d dlists", i, len(res.DlistResults), len(lists)))
				continue
			}
			if res.DlistResults[k].Err != nil {
				firstErr = firstErrOf(firstErr, fmt.Errorf("prepare rank %d (agent %q) dlist: %w", i, spec.Ranks[i].Agent, res.DlistResults[k].Err))
				continue
			}
			c.journal[name] = append(c.journal[name], entry{epoch: c.epoch, rank: i, dlist: true, list: res.DlistResults[k].ID})
			p.ranks[i].dlist = res.DlistResults[k].ID
		}
		if firstErr != nil {
			c.abandon(hs, firstErr)
			return
		}
		c.publish(hs, p)
	})
}

// publish hands hs's natives to the peer record p and posts the requests
// waiting for it; a handshake whose peer was removed meanwhile is rolled back
// instead.
func (c *Core) publish(hs *handshake, p *peer) {
	name := hs.spec.Name
	if hs.removed {
		c.abandon(hs, fmt.Errorf("peer %q: %w while its handshake ran", name, ErrPeerRemoved))
		return
	}
	// The peer record owns the natives from here on.
	if hs.from == 0 {
		delete(c.journal, name)
	} else {
		c.journal[name] = c.journal[name][:hs.from]
	}
	delete(c.shaking, name)
	c.peers[name] = p
	w := c.waiting[name]
	delete(c.waiting, name)
	for _, r := range w {
		r.flags &^= rWaiting
		c.bind(r, p)
	}
}

// firstErrOf keeps the first error seen.
func firstErrOf(first, next error) error {
	if first != nil {
		return first
	}
	return next
}
