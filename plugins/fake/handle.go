package fake

import (
	"context"
	"runtime"
	"time"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/kit"
)

// handleFaults are the faults injected into one handle's calls, selected
// at Post; the Book keeps them as the handle's value.
type handleFaults struct {
	pollFails    int // Poll failures still to inject (poll-fail)
	releaseFails int // Release failures still to inject (release-fail)
	// lie, when set by misbehave=terminal-flip, terminal-flip-next or
	// cancel-terminal, is what Poll reports from lieAt on instead of the
	// handle's DONE; a zero lieAt is set lieAfter past the first Poll
	// that reports DONE.
	lie      sdk.State
	lieAt    time.Time
	lieAfter time.Duration
}

// Post validates each transfer, selects the faults that apply to it and
// hands it to the DMA engine. It never waits for bytes to move. A bad
// transfer (invalid op, a dlist of the wrong side or unknown, empty or
// unequal index lists, an index out of range, descriptor lengths that
// differ, an oversized notification) is INVALID_ARGUMENT, one to a peer
// that closed or died is REMOTE_DISCONNECT, one a post-fail fault selects
// fails with the fault's code; each posts nothing.
func (t *Transport) Post(ctx context.Context, posts []sdk.PostSpec) ([]sdk.PostResult, error) {
	if err := t.lock(ctx, crashAtPost); err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	out := make([]sdk.PostResult, len(posts))
	now := time.Now()
	for i, spec := range posts {
		id, err := t.book.Post(spec, func(h *handle) error { return t.start(h, now) })
		out[i] = sdk.PostResult{ID: id, Err: err}
	}
	t.kick()
	return out, nil
}

// start hands a checked transfer to the DMA engine, unless its peer is
// gone or a post-fail fault selects it.
func (t *Transport) start(h *handle, now time.Time) error {
	p := h.Remote.Peer.Value
	if !p.alive() {
		return sdk.Errorf(sdk.CodeRemoteDisconnect, "fake: Post: peer %s closed or died (its life lease is gone); nothing posted, unload it", p.name)
	}
	t.posts++
	if r := t.fault(faultPostFail, t.posts, p.name, -1); r != nil {
		return sdk.Errorf(r.code, "fake: Post: injected fault %q on transfer %d; nothing posted", r.text, t.posts)
	}
	if t.p.misbehave == misbehaveUnpinTerminal {
		for _, d := range []sdk.DlistID{h.Local.ID, h.Remote.ID} {
			if t.users[d] == nil {
				t.users[d] = map[*handle]bool{}
			}
			t.users[d][h] = true
		}
	}
	if len(t.freed) > 0 && t.freed[0] == h.ID {
		t.freed = t.freed[1:] // misbehave=reuse-ids took it
	}
	x := &transfer{h: h, failAfter: -1, to: p.notify, peer: p, watched: now, note: h.Notification}
	for _, pair := range h.Pairs {
		local, remote, lm, rm := pairBytes(h, pair)
		s := segment{dst: local, src: remote, dstMap: lm, srcMap: rm, probe: rm.probe}
		if h.Op == sdk.OpWrite {
			s = segment{dst: remote, src: local, dstMap: rm, srcMap: lm, probe: rm.probe, write: true}
		}
		s.via, s.region, s.roff = p.in, pair.Remote.Region, pair.Remote.Offset
		x.segs = append(x.segs, s)
	}
	p.hold()
	t.applyFaults(x, p.name, now)
	for _, s := range x.segs {
		x.hold(s.dstMap)
		x.hold(s.srcMap)
	}
	for _, m := range x.maps {
		m.ref()
	}
	t.active = append(t.active, x)
	return nil
}

// reusedID is the Book's misbehave hook under misbehave=reuse-ids: once
// 64 transfers were posted, each new handle takes the oldest released id.
func (t *Transport) reusedID() (sdk.HandleID, bool) {
	if t.posts < reuseAfter || len(t.freed) == 0 || !t.misbehaves(misbehaveReuseIDs) {
		return 0, false
	}
	return t.freed[0], true
}

