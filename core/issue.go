package core

import (
	"errors"
	"fmt"
	"time"
)

// Read records a pull request and posts one READ per part. Its blocks move
// from the engine to the request at once. If the peer is not connected yet the
// request waits for ConnectPeer (or fails with HandshakeFailed). Transport
// failures while posting never return an error: they fail the request, which
// is reported (with its invalid blocks) by the Poll round in which its last
// handle is released. Bad input is an error that changes nothing.
func (c *Core) Read(now time.Time, spec ReadSpec) error {
	c.setNow(now)
	if spec.NotifyProducer && spec.Token == 0 {
		return fmt.Errorf("core: read request %q: NotifyProducer without a Token; pass the token the producer's ExpectSend was given", spec.Request)
	}
	r, err := c.newRequest(spec.Request, spec.Token, spec.Peer, spec.Parts, kindRead)
	if err != nil {
		return fmt.Errorf("core: read request %q: %w", spec.Request, err)
	}
	if spec.NotifyProducer {
		r.flags |= rNotify
	}
	c.admit(r, spec.Peer)
	return nil
}

// Write records a push request and posts one WRITE per part. It finishes
// sending once every handle is DONE and released and Consumers consumed
// notifications arrived, or its lease expired; a failed push is never
// reported as finished sending: it is reported Failed once its handles are
// released and its lease expired. Otherwise as Read.
func (c *Core) Write(now time.Time, spec WriteSpec) error {
	c.setNow(now)
	if spec.Consumers < 1 || spec.Lease <= 0 {
		return fmt.Errorf("core: write request %q: Consumers %d must be at least 1 and Lease %v positive", spec.Request, spec.Consumers, spec.Lease)
	}
	if spec.Token == 0 {
		return fmt.Errorf("core: write request %q: Token is zero; pass the token the consumer's ExpectReceive was given", spec.Request)
	}
	r, err := c.newRequest(spec.Request, spec.Token, spec.Peer, spec.Parts, kindWrite)
	if err != nil {
		return fmt.Errorf("core: write request %q: %w", spec.Request, err)
	}
	c.startSend(r, spec.Token, spec.Consumers, spec.Lease)
	c.admit(r, spec.Peer)
	return nil
}

// ExpectSend pins blocks that consumers will read until Consumers consumed
// notifications with its Token arrived or the lease expired; then the
// request is finished sending (or Failed, if its peer was removed
// meanwhile). Each consumer agent counts once; with Peer set, only the
// peer's ranks count; a notification with another token (one for an earlier
// request under the same id) is dropped with an Alert. Notifications that
// came before ExpectSend count as for ExpectReceive. Bad input is an error
// that changes nothing.
func (c *Core) ExpectSend(now time.Time, spec SendSpec) error {
	c.setNow(now)
	if spec.Consumers < 1 || spec.Lease <= 0 {
		return fmt.Errorf("core: expect send %q: Consumers %d must be at least 1 and Lease %v positive", spec.Request, spec.Consumers, spec.Lease)
	}
	if len(spec.Blocks) == 0 {
		return fmt.Errorf("core: expect send %q: no blocks", spec.Request)
	}
	if spec.Token == 0 {
		return fmt.Errorf("core: expect send %q: Token is zero; draw one per request and pass it to the consumer's Read too", spec.Request)
	}
	if err := c.checkID(spec.Request, spec.Token, kindSend); err != nil {
		return fmt.Errorf("core: expect send: %w", err)
	}
	p := c.pool(spec.Pool)
	if p == nil {
		return fmt.Errorf("core: expect send %q: pool %d is not registered", spec.Request, spec.Pool)
	}
	if err := p.checkEngine(spec.Blocks); err != nil {
		return fmt.Errorf("core: expect send %q: %w", spec.Request, err)
	}
	if spec.Peer != "" && c.peers[spec.Peer] == nil {
		return fmt.Errorf("core: expect send %q: peer %q is not connected; connect it first or leave Peer empty", spec.Request, spec.Peer)
	}
	r := newRequestOf(1, len(spec.Blocks))
	r.id, r.kind, r.peer, r.idx = spec.Request, kindSend, c.peers[spec.Peer], append(r.idx, spec.Blocks...)
	r.xs[0] = xfer{req: r, n: uint32(len(spec.Blocks)), pool: spec.Pool}
	p.setOwner(r.idx, OwnerTransfer)
	c.reqs.add(r)
	c.startSend(r, spec.Token, spec.Consumers, spec.Lease)
	return nil
}

