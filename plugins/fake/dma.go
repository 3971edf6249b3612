package fake

import (
	"slices"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// stallScan is how often the engine checks the leases of stalled transfers,
// so that a stalled transfer to a dead peer still ends REMOTE_DISCONNECT
// within Limits.PeerLossBoundMillis.
const stallScan = 10 * time.Millisecond

// peerWatch is how often, under fence=initiated, the engine checks that the
// peer of a running transfer lives: a stand-in for UCX's peer-process
// watch, which takes far longer. Until it notices a death, chunks keep landing in the dead
// agent's memory, which the peer maps directly: that is what an
// initiated-only fence means for the agent that died.
const peerWatch = 20 * time.Millisecond

// engine is the agent's DMA engine: it copies one chunk of one transfer per
// step, round robin over the transfers in flight, pausing chunk_delay after
// each chunk, and sleeps while nothing can move. It ends when the agent
// closes or crashes.
func (t *Transport) engine() {
	defer t.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		copied, again, wait := t.step()
		if w := t.flush(); w > 0 {
			wait = shorter(wait, w)
		}
		select {
		case <-t.stop:
			return
		default:
		}
		if copied && t.p.chunkDelay > 0 {
			wait, again = t.p.chunkDelay, false
		}
		if again {
			continue
		}
		if wait <= 0 {
			wait = time.Hour
		}
		timer.Reset(wait)
		select {
		case <-t.stop:
			return
		case <-t.wake:
			if copied && t.p.chunkDelay > 0 {
				// A kick must not shorten the pause between chunks.
				select {
				case <-t.stop:
					return
				case <-timer.C:
				}
			}
		case <-timer.C:
		}
	}
}

// step does one unit of the engine's work: it delivers notifications that
// fell due, ends transfers that were canceled, failed or lost their peer,
// and copies one chunk. It reports whether it copied bytes, whether more
// work is ready at once, and how long until the next timed event.
// Notifications to send go to the outbox, which flush delivers.
func (t *Transport) step() (copied, again bool, wait time.Duration) {
	if t.stepHook != nil {
		t.stepHook()
	}
	t.mu.Lock()
	now := time.Now()
	var due []note
	due, wait = t.dueNotes(now)
	t.outbox = append(t.outbox, due...)
	order := append(slices.Clone(t.active[t.next:]), t.active[:t.next]...)
	var pick *transfer
	for _, x := range order {
		if x.hung {
			if x.canceled {
				t.finish(x, sdk.StateCanceled, sdk.Errorf(sdk.CodeCanceled, "fake: handle %d canceled", x.h.ID))
			}
			continue
		}
		if t.peerLost(x, now) {
			t.lost(x, peerGone(x))
			continue
		}
		switch {
		case x.canceled && now.Before(x.cancelAt):
			wait = shorter(wait, x.cancelAt.Sub(now))
		case x.canceled && !x.earlyDone:
			t.finish(x, sdk.StateCanceled, sdk.Errorf(sdk.CodeCanceled, "fake: handle %d canceled", x.h.ID))
		case x.earlyDone && !x.released:
			// Parked: what reads the bytes between DONE and Release finds
			// the last chunk missing, however slowly it runs.
		case x.stall && (x.stallUntil.IsZero() || now.Before(x.stallUntil)):
			if !x.leasesHeld(0, len(x.segs)) {
				t.lost(x, disconnected(x))
				continue
			}
			wait = shorter(wait, stallScan)
			if !x.stallUntil.IsZero() {
				wait = shorter(wait, x.stallUntil.Sub(now))
			}
		default:
			if pick == nil {
				x.stall = false
				pick = x
			}
		}
	}
	if pick == nil {
		t.mu.Unlock()
		return false, false, wait
	}
	x := pick
	if x.failAfter >= 0 && x.chunks >= x.failAfter {
		t.finish(x, sdk.StateFailed, sdk.Errorf(x.failCode, "fake: handle %d: injected fault %q after %d chunks", x.h.ID, x.failRule, x.chunks))
		t.mu.Unlock()
		return false, true, wait
	}
	pieces, seg, off := x.chunk(t.p.chunk)
	if !x.leasesHeld(x.seg, min(seg+1, len(x.segs))) {
		t.lost(x, disconnected(x))
		t.mu.Unlock()
		return false, true, wait
	}
	last := seg == len(x.segs)
	if last && !x.earlyDone && t.misbehaves(misbehaveEarlyDone) {
		x.earlyDone = true
		t.report(x, sdk.StateDone, nil)
		t.mu.Unlock()
		return false, true, wait
	}
	x.seg, x.off = seg, off
	t.next = (slices.Index(t.active, x) + 1) % len(t.active)
	t.mu.Unlock()

	if t.moveHook != nil {
		t.moveHook()
	}
	err := x.move(pieces)

	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.lost(x, sdk.Errorf(sdk.CodeRemoteDisconnect,
			"fake: handle %d: the remote agent did not copy the chunk (%v): it deregistered the region or died", x.h.ID, err))
		return false, true, wait
	}
	x.chunks++
	switch {
	case last:
		t.finish(x, sdk.StateDone, nil)
	case x.canceled && !x.earlyDone && !time.Now().Before(x.cancelAt):
		t.finish(x, sdk.StateCanceled, sdk.Errorf(sdk.CodeCanceled, "fake: handle %d canceled", x.h.ID))
	}
	return true, true, wait
}