// Poll reports each handle's state. An unknown or released handle is
// NOT_FOUND; an injected poll-fail is BACKEND and changes nothing.
func (t *Transport) Poll(ctx context.Context, ids []sdk.HandleID) ([]sdk.HandleStatus, error) {
	if err := t.lock(ctx, crashAtPoll); err != nil {
		return nil, err
	}
	running := false
	defer func() {
		t.mu.Unlock()
		if running {
			// The engine is a goroutine where real DMA is hardware: a caller
			// polling in a tight loop would starve it of the lock and the
			// processor, so a Poll that finds bytes moving yields.
			runtime.Gosched()
		}
	}()
	out := make([]sdk.HandleStatus, len(ids))
	for i, id := range ids {
		h, err := t.book.Handle("Poll", id)
		switch {
		case err != nil:
			out[i].Err = err
		case h.Value.pollFails > 0:
			h.Value.pollFails--
			out[i].Err = sdk.Errorf(sdk.CodeBackend, "fake: Poll: injected poll-fail on handle %d; its state is unknown, poll again", id)
		default:
			out[i] = t.book.Poll(id)
			running = running || !out[i].State.Terminal()
			if v := &h.Value; v.lie != 0 && out[i].State == sdk.StateDone {
				switch {
				case v.lieAt.IsZero():
					v.lieAt = time.Now().Add(v.lieAfter) // DONE reported now: the flip comes later
				case !time.Now().Before(v.lieAt):
					out[i] = sdk.HandleStatus{State: v.lie, Reason: sdk.Errorf(sdk.CodeBackend, "fake: handle %d: misbehave=%s", id, t.p.misbehave)}
				}
			}
		}
	}
	return out, nil
}

// Cancel asks the DMA engine to stop each transfer before its next chunk;
// the handle then reports CANCELED (or DONE if it finished first). It frees
// nothing. Canceling a terminal handle changes nothing; an unknown one is
// NOT_FOUND. Under cancel=none it is accepted and changes nothing at all,
// as UCX's.
func (t *Transport) Cancel(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	if err := t.lock(ctx, ""); err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	now := time.Now()
	stop := func(h *handle) {
		if t.misbehaves(misbehaveCancelLie) {
			return
		}
		slow := t.misbehaves(misbehaveCancelSlow)
		for _, x := range t.active {
			if x.h == h {
				x.canceled = true
				if slow {
					x.cancelAt = now.Add(2 * time.Duration(cancelBound(t.p)) * time.Millisecond)
				}
			}
		}
	}
	if t.p.cancel == cancelNone {
		stop = nil
	}
	out := make([]error, len(ids))
	for i, id := range ids {
		out[i] = t.book.Cancel(id, stop)
		if h, err := t.book.Handle("Cancel", id); err == nil {
			if st, _ := h.State(); st == sdk.StateDone && h.Value.lie == 0 && t.misbehaves(misbehaveCancelTerminal) {
				h.Value.lie, h.Value.lieAt = sdk.StateCanceled, now
			}
		}
	}
	t.kick()
	return out, nil
}

// Release frees each terminal handle and its hold on its dlists. A running
// handle is BUSY and stays valid (under misbehave=release-running it is
// released and keeps moving bytes); an unknown or released one is
// NOT_FOUND; an injected release-fail is BACKEND and keeps the handle.
// A running transfer keeps its own hold on the memory it touches.
func (t *Transport) Release(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	if err := t.lock(ctx, crashAtRelease); err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	out := make([]error, len(ids))
	for i, id := range ids {
		if t.p.misbehave == misbehaveReleaseRunning {
			t.book.SetMisbehave(kit.Misbehave{ReleaseRunning: t.misbehaves(misbehaveReleaseRunning)})
		}
		out[i] = t.book.Release(id, func(h *handle) error {
			if h.Value.releaseFails > 0 {
				h.Value.releaseFails--
				return sdk.Errorf(sdk.CodeBackend, "fake: Release: injected release-fail on handle %d; it stays held, retry", id)
			}
			if t.p.misbehave == misbehaveReuseIDs {
				t.freed = append(t.freed, id)
			}
			for _, d := range []sdk.DlistID{h.Local.ID, h.Remote.ID} {
				delete(t.users[d], h)
			}
			t.unpark(h)
			return nil
		})
	}
	t.freeGhosts()
	return out, nil
}

// unpark lets the last chunk of h's transfer land once h is released,
// when misbehave=early-done reported it DONE early: after the release, as
// the late write of a lying transport would.
func (t *Transport) unpark(h *handle) {
	for _, x := range t.active {
		if x.h == h && x.earlyDone {
			x.released = true
			t.kick()
		}
	}
}

// Events drains up to max state changes (all when max <= 0) in the order
// they happened: one per handle, when it turns terminal.
func (t *Transport) Events(ctx context.Context, max int) ([]sdk.Event, error) {
	if err := t.lock(ctx, ""); err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	return t.book.Events(max), nil
}
