package ucx

import (
	"context"
	"slices"

	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/kit"
)

// A handle (the Book's) is one posted transfer: one op in the shim, under
// the handle's id, covering all its descriptors (a put or get per run of
// contiguous descriptors, and for a WRITE the endpoint flush issued after
// the puts of its Post call), and, when it carries a notification, the
// active message sent after it.

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
	out := make([]sdk.PostResult, len(posts))
	err := t.do(ctx, "Post", len(posts), func(a *agent) { a.postAll(posts, out) })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// postAll checks every item, submits the good ones as one batch and
// records their handles.
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
		a.book.AddHandle(h)
		h.Remote.Peer.Value.inflight++
		out[pp.i].ID = h.ID
	}
	a.pend = a.pend[:0]
}

// check has the Book check one item, then adds it to the batch as
// segments resolved to native addresses and keys.
func (a *agent) check(s *sdk.PostSpec) (*handle, error) {
	h, err := a.book.CheckPost(*s)
	if err != nil {
		return nil, err
	}
	p := h.Remote.Peer.Value
	if p.lost != nil {
		return nil, p.lost
	}
	segs := a.segs[:0]
	remote := h.Remote.Value
	for _, pair := range h.Pairs {
		l, r := pair.Region.Value, remote[pair.RemoteIndex]
		segs = appendSegment(segs, segment{laddr: l.addr + uintptr(pair.Local.Offset), raddr: r.addr, size: pair.Local.Length, rkey: r.rkey, memh: l.memh})
	}
	a.segs = segs
	b := &a.batch
	b.subs = append(b.subs, submission{
		id: uint64(h.ID), peer: p.cp, write: s.Op == sdk.OpWrite,
		segOff: len(b.segs), nseg: len(segs),
		notifOff: len(b.arena), notifLen: len(s.Notification),
	})
	b.segs = append(b.segs, segs...)
	b.arena = append(b.arena, s.Notification...)
	return h, nil
}

// outcome is how the op of handle id to p ended: DONE once its bytes are
// in place and its notification, if any, was sent.
func (p *peer) outcome(id sdk.HandleID, c completion) (sdk.State, error) {
	switch {
	case c.st == statusOK:
		return sdk.StateDone, nil
	case p.lost != nil:
		return sdk.StateFailed, p.lost
	case c.lost:
		return sdk.StateFailed, sdk.Errorf(sdk.CodeRemoteDisconnect, "ucx: handle %d: peer %s lost before its notification was sent (the bytes had arrived): %s", id, p.name, c.st)
	}
	code := c.st.code()
	if code == sdk.CodeOK || code == sdk.CodeCanceled {
		code = sdk.CodeBackend
	}
	what := "transfer"
	if c.stage == 1 {
		what = "notification (the bytes had arrived)"
	}
	return sdk.StateFailed, sdk.Errorf(code, "ucx: handle %d to peer %s: %s failed: %s", id, p.name, what, c.st)
}

// Poll reports each handle's state.
//
// When a polled handle still runs, Poll first progresses the worker on the
// caller's thread, outside the agent's lock (callerProgress), and then
// takes what that finished: a caller that polls until DONE is then its own
// progress engine (no hand-off to the progress thread, which naps
// meanwhile), and a Release or Post of another caller does not wait behind
// that progress.
func (t *Transport) Poll(ctx context.Context, ids []sdk.HandleID) ([]sdk.HandleStatus, error) {
	running := false
	if err := t.do(ctx, "Poll", len(ids), func(a *agent) { running = a.anyRunning(ids) }); err != nil {
		return nil, err
	}
	if running {
		t.callerProgress(true)
	}
	out := make([]sdk.HandleStatus, len(ids))
	err := t.do(ctx, "Poll", len(ids), func(a *agent) {
		for i, id := range ids {
			out[i] = a.book.Poll(id)
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// anyRunning says whether one of ids names a handle not yet terminal.
func (a *agent) anyRunning(ids []sdk.HandleID) bool {
	for _, id := range ids {
		if h := a.book.Find(id); h != nil {
			if st, _ := h.State(); !st.Terminal() {
				return true
			}
		}
	}
	return false
}

// Cancel is accepted and changes nothing: UCX cannot cancel a posted put
// or get (ucp_request_cancel acts on tag receives only), so a canceled
// handle runs to DONE or FAILED (CancelNone).
func (t *Transport) Cancel(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	out := make([]error, len(ids))
	err := t.do(ctx, "Cancel", len(ids), func(a *agent) {
		for i, id := range ids {
			out[i] = a.book.Cancel(id, nil)
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Release frees terminal handles. A running one is BUSY and stays valid:
// UCX may still move its bytes.
func (t *Transport) Release(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	out := make([]error, len(ids))
	err := t.do(ctx, "Release", len(ids), func(a *agent) {
		for i, id := range ids {
			out[i] = a.book.Release(id, nil)
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Events drains up to max state changes (all when max <= 0). While
// transfers run it first progresses the worker on the caller's thread,
// outside the agent's lock (callerProgress): a caller that asks for events
// in a loop (the ring pump of a transport process does) is then its own
// progress engine, and finds a completion without waiting for the
// progress thread or a wake-up.
func (t *Transport) Events(ctx context.Context, max int) ([]sdk.Event, error) {
	if err := kit.ContextError(ctx, "ucx"); err != nil {
		return nil, err
	}
	t.callerProgress(false)
	var out []sdk.Event
	err := t.do(ctx, "Events", 0, func(a *agent) { out = a.book.Events(max) })
	return out, err
}

// callerProgress progresses the worker on the caller's thread while the
// agent runs transfers, without the agent's lock: no call waits behind it,
// and the shim bounds it (at most 64 rounds, one cma segment's copy each
// at most, and none after the one under way once a Post waits for the
// worker), so that what waits for this caller (the ring pump's next
// submission) does not wait for a transfer's bytes either. With many ops
// in flight it leaves them to the progress thread, giving up the CPU only
// with yield: the ring pump that calls Events has submissions to serve,
// and a scheduler slice lost on each of its calls would cap the
// completions it forwards.
func (t *Transport) callerProgress(yield bool) {
	a := t.agent.Load()
	if a == nil {
		return
	}
	a.progMu.RLock()
	defer a.progMu.RUnlock()
	if a.freed || a.nw.running() <= 0 {
		return
	}
	if a.progressHook != nil {
		a.progressHook()
		return
	}
	a.nw.callerProgress(yield)
}
