package fake

import (
	"context"
	"runtime"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// handle is a posted transfer as the caller sees it: its last state and the
// dlists it holds until released.
type handle struct {
	id           sdk.HandleID
	state        sdk.State
	reason       error
	local        *dlist
	remote       *dlist
	pollFails    int  // Poll failures still to inject (poll-fail)
	releaseFails int  // Release failures still to inject (release-fail)
	released     bool // released while running (misbehave=release-running)
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
		id, err := t.post(spec, now)
		out[i] = sdk.PostResult{ID: id, Err: err}
	}
	t.kick()
	return out, nil
}

func (t *Transport) post(spec sdk.PostSpec, now time.Time) (sdk.HandleID, error) {
	segs, err := t.resolve(spec)
	if err != nil {
		return 0, err
	}
	local, remote := t.dlists[spec.Local], t.dlists[spec.Remote]
	if !remote.peer.alive() {
		return 0, sdk.Errorf(sdk.CodeRemoteDisconnect, "fake: Post: peer %s closed or died (its life lease is gone); nothing posted, unload it", remote.peer.name)
	}
	t.posts++
	if r := t.fault(faultPostFail, t.posts, remote.peer.name, -1); r != nil {
		return 0, sdk.Errorf(r.code, "fake: Post: injected fault %q on transfer %d; nothing posted", r.text, t.posts)
	}
	h := &handle{id: t.newHandleID(), state: sdk.StateInProgress, local: local, remote: remote}
	x := &transfer{h: h, segs: segs, failAfter: -1, to: remote.peer.notify, peer: remote.peer, watched: now}
	remote.peer.hold()
	if len(spec.Notification) > 0 {
		x.note = append([]byte(nil), spec.Notification...)
	}
	t.applyFaults(x, remote.peer.name, now)
	for _, s := range segs {
		x.hold(s.dstMap)
		x.hold(s.srcMap)
	}
	for _, m := range x.maps {
		m.ref()
	}
	local.handles++
	remote.handles++
	t.handles[h.id] = h
	t.active = append(t.active, x)
	return h.id, nil
}

// resolve checks a PostSpec and returns the segments it moves.
func (t *Transport) resolve(spec sdk.PostSpec) ([]segment, error) {
	bad := func(format string, args ...any) ([]segment, error) {
		return nil, sdk.Errorf(sdk.CodeInvalidArgument, "fake: Post: "+format, args...)
	}
	if !spec.Op.Valid() {
		return bad("op %v is neither READ nor WRITE", spec.Op)
	}
	local, remote := t.dlists[spec.Local], t.dlists[spec.Remote]
	switch {
	case local == nil || local.peer != nil:
		return bad("local dlist %d is unknown or not local", spec.Local)
	case remote == nil || remote.peer == nil:
		return bad("remote dlist %d is unknown or not remote", spec.Remote)
	case len(spec.LocalIndices) == 0 || len(spec.LocalIndices) != len(spec.RemoteIndices):
		return bad("%d local and %d remote indices; want equal, non-zero counts", len(spec.LocalIndices), len(spec.RemoteIndices))
	case len(spec.LocalIndices) > maxDescriptorsPerPost:
		return bad("%d descriptors exceed the limit of %d", len(spec.LocalIndices), maxDescriptorsPerPost)
	case len(spec.Notification) > maxNotificationBytes:
		return bad("notification of %d bytes exceeds the limit of %d", len(spec.Notification), maxNotificationBytes)
	}
	segs := make([]segment, len(spec.LocalIndices))
	for i, li := range spec.LocalIndices {
		ri := spec.RemoteIndices[i]
		if int(li) >= len(local.descs) || int(ri) >= len(remote.descs) {
			return bad("pair %d: index %d or %d out of range (dlists of %d and %d)", i, li, ri, len(local.descs), len(remote.descs))
		}
		l, r := local.descs[li], remote.descs[ri]
		if l.length != r.length {
			return bad("pair %d: local descriptor %d has %d bytes, remote descriptor %d has %d", i, li, l.length, ri, r.length)
		}
		if spec.Op == sdk.OpWrite {
			segs[i] = segment{dst: r.bytes(), src: l.bytes(), dstMap: r.m, srcMap: l.m, probe: r.m.probe}
		} else {
			segs[i] = segment{dst: l.bytes(), src: r.bytes(), dstMap: l.m, srcMap: r.m, probe: r.m.probe}
		}
	}
	return segs, nil
}

// newHandleID returns a fresh id, or under misbehave=reuse-ids, once 64
// transfers were posted, the oldest released one.
func (t *Transport) newHandleID() sdk.HandleID {
	if t.p.misbehave == misbehaveReuseIDs && t.posts > reuseAfter && len(t.freed) > 0 {
		id := t.freed[0]
		t.freed = t.freed[1:]
		return id
	}
	return sdk.HandleID(newID())
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
		h, ok := t.handles[id]
		switch {
		case !ok:
			out[i].Err = sdk.Errorf(sdk.CodeNotFound, "fake: Poll: handle %d unknown or already released", id)
		case h.pollFails > 0:
			h.pollFails--
			out[i].Err = sdk.Errorf(sdk.CodeBackend, "fake: Poll: injected poll-fail on handle %d; its state is unknown, poll again", id)
		default:
			out[i] = sdk.HandleStatus{State: h.state, Reason: h.reason}
			running = running || !h.state.Terminal()
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
	out := make([]error, len(ids))
	for i, id := range ids {
		h, ok := t.handles[id]
		if !ok {
			out[i] = sdk.Errorf(sdk.CodeNotFound, "fake: Cancel: handle %d unknown or already released", id)
			continue
		}
		if t.p.cancel == cancelNone {
			continue
		}
		for _, x := range t.active {
			if x.h == h {
				x.canceled = true
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
func (t *Transport) Release(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	if err := t.lock(ctx, crashAtRelease); err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	out := make([]error, len(ids))
	for i, id := range ids {
		h, ok := t.handles[id]
		switch {
		case !ok:
			out[i] = sdk.Errorf(sdk.CodeNotFound, "fake: Release: handle %d unknown or already released", id)
		case !h.state.Terminal() && t.p.misbehave != misbehaveReleaseRunning:
			out[i] = sdk.Errorf(sdk.CodeBusy, "fake: Release: handle %d is %v; poll until terminal (Cancel to stop it)", id, h.state)
		case h.releaseFails > 0:
			h.releaseFails--
			out[i] = sdk.Errorf(sdk.CodeBackend, "fake: Release: injected release-fail on handle %d; it stays held, retry", id)
		default:
			t.releaseHandle(h)
		}
	}
	return out, nil
}

// releaseHandle forgets h and drops its hold on its dlists. A running
// transfer keeps its own hold on the memory it touches.
func (t *Transport) releaseHandle(h *handle) {
	delete(t.handles, h.id)
	h.released = true
	h.local.handles--
	h.remote.handles--
	if t.p.misbehave == misbehaveReuseIDs {
		t.freed = append(t.freed, h.id)
	}
}

// Events drains up to max state changes (all when max <= 0) in the order
// they happened: one per handle, when it turns terminal.
func (t *Transport) Events(ctx context.Context, max int) ([]sdk.Event, error) {
	if err := t.lock(ctx, ""); err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	n := len(t.events)
	if max > 0 && max < n {
		n = max
	}
	out := append([]sdk.Event(nil), t.events[:n]...)
	t.events = t.events[n:]
	return out, nil
}
