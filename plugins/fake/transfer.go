package fake

import (
	"net"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// transfer is a posted transfer as the DMA engine sees it: the segments to
// copy, how far it got, and the faults selected for it at Post.
type transfer struct {
	h    *handle
	peer *peer // the remote agent, held for its life probe
	segs []segment
	seg  int // next segment to copy
	off  int // next byte within it
	maps []*mapping

	chunks   int       // chunks copied so far
	canceled bool      // Cancel was asked
	cancelAt time.Time // misbehave=cancel-slow: Cancel takes effect then
	hung     bool      // misbehave=peer-loss-lie: its peer died, it never ends
	watched  time.Time // last check that the peer lives (fence=initiated)

	stall      bool      // stall fault selected
	stallUntil time.Time // zero: forever

	failAfter int      // fail or disconnect after this many chunks; -1: none
	failCode  sdk.Code // its code
	failRule  string   // its rule, for the reason

	note      []byte        // notification to deliver once DONE
	to        *net.UnixAddr // the peer's notification socket
	noteDrop  bool
	noteDelay time.Duration
	// earlyDone: misbehave=early-done reported DONE with the last chunk
	// still to land; it lands once the handle is released (released).
	earlyDone bool
	released  bool
}

// segment is one descriptor pair: bytes to copy from src to dst, and the
// lease of the remote region involved (nil under fence=initiated). When the
// remote agent copies chunks into and out of its memory itself (via), the
// remote side is its region and the offset there, and only the local
// slice (src of a WRITE, dst of a READ) is touched here.
type segment struct {
	dst, src       []byte
	dstMap, srcMap *mapping
	probe          *lease

	via    *incomingConn
	region sdk.RegionID
	roff   uint64
	write  bool
}

// hold records that the transfer touches m, once.
func (x *transfer) hold(m *mapping) {
	for _, have := range x.maps {
		if have == m {
			return
		}
	}
	x.maps = append(x.maps, m)
}

// applyFaults selects, in rule order, the first rule of each transfer kind
// that applies to x, the t.posts-th transfer, to peer agent peer. Of fail
// and disconnect only the first that selects x applies: once one did, no
// rule of either kind is tried, so none spends its times= budget (or a
// random draw) on a transfer it does not affect.
func (t *Transport) applyFaults(x *transfer, peer string, now time.Time) {
	seen := map[faultKind]bool{}
	for i := range t.p.faults {
		r := &t.p.faults[i]
		if seen[r.kind] || !isTransferFault(r.kind) {
			continue
		}
		if (r.kind == faultFail || r.kind == faultDisconnect) && x.failAfter >= 0 {
			continue // the other of fail and disconnect applies already
		}
		if !r.selects(t.rng, t.posts, peer, -1) {
			continue
		}
		seen[r.kind] = true
		t.faultFired(r)
		switch r.kind {
		case faultStall:
			x.stall = true
			if r.hasDur {
				x.stallUntil = now.Add(r.dur)
			}
		case faultFail, faultDisconnect:
			x.failAfter, x.failCode, x.failRule = r.after, r.code, r.text
			if r.kind == faultDisconnect {
				x.failCode = sdk.CodeRemoteDisconnect
			}
		case faultReleaseFail:
			x.h.Value.releaseFails = r.count
		case faultPollFail:
			x.h.Value.pollFails = r.count
		case faultNotifDrop:
			x.noteDrop = true
		case faultNotifDelay:
			x.noteDelay = r.dur
		}
	}
}

// isTransferFault reports whether rules of kind k are selected per transfer
// at Post.
func isTransferFault(k faultKind) bool {
	switch k {
	case faultStall, faultFail, faultDisconnect, faultReleaseFail, faultPollFail, faultNotifDrop, faultNotifDelay:
		return true
	}
	return false
}

// fault returns the first rule of kind k that applies to a candidate with
// the given post number, peer agent and rank, or nil.
func (t *Transport) fault(k faultKind, post int, peer string, rank int) *rule {
	for i := range t.p.faults {
		r := &t.p.faults[i]
		if r.kind == k && r.selects(t.rng, post, peer, rank) {
			t.faultFired(r)
			return r
		}
	}
	return nil
}
