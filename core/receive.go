package core

import (
	"fmt"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// RecvSpec pins engine blocks a push producer writes into (push mode,
// consumer side) until Producers written notifications arrived or Lease
// expired.
type RecvSpec struct {
	Request RequestID
	// Peer is the producer: a connected peer, since the consumed
	// notification core sends when the receive finishes needs its ranks
	// loaded.
	Peer   string
	Pool   PoolID
	Blocks []uint32
	// Producers is how many written notifications finish the receive (one
	// per producer rank that writes into these blocks); at least 1.
	Producers int
	// Lease bounds the wait for those notifications; positive.
	Lease time.Duration
	// Token is the request's notification token (see Token), the one the
	// producer's Write is given; not zero. Only written notifications with
	// it count, and the consumed notification carries it.
	Token Token
}

// recv is what a push receive keeps besides its request: the fence scope
// of the epoch its blocks are registered in. The agents that sent its
// written notifications (the consumed notification goes back to them) are
// its request's from.
type recv struct {
	r        *request
	incoming bool // FenceInitiatedAndIncoming: a fence of r.peer.epoch stops the producer's writes
}

// ExpectReceive pins blocks a producer will write into (its Write on the
// producer's Core) until Producers written notifications arrived: then the
// request is reported in FinishedReceiving, its blocks back with the engine
// holding the bytes, and core sends the consumed notification to each rank
// of the peer that sent a written one, so the producer finishes sending.
// Each producer counts once however many times it notifies, only ranks of
// Peer count, and only notifications with the receive's Token: others are
// ignored with an Alert.
// Written notifications that came before ExpectReceive count (bounded by
// Config.MaxEarlyNotifications and Config.EarlyNotificationAge), except
// while the id is among the recently reported ones: those are late.
//
// A receive fails when its lease expires first (ErrLeaseExpired), when its
// peer is removed, when its epoch is fenced, or when the Core closes. Its
// bytes are then undefined and the producer may still be writing into its
// blocks, so they go back to the engine only once that is proven over
// (docs/fencing.md): once every producer reported its writes (the written count
// was reached after all), or once the registration that lets the producer
// write is gone: the epoch was fenced, or Close deregistered the pool, and
// the transport's FenceScope is FenceInitiatedAndIncoming. With that scope
// and EscalateFence, a failed receive asks for a fence of its epoch
// (Ready.Fence) and waits for it. Otherwise (FenceInitiated, or a policy
// that does not fence) its blocks are quarantined, never reused;
// EscalateReleaseAndReuse hands them back as invalid with an error Alert
// instead. The failure is reported once, with the blocks in InvalidBlocks
// (or Quarantined) of the same Ready. Bad input is an error that changes
// nothing.
func (c *Core) ExpectReceive(now time.Time, spec RecvSpec) error {
	c.setNow(now)
	if spec.Producers < 1 || spec.Lease <= 0 {
		return fmt.Errorf("core: expect receive %q: Producers %d must be at least 1 and Lease %v positive", spec.Request, spec.Producers, spec.Lease)
	}
	if len(spec.Blocks) == 0 {
		return fmt.Errorf("core: expect receive %q: no blocks", spec.Request)
	}
	if spec.Token == 0 {
		return fmt.Errorf("core: expect receive %q: Token is zero; draw one per request and pass it to the producer's Write too", spec.Request)
	}
	if err := c.checkID(spec.Request, spec.Token, kindRecv); err != nil {
		return fmt.Errorf("core: expect receive: %w", err)
	}
	p := c.pool(spec.Pool)
	if p == nil {
		return fmt.Errorf("core: expect receive %q: pool %d is not registered", spec.Request, spec.Pool)
	}
	if !c.attached || p.epoch != c.epoch || p.local == 0 {
		return fmt.Errorf("core: expect receive %q: pool %d is not registered with an attached transport; Attach one first", spec.Request, spec.Pool)
	}
	if err := p.checkEngine(spec.Blocks); err != nil {
		return fmt.Errorf("core: expect receive %q: %w", spec.Request, err)
	}
	peer := c.peers[spec.Peer]
	if peer == nil {
		return fmt.Errorf("core: expect receive %q: peer %q is not connected; connect it first (the consumed notification needs its ranks loaded)", spec.Request, spec.Peer)
	}
	r := newRequestOf(1, len(spec.Blocks))
	r.id, r.kind, r.peer, r.idx = spec.Request, kindRecv, peer, append(r.idx, spec.Blocks...)
	r.xs[0] = xfer{req: r, n: uint32(len(spec.Blocks)), pool: spec.Pool}
	r.token, r.consumers = spec.Token, int32(spec.Producers)
	p.setOwner(r.idx, OwnerTransfer)
	c.reqs.add(r)
	rv := &recv{r: r, incoming: c.desc.FenceScope == sdk.FenceInitiatedAndIncoming}
	c.recvs[r.id] = rv
	c.adoptEarly(r, true)
	c.leases.push(r, c.now+int64(spec.Lease))
	c.markDirty(r)
	return nil
}

// recvSettled decides a drained receive's outcome: done reports whether it
// may be reported now, quarantine whether its blocks must be quarantined
// rather than handed back. It fails the receive when its lease is over, and
// asks for a fence when only a fence can prove the producer stopped.
func (c *Core) recvSettled(r *request) (quarantine, done bool) {
	rv := c.recvs[r.id]
	if r.notified >= r.consumers {
		// Every producer reported its writes DONE: nothing more moves into
		// the blocks, whether or not the receive failed meanwhile.
		return false, true
	}
	if r.failed == nil {
		if r.flags&rLeaseOver == 0 {
			return false, false
		}
		err := fmt.Errorf("receive %q: %d of %d producers reported their writes before the lease expired: %w", r.id, r.notified, r.consumers, ErrLeaseExpired)
		c.alert(Alert{Level: AlertWarn, Kind: "receive_lease_expired", Peer: r.peerName(), Request: r.id, Err: err})
		r.failed = err // not fail: r is being finished, marking it dirty would lose it
	}
	// Its registration in the receive's epoch is what let the producer write.
	gone := c.pool(r.xs[0].pool).epoch != r.peer.epoch
	switch {
	case rv.incoming && gone:
		return false, true
	case c.cfg.Escalation == EscalateReleaseAndReuse:
		c.alert(Alert{Level: AlertError, Kind: "receive_blocks_reused", Peer: r.peerName(), Request: r.id, Err: fmt.Errorf("%w; a producer may still write into its blocks, handed back for reuse (EscalateReleaseAndReuse)", r.failed)})
		return false, true
	case rv.incoming && r.flags&rAbandoned != 0:
		return false, false // Close deregisters the pool, then reports it
	case rv.incoming && c.cfg.Escalation == EscalateFence:
		r.flags |= rFenceWait
		c.requestFence(r.peer.epoch, Alert{Level: AlertError, Kind: "receive_fence", Peer: r.peerName(), Request: r.id, Err: fmt.Errorf("%w; a producer may still write into its blocks until epoch %d is fenced", r.failed, r.peer.epoch)})
		return false, false
	}
	c.alert(Alert{Level: AlertError, Kind: "receive_quarantined", Peer: r.peerName(), Request: r.id, Err: fmt.Errorf("%w; a producer may still write into its blocks and the fence cannot stop it: quarantined", r.failed)})
	return true, true
}

// notifyConsumed sends the consumed notification of a finished receive to
// each rank of its peer that sent a written notification, or to every rank
// when none of the senders is one.
func (c *Core) notifyConsumed(r *request, rv *recv) {
	p := r.peer
	if p.retired || !c.attached || p.epoch != c.epoch {
		c.alert(Alert{Level: AlertWarn, Kind: "consumed_notification_failed", Peer: p.name, Request: r.id, Err: fmt.Errorf("peer %q is no longer connected in epoch %d", p.name, c.epoch)})
		return
	}
	var ranks []int
	for i, rk := range p.ranks {
		if r.notifiedBy(rk.spec.Agent) {
			ranks = append(ranks, i)
		}
	}
	if len(ranks) == 0 {
		for i := range p.ranks {
			ranks = append(ranks, i)
		}
	}
	c.notify(p, ranks, ConsumedMessage(r.id, r.token), "consumed_notification_failed", r.id)
}

// notifyWritten sends, once, the written notification of a push whose every
// part is DONE and released to each rank it wrote to; never after a
// failure.
func (c *Core) notifyWritten(r *request) {
	if r.flags&rWritten != 0 || r.failed != nil {
		return
	}
	r.flags |= rWritten
	c.notifyRanks(r, WrittenMessage(r.id, r.token), "written_notification_failed")
}
