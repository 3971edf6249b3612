package ucx

import (
	"context"
	"slices"

	"github.com/custody-dev/custody/sdk"
)

// handle is one posted transfer: one op in the shim covering all its
// descriptors (a put or get per run of contiguous descriptors, and for a
// WRITE the endpoint flush issued after the puts of its Post call), and,
// when it carries a notification, the active message sent after it.
type handle struct {
	id     sdk.HandleID
	peer   *peer
	local  *dlist
	remote *dlist
	state  sdk.State
	reason error
}

// pendingPost is one checked item of a Post call, until the batch is
// submitted: its index in the call and its handle.
type pendingPost struct {
	i int
	h *handle
}

// Post starts transfers. Each valid item gets a handle at once; nothing
// waits for bytes to move. A bad item posts nothing and says why. The
// transfers are issued to UCX from the caller's thread, one call into the
// shim per Post call, before Post returns.
func (t *Transport) Post(ctx context.Context, posts []sdk.PostSpec) ([]sdk.PostResult, error) {
	if err := checkItems("Post", len(posts)); err != nil {
		return nil, err
	}
	out := make([]sdk.PostResult, len(posts))
	err := t.do(ctx, "Post", func(a *agent) { a.postAll(posts, out) })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// postAll checks every item, submits the good ones as one batch and
// registers their handles.
func (a *agent) postAll(posts []sdk.PostSpec, out []sdk.PostResult) {
	a.batch.reset()
	a.pend = a.pend[:0]
	for i := range posts {
		h, err := a.check(&posts[i])
		if err != nil {
			out[i].Err = err
			continue
		}
		a.pend = append(a.pend, pendingPost{i: i, h: h})
	}
	if len(a.pend) == 0 {
		return
	}
	a.issued = slices.Grow(a.issued[:0], len(a.pend))[:len(a.pend)]
	a.nw.submit(&a.batch, a.cname, len(a.name), a.issued)
	for k, pp := range a.pend {
		h := pp.h
		if !a.issued[k] {
			out[pp.i].Err = sdk.Errorf(sdk.CodeBackend, "ucx: Post: out of memory for the transfer's state; nothing posted, retry")
			continue
		}
		a.handles[h.id] = h
		h.local.handles++
		h.remote.handles++
		a.inflight++
		h.peer.inflight++
		out[pp.i].ID = h.id
	}
	a.pend = a.pend[:0]
}

// check validates one item and adds it to the batch.
func (a *agent) check(s *sdk.PostSpec) (*handle, error) {
	if !s.Op.Valid() {
		return nil, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: Post: op %v; use READ or WRITE", s.Op)
	}
	local, ok := a.dlists[s.Local]
	if !ok {
		return nil, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: Post: local dlist %d unknown or released", s.Local)
	}
	remote, ok := a.dlists[s.Remote]
	if !ok {
		return nil, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: Post: remote dlist %d unknown or released", s.Remote)
	}
	if local.peer != nil || remote.peer == nil {
		return nil, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: Post: dlist %d must be local and dlist %d remote", s.Local, s.Remote)
	}
	n := len(s.LocalIndices)
	if n == 0 || n != len(s.RemoteIndices) || n > maxDescriptorsPerPost {
		return nil, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: Post: %d local and %d remote indices; give 1 to %d of each, as many of one as of the other", n, len(s.RemoteIndices), maxDescriptorsPerPost)
	}
	if len(s.Notification) > maxNotificationBytes {
		return nil, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: Post: notification of %d bytes exceeds the limit of %d", len(s.Notification), maxNotificationBytes)
	}
	segs := a.segs[:0]
	for j := range n {
		li, ri := s.LocalIndices[j], s.RemoteIndices[j]
		if int(li) >= len(local.local) || int(ri) >= len(remote.remote) {
			return nil, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: Post: pair %d: index %d of local dlist %d (%d entries) or %d of remote dlist %d (%d entries) out of range", j, li, s.Local, len(local.local), ri, s.Remote, len(remote.remote))
		}
		l, r := local.local[li], remote.remote[ri]
		if l.length != r.length {
			return nil, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: Post: pair %d: local descriptor %d is %d bytes, remote descriptor %d is %d; lengths must match", j, li, l.length, ri, r.length)
		}
		segs = appendSegment(segs, segment{laddr: l.addr, raddr: r.addr, size: l.length, rkey: r.rkey, memh: l.region.memh})
	}
	a.segs = segs
	p := remote.peer
	if p.lost != nil {
		return nil, p.lost
	}
	h := &handle{id: sdk.HandleID(a.newID()), peer: p, local: local, remote: remote, state: sdk.StateInProgress}
	b := &a.batch
	b.subs = append(b.subs, submission{
		id: uint64(h.id), peer: p.cp, write: s.Op == sdk.OpWrite,
		segOff: len(b.segs), nseg: len(segs),
		notifOff: len(b.arena), notifLen: len(s.Notification),
	})
	b.segs = append(b.segs, segs...)
	b.arena = append(b.arena, s.Notification...)
	return h, nil
}

// finish records how h's op ended: DONE once its bytes are in place and
// its notification, if any, was sent.
func (h *handle) finish(a *agent, c completion) {
	p := h.peer
	switch {
	case c.st == statusOK:
		h.state = sdk.StateDone
	case p.lost != nil:
		h.state, h.reason = sdk.StateFailed, p.lost
	case c.lost:
		h.state, h.reason = sdk.StateFailed, sdk.Errorf(sdk.CodeRemoteDisconnect, "ucx: handle %d: peer %s lost before its notification was sent (the bytes had arrived): %s", h.id, p.name, c.st)
	default:
		code := c.st.code()
		if code == sdk.CodeOK || code == sdk.CodeCanceled {
			code = sdk.CodeBackend
		}
		what := "transfer"
		if c.stage == 1 {
			what = "notification (the bytes had arrived)"
		}
		h.state, h.reason = sdk.StateFailed, sdk.Errorf(code, "ucx: handle %d to peer %s: %s failed: %s", h.id, p.name, what, c.st)
	}
	a.events = append(a.events, sdk.Event{Handle: h.id, State: h.state, Reason: h.reason})
}

// Poll reports each handle's state.
func (t *Transport) Poll(ctx context.Context, ids []sdk.HandleID) ([]sdk.HandleStatus, error) {
	if err := checkItems("Poll", len(ids)); err != nil {
		return nil, err
	}
	out := make([]sdk.HandleStatus, len(ids))
	err := t.do(ctx, "Poll", func(a *agent) {
		a.driveProgress(ids)
		for i, id := range ids {
			h, ok := a.handles[id]
			if !ok {
				out[i].Err = sdk.Errorf(sdk.CodeNotFound, "ucx: Poll: handle %d unknown or released", id)
				continue
			}
			out[i].State, out[i].Reason = h.state, h.reason
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// driveProgress progresses the worker on the caller's thread when a polled
// handle still runs, and takes what that finished: a caller that polls
// until DONE is then its own progress engine (no hand-off to the progress
// thread, which naps meanwhile).
func (a *agent) driveProgress(ids []sdk.HandleID) {
	for _, id := range ids {
		if h, ok := a.handles[id]; ok && !h.state.Terminal() {
			a.nw.callerProgress()
			a.reap()
			return
		}
	}
}

// Cancel is accepted and changes nothing: UCX cannot cancel a posted put
// or get (ucp_request_cancel acts on tag receives only), so a canceled
// handle runs to DONE or FAILED (CancelNone).
func (t *Transport) Cancel(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	if err := checkItems("Cancel", len(ids)); err != nil {
		return nil, err
	}
	out := make([]error, len(ids))
	err := t.do(ctx, "Cancel", func(a *agent) {
		for i, id := range ids {
			if _, ok := a.handles[id]; !ok {
				out[i] = sdk.Errorf(sdk.CodeNotFound, "ucx: Cancel: handle %d unknown or released", id)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Release frees terminal handles. A running one is BUSY and stays valid.
func (t *Transport) Release(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	if err := checkItems("Release", len(ids)); err != nil {
		return nil, err
	}
	out := make([]error, len(ids))
	err := t.do(ctx, "Release", func(a *agent) {
		for i, id := range ids {
			h, ok := a.handles[id]
			switch {
			case !ok:
				out[i] = sdk.Errorf(sdk.CodeNotFound, "ucx: Release: handle %d unknown or already released", id)
			case !h.state.Terminal():
				out[i] = sdk.Errorf(sdk.CodeBusy, "ucx: Release: handle %d is %v: UCX may still move its bytes; poll until terminal", id, h.state)
			default:
				delete(a.handles, id)
				h.local.handles--
				h.remote.handles--
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Events drains up to max state changes (all when max <= 0).
func (t *Transport) Events(ctx context.Context, max int) ([]sdk.Event, error) {
	var out []sdk.Event
	err := t.do(ctx, "Events", func(a *agent) {
		n := len(a.events)
		if max > 0 && max < n {
			n = max
		}
		out = append(out, a.events[:n]...)
		a.events = append(a.events[:0], a.events[n:]...)
	})
	return out, err
}
