package core

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// Part is one transfer of a request: Local blocks of a local pool move to or
// from the same number of Remote blocks of one remote rank's pool. Each part
// becomes one transfer handle.
type Part struct {
	Pool   PoolID
	Local  []uint32
	Rank   int
	Remote []uint32
}

// ReadSpec pulls blocks of a request from a peer into engine blocks.
type ReadSpec struct {
	Request RequestID
	Peer    string
	Parts   []Part
	// NotifyProducer: once every part is DONE and released, send the
	// consumed notification to each rank read from, so the producer frees
	// its blocks. Never sent when any part failed.
	NotifyProducer bool
	// Token is the request's notification token (see Token): the one its
	// producer's ExpectSend was given. Needed with NotifyProducer.
	Token Token
}

// WriteSpec pushes engine blocks of a request into a peer's blocks.
type WriteSpec struct {
	Request RequestID
	Peer    string
	Parts   []Part
	// Consumers is how many consumed notifications finish the send (one per
	// consumer rank under heterogeneous TP; each agent counts once, and only
	// ranks of Peer count); at least 1.
	Consumers int
	// Lease bounds the wait for those notifications; positive. A failed push
	// keeps its blocks until the lease expires.
	Lease time.Duration
	// Token is the request's notification token (see Token), the one the
	// consumer's ExpectReceive was given; not zero. The written
	// notifications carry it, and only consumed notifications with it count.
	Token Token
}

// SendSpec pins engine blocks that peers will read (pull mode, producer
// side) until Consumers consumed notifications arrived or Lease expired.
type SendSpec struct {
	Request RequestID
	// Peer, when set, ties the send to a connected peer: removing the peer
	// fails the send (its blocks still wait for the lease, since a consumer
	// may be reading them).
	Peer      string
	Pool      PoolID
	Blocks    []uint32
	Consumers int
	Lease     time.Duration
	// Token is the request's notification token (see Token), the one the
	// consumer's Read is given; not zero. Only consumed notifications with
	// it count.
	Token Token
}

type reqKind uint8

const (
	kindRead reqKind = iota + 1
	kindWrite
	kindSend
	kindRecv // ExpectReceive: a push consumer's blocks
)

const (
	rWaiting   uint8 = 1 << iota // waiting for its peer's handshake
	rDirty                       // queued in Core.dirty
	rReported                    // its terminal report was emitted
	rLeaseOver                   // the lease expired
	rNotify                      // ReadSpec.NotifyProducer
	rAbandoned                   // no consumer can read it any more: finish without the lease
	rFenceWait                   // a call's outcome is unknown, or a failed receive's producer may write, until its peer's epoch is fenced
	rWritten                     // writes: the written notification was sent (or is not to be)
)

// request is one engine request. Its blocks are its parts' local blocks; it
// holds them (OwnerTransfer or OwnerRetained) until its terminal report. It
// is kept small: core tracks one per request in flight.
type request struct {
	id        RequestID
	peer      *peer    // its session; nil while waiting for a handshake
	xs        []xfer   // one per part
	idx       []uint32 // every part's local indices, then its remote ones
	failed    error
	from      *[]string // sends and receives: the distinct agents that notified it (nil: none yet); a pointer, since reads never need it
	token     Token     // its notifications' token (zero: a Read that notifies no one)
	next      *request  // next request of its reqIndex chain
	pprev     **request // the pointer that points to it in its chain
	pending   int32     // handles not yet released or forgotten
	consumers int32
	notified  int32 // len(from)
	kind      reqKind
	flags     uint8
}

// request1 is a request of one part (homogeneous TP, and every send and
// receive) allocated together with its part and, for a part of one block,
// its indices: one object instead of three, so a round that finishes it
// touches one place in memory, not three, and the heap holds fewer objects.
type request1 struct {
	request
	x  [1]xfer
	ix [2]uint32
}