// lost ends x, whose peer died, FAILED with reason; under
// misbehave=peer-loss-lie it instead hangs, IN_PROGRESS until canceled.
func (t *Transport) lost(x *transfer, reason error) {
	if t.misbehaves(misbehavePeerLossLie) {
		x.hung = true
		return
	}
	t.finish(x, sdk.StateFailed, reason)
}

// peerLost reports whether, under fence=initiated, the peer watch is due
// for x and finds its peer agent dead or closed. Under fence=incoming the
// region leases, checked before each chunk, tell instead.
func (t *Transport) peerLost(x *transfer, now time.Time) bool {
	if t.p.fence != fenceInitiated || now.Sub(x.watched) < t.watch {
		return false
	}
	x.watched = now
	return !x.peer.alive()
}

// piece is the part of one segment a chunk moves: n bytes from off.
type piece struct{ seg, off, n int }

// chunk returns the pieces of x's next chunk of at most size bytes, and
// the position after it.
func (x *transfer) chunk(size int) (pieces []piece, seg, off int) {
	seg, off = x.seg, x.off
	for size > 0 && seg < len(x.segs) {
		s := x.segs[seg]
		n := min(size, len(s.dst)-off)
		pieces = append(pieces, piece{seg: seg, off: off, n: n})
		off += n
		size -= n
		if off == len(s.dst) {
			seg, off = seg+1, 0
		}
	}
	return pieces, seg, off
}

// move moves a chunk's bytes: through this agent's mapping, or, when the
// remote agent copies into and out of its memory itself, by asking it to.
// It stops at the first piece the remote agent did not copy.
func (x *transfer) move(pieces []piece) error {
	for _, p := range pieces {
		s := x.segs[p.seg]
		dst, src := s.dst[p.off:p.off+p.n], s.src[p.off:p.off+p.n]
		switch {
		case s.via == nil:
			copy(dst, src)
		case s.write:
			if err := s.via.do(incomingWrite, s.region, s.roff+uint64(p.off), src); err != nil {
				return err
			}
		default:
			if err := s.via.do(incomingRead, s.region, s.roff+uint64(p.off), dst); err != nil {
				return err
			}
		}
	}
	return nil
}

// leasesHeld reports whether the remote regions of segments [from, to) are
// still leased by their owner.
func (x *transfer) leasesHeld(from, to int) bool {
	var last *lease
	for _, s := range x.segs[from:to] {
		if s.probe == nil || s.probe == last {
			continue
		}
		if !s.probe.held() {
			return false
		}
		last = s.probe
	}
	return true
}

// finish ends x: the engine drops it and its hold on memory, and its handle
// turns terminal unless it already was (misbehave=early-done) or was
// released (misbehave=release-running).
func (t *Transport) finish(x *transfer, state sdk.State, reason error) {
	i := slices.Index(t.active, x)
	if i < 0 {
		return
	}
	t.active = slices.Delete(t.active, i, i+1)
	if t.next > i {
		t.next--
	}
	if t.next >= len(t.active) {
		t.next = 0
	}
	for _, m := range x.maps {
		t.unref(m)
	}
	x.peer.drop()
	if x.earlyDone {
		return
	}
	t.report(x, state, reason)
}

// report turns x's handle terminal (the Book records the event, and
// ignores a handle already terminal or released; a recorded one wakes
// Wake's channel) and, when DONE,
// queues the post's notification in the outbox (or, under a notif-delay
// fault, among the delayed ones).
func (t *Transport) report(x *transfer, state sdk.State, reason error) {
	if t.book.Complete(x.h, state, reason) {
		t.signalFor(true, false)
		if state == sdk.StateDone {
			// The flip starts after a Poll first reports DONE (handle.go),
			// so that the state it contradicts was seen: flipAfter later,
			// or at the next Poll.
			switch {
			case t.misbehaves(misbehaveTerminalFlip):
				x.h.Value.lie, x.h.Value.lieAt, x.h.Value.lieAfter = sdk.StateFailed, time.Time{}, flipAfter
			case t.misbehaves(misbehaveTerminalFlipNext):
				x.h.Value.lie, x.h.Value.lieAt, x.h.Value.lieAfter = sdk.StateFailed, time.Time{}, 0
			}
		}
	}
	if state != sdk.StateDone || len(x.note) == 0 || x.noteDrop {
		return
	}
	n := note{to: x.to, msg: x.note}
	if x.noteDelay > 0 {
		t.delayed = append(t.delayed, delayedNote{note: n, due: time.Now().Add(x.noteDelay)})
		return
	}
	t.outbox = append(t.outbox, n)
}

// disconnected is the reason of a transfer whose peer's lease is gone.
func disconnected(x *transfer) error {
	return sdk.Errorf(sdk.CodeRemoteDisconnect, "fake: handle %d: the remote region's lease is gone (peer deregistered it or died)", x.h.ID)
}

// peerGone is the reason of a transfer whose peer agent the watch found
// dead (fence=initiated).
func peerGone(x *transfer) error {
	return sdk.Errorf(sdk.CodeRemoteDisconnect, "fake: handle %d: peer %s closed or died (its life lease is gone)", x.h.ID, x.peer.name)
}

// shorter returns the shorter of two waits, where zero means none.
func shorter(a, b time.Duration) time.Duration {
	if a <= 0 || b < a {
		return max(b, time.Nanosecond)
	}
	return a
}