// checkID refuses a request the Core could never report: one of an id
// still in flight, or any once Close began (no peer connects any more, so
// a request waiting for one would wait for good); and the retry of one it
// took (ErrDuplicate, retry.go).
func (c *Core) checkID(id RequestID, token Token, kind reqKind) error {
	if id == "" {
		return errors.New("request id is empty")
	}
	if err := c.checkRetry(id, token, kind); err != nil {
		return err // a retry is told as one even once Close began
	}
	if c.closing || c.closed {
		return errors.New("the Core is closing; no request is taken any more")
	}
	return nil
}

// newRequest validates a read or write and records it, moving its blocks to
// OwnerTransfer. It changes nothing on error.
func (c *Core) newRequest(id RequestID, token Token, peerName string, parts []Part, kind reqKind) (*request, error) {
	if err := c.checkID(id, token, kind); err != nil {
		return nil, err
	}
	if peerName == "" {
		return nil, errors.New("peer name is empty")
	}
	if len(parts) == 0 {
		return nil, errors.New("no parts; give one Part per remote rank to read from or write to")
	}
	if len(parts) > 1<<16 {
		return nil, fmt.Errorf("%d parts; at most 65536", len(parts))
	}
	pools := make([]*pool, len(parts))
	blocks := make([][]uint32, len(parts))
	total := 0
	for i, pt := range parts {
		p := c.pool(pt.Pool)
		switch {
		case p == nil:
			return nil, fmt.Errorf("part %d: pool %d is not registered", i, pt.Pool)
		case len(pt.Local) == 0 || len(pt.Local) != len(pt.Remote):
			return nil, fmt.Errorf("part %d: %d local and %d remote blocks; both must be equal and positive", i, len(pt.Local), len(pt.Remote))
		case pt.Rank < 0 || pt.Rank >= 1<<16:
			return nil, fmt.Errorf("part %d: rank %d is out of range [0, 65536)", i, pt.Rank)
		}
		pools[i], blocks[i] = p, pt.Local
		total += 2 * len(pt.Local)
	}
	if err := checkEngineParts(pools, blocks); err != nil {
		return nil, err
	}
	if p := c.peers[peerName]; p != nil {
		if err := c.checkRanks(p, parts); err != nil {
			return nil, err
		}
	}
	r := newRequestOf(len(parts), total)
	r.id, r.kind, r.token = id, kind, token
	for i, pt := range parts {
		r.xs[i] = xfer{req: r, off: uint32(len(r.idx)), n: uint32(len(pt.Local)), pool: pt.Pool, rank: uint16(pt.Rank)}
		r.idx = append(r.idx, pt.Local...)
		r.idx = append(r.idx, pt.Remote...)
		pools[i].setOwner(pt.Local, OwnerTransfer)
	}
	c.reqs.add(r)
	return r, nil
}

// checkRanks verifies parts against a connected peer's layout.
func (c *Core) checkRanks(p *peer, parts []Part) error {
	for i, pt := range parts {
		if err := c.checkRank(p, i, pt.Pool, pt.Rank, pt.Remote); err != nil {
			return err
		}
	}
	return nil
}

func (c *Core) checkRank(p *peer, i int, pool PoolID, rank int, remote []uint32) error {
	if rank >= len(p.ranks) {
		return fmt.Errorf("part %d: peer %q has %d ranks, so rank %d does not exist", i, p.name, len(p.ranks), rank)
	}
	rs := p.ranks[rank].spec
	if rs.Blocks == 0 {
		return fmt.Errorf("part %d: rank %d of peer %q is notification-only; it has no blocks", i, rank, p.name)
	}
	if lp := c.pool(pool); lp.spec.BlockSize != rs.BlockSize {
		return fmt.Errorf("part %d: local block size %d differs from rank %d's %d", i, lp.spec.BlockSize, rank, rs.BlockSize)
	}
	for _, b := range remote {
		if b >= rs.Blocks {
			return fmt.Errorf("part %d: rank %d of peer %q has %d blocks, so remote block %d does not exist", i, rank, p.name, rs.Blocks, b)
		}
	}
	return nil
}

func (c *Core) startSend(r *request, token Token, consumers int, lease time.Duration) {
	r.token, r.consumers = token, int32(consumers)
	c.sends[r.id] = r
	c.adoptEarly(r, false)
	c.leases.push(r, c.now+int64(lease))
	c.markDirty(r)
}

// admit posts r now if its peer is connected, else queues it for the
// handshake.
func (c *Core) admit(r *request, peer string) {
	if p := c.peers[peer]; p != nil {
		c.bind(r, p)
		return
	}
	r.flags |= rWaiting
	c.waiting[peer] = append(c.waiting[peer], r)
}

// failWaiting fails every request waiting for peer's handshake with reason.
func (c *Core) failWaiting(name string, reason error) {
	for _, r := range c.waiting[name] {
		r.flags &^= rWaiting
		c.fail(r, reason)
	}
	delete(c.waiting, name)
}