// newRequestOf returns an empty request with room for parts parts and n
// block indices (local and remote together): r.xs has parts zero parts and
// r.idx length zero.
func newRequestOf(parts, n int) *request {
	if parts != 1 {
		return &request{xs: make([]xfer, parts), idx: make([]uint32, 0, n)}
	}
	o := &request1{}
	o.xs = o.x[:]
	if n <= len(o.ix) {
		o.idx = o.ix[:0]
	} else {
		o.idx = make([]uint32, 0, n)
	}
	return &o.request
}

// xfer is one part of a request and, once posted, its transfer handle.
type xfer struct {
	ref      Ref // Handle zero: not posted
	req      *request
	deadline int64  // hold-cap deadline (UnixNano)
	off, n   uint32 // local indices req.idx[off:off+n], remote req.idx[off+n:off+2n]
	pool     PoolID
	rank     uint16
	state    sdk.State
	flags    uint8
}

func (x *xfer) local() []uint32  { return x.req.idx[x.off : x.off+x.n] }
func (x *xfer) remote() []uint32 { return x.req.idx[x.off+x.n : x.off+2*x.n] }

// peerName is the name of the peer x's request is bound to.
func (x *xfer) peerName() string { return x.req.peerName() }

// notifiedBy reports whether agent already notified r.
func (r *request) notifiedBy(agent string) bool {
	return r.from != nil && slices.Contains(*r.from, agent)
}

func (r *request) peerName() string {
	if r.peer == nil {
		return ""
	}
	return r.peer.name
}

