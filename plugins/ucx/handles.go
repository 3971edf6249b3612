package ucx

import (
	"context"

	"github.com/custody-dev/custody/sdk"
)

// handle is one posted transfer: one UCX op covering all its descriptors
// (a put or get per run of contiguous descriptors, and for a WRITE the
// endpoint flush issued after the puts of its Post call), and, when it
// carries a notification, the active message sent after it.
type handle struct {
	id     sdk.HandleID
	op     *cOp // nil once terminal: every request of it has completed
	peer   *peer
	local  *dlist
	remote *dlist
	notif  []byte
	stage  int // 0: moving bytes; 1: sending the notification
	state  sdk.State
	reason error
}

// Post starts transfers. Each valid item gets a handle at once; nothing
// waits for bytes to move. A bad item posts nothing and says why.
func (t *Transport) Post(ctx context.Context, posts []sdk.PostSpec) ([]sdk.PostResult, error) {
	if err := checkItems("Post", len(posts)); err != nil {
		return nil, err
	}
	out := make([]sdk.PostResult, len(posts))
	err := t.do(ctx, "Post", func(a *agent) {
		for i := range posts {
			out[i].ID, out[i].Err = a.post(&posts[i])
		}
		a.flushWrites()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (a *agent) post(s *sdk.PostSpec) (sdk.HandleID, error) {
	if !s.Op.Valid() {
		return 0, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: Post: op %v; use READ or WRITE", s.Op)
	}
	local, ok := a.dlists[s.Local]
	if !ok {
		return 0, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: Post: local dlist %d unknown or released", s.Local)
	}
	remote, ok := a.dlists[s.Remote]
	if !ok {
		return 0, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: Post: remote dlist %d unknown or released", s.Remote)
	}
	if local.peer != nil || remote.peer == nil {
		return 0, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: Post: dlist %d must be local and dlist %d remote", s.Local, s.Remote)
	}
	n := len(s.LocalIndices)
	if n == 0 || n != len(s.RemoteIndices) || n > maxDescriptorsPerPost {
		return 0, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: Post: %d local and %d remote indices; give 1 to %d of each, as many of one as of the other", n, len(s.RemoteIndices), maxDescriptorsPerPost)
	}
	if len(s.Notification) > maxNotificationBytes {
		return 0, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: Post: notification of %d bytes exceeds the limit of %d", len(s.Notification), maxNotificationBytes)
	}
	segs := a.segs[:0]
	for j := range n {
		li, ri := s.LocalIndices[j], s.RemoteIndices[j]
		if int(li) >= len(local.local) || int(ri) >= len(remote.remote) {
			return 0, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: Post: pair %d: index %d of local dlist %d (%d entries) or %d of remote dlist %d (%d entries) out of range", j, li, s.Local, len(local.local), ri, s.Remote, len(remote.remote))
		}
		l, r := local.local[li], remote.remote[ri]
		if l.length != r.length {
			return 0, sdk.Errorf(sdk.CodeInvalidArgument, "ucx: Post: pair %d: local descriptor %d is %d bytes, remote descriptor %d is %d; lengths must match", j, li, l.length, ri, r.length)
		}
		segs = appendSegment(segs, segment{laddr: l.addr, raddr: r.addr, size: l.length, rkey: r.rkey, memh: l.region.memh})
	}
	a.segs = segs
	p := remote.peer
	if p.lost != nil {
		return 0, p.lost
	}
	h := &handle{id: sdk.HandleID(a.newID()), peer: p, local: local, remote: remote, state: sdk.StateInProgress}
	if len(s.Notification) > 0 {
		h.notif = append([]byte(nil), s.Notification...)
	}
	h.op = newOp(uint64(h.id))
	a.handles[h.id] = h
	local.handles++
	remote.handles++
	a.inflight++
	p.inflight++
	a.nw.post(&a.scratch, p.cp, h.op, s.Op == sdk.OpWrite, segs)
	if s.Op == sdk.OpWrite {
		a.unflushed[p] = append(a.unflushed[p], h.op)
	}
	return h.id, nil
}

// flushWrites issues, per peer, one endpoint flush after the WRITEs of
// this Post call: it covers every put before it, so each WRITE turns DONE
// only once its bytes are at the destination, at the cost of one flush per
// call and peer rather than per transfer. Post calls it before returning.
func (a *agent) flushWrites() {
	for p, ops := range a.unflushed {
		a.nw.flushOps(p.cp, ops)
		delete(a.unflushed, p)
	}
}

// opDone advances h once every request of its op completed: to the
// notification send, or to its terminal state.
func (h *handle) opDone(a *agent) {
	p := h.peer
	p.inflight--
	st := opStatus(h.op)
	if st == statusOK && h.stage == 0 && len(h.notif) > 0 && p.lost == nil {
		// The bytes are in place; only now may the peer hear of it.
		h.stage = 1
		a.inflight++
		p.inflight++
		a.nw.sendMsg(p.cp, h.op, a.name, h.notif)
		return
	}
	opFree(h.op)
	h.op = nil
	switch {
	case st == statusOK && (h.stage == 1 || len(h.notif) == 0):
		h.state = sdk.StateDone
	case p.lost != nil:
		h.state, h.reason = sdk.StateFailed, p.lost
	case st == statusOK:
		h.state, h.reason = sdk.StateFailed, sdk.Errorf(sdk.CodeRemoteDisconnect, "ucx: handle %d: peer %s lost before its notification was sent", h.id, p.name)
	default:
		code := st.code()
		if code == sdk.CodeOK || code == sdk.CodeCanceled {
			code = sdk.CodeBackend
		}
		what := "transfer"
		if h.stage == 1 {
			what = "notification (the bytes had arrived)"
		}
		h.state, h.reason = sdk.StateFailed, sdk.Errorf(code, "ucx: handle %d to peer %s: %s failed: %s", h.id, p.name, what, st)
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
