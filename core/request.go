package core

import (
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
	// its blocks. Never sent when any part failed, was canceled or ended
	// unknown. A one-part read's rides with its transfer (see Notifications
	// in the package doc): it arrives once that transfer is DONE, and the
	// read may still be reported failed after it, for what the transfer's
	// DONE does not settle (its peer removed, a Release refused past the
	// hold cap, its transport fenced before core saw the DONE). The
	// producer's reuse is safe then too: no transfer reads its blocks once
	// every one from them is DONE.
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