const (
	fRetained  uint8 = 1 << iota // its session closed while it ran
	fQueued                      // in releaseQ
	fGone                        // released or forgotten
	fEscalated                   // held past the cap; fence asked
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
	r, err := c.newRequest(spec.Request, spec.Peer, spec.Parts, kindRead)
	if err != nil {
		return fmt.Errorf("core: read request %q: %w", spec.Request, err)
	}
	r.token = spec.Token
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
	r, err := c.newRequest(spec.Request, spec.Peer, spec.Parts, kindWrite)
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
	if err := c.checkID(spec.Request); err != nil {
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
// a request waiting for one would wait for good).
func (c *Core) checkID(id RequestID) error {
	if c.closing || c.closed {
		return errors.New("the Core is closing; no request is taken any more")
	}
	if id == "" {
		return errors.New("request id is empty")
	}
	if c.reqs.get(id) != nil {
		return fmt.Errorf("request %q is still in flight; use a new id", id)
	}
	return nil
}

// newRequest validates a read or write and records it, moving its blocks to
// OwnerTransfer. It changes nothing on error.
func (c *Core) newRequest(id RequestID, peerName string, parts []Part, kind reqKind) (*request, error) {
	if err := c.checkID(id); err != nil {
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
	r.id, r.kind = id, kind
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

// bind ties r to p and hands out the Post of its parts. A layout mismatch
// found only now (the request waited for the handshake) or a post failure
// fails r. While the Post is outstanding its parts count as pending and use
// p's dlists, so neither r nor p can be let go.
func (c *Core) bind(r *request, p *peer) {
	r.peer = p
	c.markDirty(r)
	for i := range r.xs {
		x := &r.xs[i]
		if err := c.checkRank(p, i, x.pool, int(x.rank), x.remote()); err != nil {
			c.fail(r, sdk.Errorf(sdk.CodeInvalidArgument, "request %q does not fit peer %q: %v", r.id, p.name, err))
			return
		}
	}
	if !c.attached || p.epoch != c.epoch {
		c.fail(r, ErrNotAttached)
		return
	}
	for i := range r.xs {
		if lp := c.pool(r.xs[i].pool); lp.epoch != c.epoch || lp.local == 0 {
			c.fail(r, fmt.Errorf("request %q part %d: pool %d is not registered in epoch %d: %w", r.id, i, lp.id, c.epoch, ErrNotAttached))
			return
		}
	}
	op := sdk.OpRead
	if r.kind == kindWrite {
		op = sdk.OpWrite
	}
	// The consumed notification of a one-part read rides with its transfer
	// when the rank allows it: the transport delivers it once the read is
	// DONE, and never if it fails, which is when core would send it.
	var ride []byte
	if r.flags&rNotify != 0 && len(r.xs) == 1 && p.ranks[r.xs[0].rank].rides() {
		ride = ConsumedMessage(r.id, r.token)
		r.flags &^= rNotify
	}
	each(len(r.xs), c.batch, func(lo, hi int) {
		posts := make([]sdk.PostSpec, hi-lo)
		for i := lo; i < hi; i++ {
			x := &r.xs[i]
			posts[i-lo] = sdk.PostSpec{Op: op, Local: c.pool(x.pool).local, LocalIndices: x.local(), Remote: p.ranks[x.rank].dlist, RemoteIndices: x.remote(), Notification: ride}
		}
		r.pending += int32(hi - lo)
		p.refs += hi - lo
		c.emit(Work{Kind: WorkPost, Posts: posts}, func(res Result, err error) { c.posted(r, p, lo, hi, res, err) })
	})
}

// posted applies the outcome of the Post of r's parts [lo, hi).
func (c *Core) posted(r *request, p *peer, lo, hi int, res Result, err error) {
	unposted := func(n int) {
		r.pending -= int32(n)
		p.refs -= n
		p.due = p.due || (p.retired && p.refs == 0)
		c.markDirty(r)
	}
	switch {
	case err == errWorkFenced:
		// The process died with whatever the call posted.
		unposted(hi - lo)
		c.fail(r, fmt.Errorf("post request %q: %w", r.id, err))
		return
	case err != nil && unknownOutcome(err):
		// Handles may exist that we cannot name: the blocks stay pinned
		// until the epoch is fenced.
		unposted(hi - lo)
		r.flags |= rFenceWait
		c.requestFence(c.epoch, Alert{Level: AlertError, Kind: "post_outcome_unknown", Peer: p.name, Request: r.id, Err: err})
		c.fail(r, fmt.Errorf("post request %q: %w: %w", r.id, ErrUnknownOutcome, err))
		return
	case err != nil:
		unposted(hi - lo)
		c.fail(r, fmt.Errorf("post request %q parts %d-%d: %w", r.id, lo, hi-1, err))
		return
	}
	var cancel []*xfer
	for k := lo; k < hi; k++ {
		var e error
		switch {
		case k-lo >= len(res.Posts):
			e = sdk.Errorf(sdk.CodeBackend, "transport returned %d results for %d posts", len(res.Posts), hi-lo)
		case res.Posts[k-lo].Err != nil:
			e = res.Posts[k-lo].Err
		}
		if e != nil {
			unposted(1)
			c.alert(Alert{Level: AlertWarn, Kind: "transfer_setup_failed", Peer: p.name, Request: r.id, Err: e})
			c.fail(r, fmt.Errorf("post request %q part %d: %w", r.id, k, e))
			continue
		}
		x := &r.xs[k]
		x.ref, x.state = Ref{c.epoch, res.Posts[k-lo].ID}, sdk.StateInProgress
		c.live.add(x)
		c.hold(x)
		if p.retired {
			// Its session closed while the Post was outstanding: retained,
			// like the handles that ran when the peer was removed (rule 6).
			x.flags |= fRetained
			c.pin(x, OwnerRetained)
			cancel = append(cancel, x)
		}
	}
	if len(cancel) > 0 {
		c.cancelAndPoll(p.name, cancel)
	}
}

// fail records r's first failure; it is reported once r drains.
func (c *Core) fail(r *request, reason error) {
	if r.failed == nil {
		r.failed = reason
	}
	c.markDirty(r)
}

// pin moves the blocks of x's part to owner o (OwnerRetained on retirement).
func (c *Core) pin(x *xfer, o Owner) {
	p := c.pool(x.pool)
	for _, b := range x.local() {
		if p.owner[b] != OwnerQuarantined {
			p.owner[b] = o
		}
	}
}
