package ring

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// The calls below make one contract call through the rings. Each is given
// the same call over gRPC (overGRPC) for what the rings cannot carry: a
// batch too large for the submission ring, an id the rings do not know.

// submit sends one call through the submission ring and waits for its
// result, within the call's deadline.
func (r *Client) submit(ctx context.Context, method string, kind, resKind uint16, n int, ids []sdk.HandleID, payload []byte) (*pendingCall, error) {
	if err := r.gone(method); err != nil {
		return nil, err
	}
	// The call's deadline: the caller's, within the call timeout. The
	// timer that enforces it is armed only if the call has to wait
	// (bounded): arming and stopping one costs more than most calls
	// take through the rings.
	// One reading of the clock serves the deadline, the spins and the
	// entry's time stamp: each reading costs a share of the call.
	now := time.Now()
	dl := now.Add(r.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	var cancel context.CancelFunc = func() {}
	defer func() { cancel() }()
	bounded := func() context.Context {
		ctx, cancel = context.WithDeadline(ctx, dl)
		return ctx
	}
	c := &pendingCall{kind: resKind, n: n, ids: ids, done: make(chan struct{})}

	r.subMu.Lock()
	var (
		ent, arena []byte
		off        uint32
		err        error
	)
	spun := now
	var sp spinner
	for {
		if r.isStopped() {
			r.subMu.Unlock()
			return nil, r.lost(bounded(), method)
		}
		ent, arena, off, err = r.sub.reserve(len(payload))
		if !errors.Is(err, errFull) {
			break
		}
		// The plugin is behind: wait for room, within the deadline.
		if ctx.Err() != nil || !time.Now().Before(dl) {
			r.subMu.Unlock()
			return nil, r.timeoutError(method)
		}
		r.m.plugin.ring()
		if time.Since(spun) < waitSpin {
			r.yield(&sp, spun)
		} else {
			time.Sleep(minBackoff)
		}
	}
	if err != nil {
		r.subMu.Unlock()
		r.mu.Lock()
		r.fence(err)
		r.mu.Unlock()
		return nil, r.fenced(method)
	}
	r.nextCall++
	c.id = r.nextCall
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
	copy(arena, payload)
	e := entry{seq: r.sub.tail, kind: kind, call: c.id, count: uint32(n), total: uint32(n), deadline: dl.UnixNano(), arenaOff: off, arenaLen: uint32(len(payload)), sent: now.UnixNano()}
	e.encode(ent)
	r.sub.publish()
	woke := r.m.plugin.ring()
	r.subMu.Unlock()

	// Drain ourselves while the answer is due within microseconds: when
	// the pump was awake to take the call, since a goroutine hand-off
	// would cost more. A pump this call had to wake answers only once the
	// kernel has run it again, tens of microseconds or more on a busy
	// machine, which a spinner would spend on a CPU (maybe the very one
	// the pump needs): the caller waits, and the reader hands it the
	// answer. A caller that polls in a loop spins all the same: it spends
	// its CPU on waiting anyway, and its reader naps.
	if !woke || r.pollLooping() {
		c.spun = true
		r.spinning.Add(1)
		for spun := now; !c.fin.Load() && time.Since(spun) < r.waitSpin; {
			if r.drain() == 0 {
				r.yield(&sp, spun)
			}
		}
		if r.spinning.Add(-1) == 0 {
			r.rouse()
		}
	} else {
		// The reader may nap after a poll loop that ended: it hands
		// this caller the answer.
		r.rouse()
	}
	if !c.fin.Load() {
		ctx = bounded()
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		select {
		case <-c.done:
		default:
			if r.done.Err() != nil {
				return nil, r.shutdown(method, nil)
			}
			return nil, r.timeoutError(method)
		}
	case <-r.stopped:
		select {
		case <-c.done:
		default:
			return nil, r.lost(ctx, method)
		}
	}
	if c.err != nil {
		return nil, r.callErr(method, c.err)
	}
	return c, nil
}

// Post submits posts through the rings and waits for their results. A
// batch too large for the submission ring goes over gRPC; the plugin
// follows its handles all the same, and Poll asks the transport for them.
func (r *Client) Post(ctx context.Context, posts []sdk.PostSpec, overGRPC func(context.Context, []sdk.PostSpec) ([]sdk.PostResult, error)) ([]sdk.PostResult, error) {
	size := 0
	for _, s := range posts {
		size += postSpecBytes(s)
	}
	if size > r.half || len(posts) > maxItems {
		return overGRPC(ctx, posts)
	}
	r.subMu.Lock()
	w := r.scratch[:0]
	for _, s := range posts {
		w = encodePostSpec(w, s)
	}
	payload := append([]byte(nil), w...)
	r.scratch = w[:0]
	r.subMu.Unlock()
	c, err := r.submit(ctx, "Post", kindPost, kindPostResult, len(posts), nil, payload)
	if err != nil {
		return nil, err
	}
	return c.posts, nil
}

// Release releases ids: a handle the plugin released at terminal is
// answered from its record, the others go through the rings (over gRPC
// when too many for a submission). The whole call fails, and changes
// nothing, when the part that crossed to the process fails.
func (r *Client) Release(ctx context.Context, ids []sdk.HandleID, overGRPC func(context.Context, []sdk.HandleID) ([]error, error)) ([]error, error) {
	local := r.releasedAtTerminal(ids, true)
	if local == nil {
		return r.release(ctx, ids, overGRPC)
	}
	out, err := answerLocal(ids, local, func(rest []sdk.HandleID) ([]error, error) { return r.release(ctx, rest, overGRPC) })
	if err != nil {
		return nil, err
	}
	r.forget(ids, local)
	return out, nil
}

// answerLocal answers OK for the ids marked local and calls call with the
// others, in order; a call that fails as a whole fails the whole.
func answerLocal(ids []sdk.HandleID, local []bool, call func([]sdk.HandleID) ([]error, error)) ([]error, error) {
	var rest []sdk.HandleID
	for i, id := range ids {
		if !local[i] {
			rest = append(rest, id)
		}
	}
	var errs []error
	if len(rest) > 0 {
		var err error
		if errs, err = call(rest); err != nil {
			return nil, err
		}
	}
	out := make([]error, len(ids))
	j := 0
	for i := range ids {
		if !local[i] {
			out[i] = errs[j]
			j++
		}
	}
	return out, nil
}

// releasedAtTerminal says which of ids the plugin released at terminal
// (with once, the first of repeats only: a repeated Release gets the
// transport's answer to a second release); nil when none (or no rings).
func (r *Client) releasedAtTerminal(ids []sdk.HandleID, once bool) []bool {
	if !r.releaseTerminal {
		return nil
	}
	var local []bool
	var seen map[sdk.HandleID]bool
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, id := range ids {
		if k, ok := r.known[id]; ok && k.released && !(once && seen[id]) {
			if local == nil {
				local, seen = make([]bool, len(ids)), map[sdk.HandleID]bool{}
			}
			local[i], seen[id] = true, true
		}
	}
	return local
}

// Cancel cancels ids over gRPC. Under release at terminal, a handle the
// plugin released at terminal is, to the caller, a terminal handle it
// holds: its Cancel changes nothing and is OK, answered here (the
// transport, which no longer knows it, would say NOT_FOUND). What the
// rings brought is taken first, so a handle released before Cancel was
// called is known as such. One the plugin released while the call was on
// its way is answered NOT_FOUND by the transport, and the plugin sends
// that answer only once the handle's state is in the completion ring
// (Server.Canceled): taking what the rings brought once more
// turns it into OK.
func (r *Client) Cancel(ctx context.Context, ids []sdk.HandleID, overGRPC func(context.Context, []sdk.HandleID) ([]error, error)) ([]error, error) {
	if !r.releaseTerminal {
		return overGRPC(ctx, ids)
	}
	r.drain()
	local := r.releasedAtTerminal(ids, false)
	if local == nil {
		local = make([]bool, len(ids))
	}
	errs, err := answerLocal(ids, local, func(rest []sdk.HandleID) ([]error, error) { return overGRPC(ctx, rest) })
	if err != nil || !slices.ContainsFunc(errs, isNotFound) {
		return errs, err
	}
	r.drain()
	for i, released := range r.releasedAtTerminal(ids, false) {
		if released && isNotFound(errs[i]) {
			errs[i] = nil
		}
	}
	return errs, nil
}

// release releases ids through the rings when they fit, else over gRPC.
func (r *Client) release(ctx context.Context, ids []sdk.HandleID, overGRPC func(context.Context, []sdk.HandleID) ([]error, error)) ([]error, error) {
	if 8*len(ids) > r.half || len(ids) > maxItems {
		errs, err := overGRPC(ctx, ids)
		if err == nil {
			r.mu.Lock()
			for i, e := range errs {
				if e == nil {
					delete(r.known, ids[i])
				}
			}
			r.mu.Unlock()
		}
		return errs, err
	}
	payload := encodeIDs(make(wire, 0, 8*len(ids)), ids)
	c, err := r.submit(ctx, "Release", kindRelease, kindReleaseRes, len(ids), ids, payload)
	if err != nil {
		return nil, err
	}
	return c.errs, nil
}

// SendNotifications sends msgs through the rings; a batch too large for
// the submission ring goes over gRPC.
func (r *Client) SendNotifications(ctx context.Context, msgs []sdk.OutboundNotification, overGRPC func(context.Context, []sdk.OutboundNotification) ([]error, error)) ([]error, error) {
	if len(msgs) > maxItems {
		return overGRPC(ctx, msgs)
	}
	size := 0
	for _, m := range msgs {
		size += outNoteBytes(m)
	}
	if size > r.half {
		return overGRPC(ctx, msgs)
	}
	r.subMu.Lock()
	w := r.scratch[:0]
	for _, m := range msgs {
		w = encodeOutNote(w, m)
	}
	payload := append([]byte(nil), w...)
	r.scratch = w[:0]
	r.subMu.Unlock()
	c, err := r.submit(ctx, "SendNotifications", kindSendNotes, kindSendNotesRes, len(msgs), nil, payload)
	if err != nil {
		return nil, err
	}
	return c.errs, nil
}

// Poll answers from the completion ring for handles posted through it
// and not released: the last terminal state the plugin reported, else
// IN_PROGRESS (the plugin has not reported it terminal yet: the
// contract's answer for "cannot tell"). Any other id is asked of the
// transport over gRPC, so unknown and released ids get the transport's
// own answer.
func (r *Client) Poll(ctx context.Context, ids []sdk.HandleID, overGRPC func(context.Context, []sdk.HandleID) ([]sdk.HandleStatus, error)) ([]sdk.HandleStatus, error) {
	if err := r.gone("Poll"); err != nil {
		return nil, err
	}
	r.polled.Store(clock())
	drained := r.drain()
	if err := r.gone("Poll"); err != nil {
		return nil, err
	}
	out := make([]sdk.HandleStatus, len(ids))
	var miss []int
	running := false
	r.mu.Lock()
	for i, id := range ids {
		k, ok := r.known[id]
		switch {
		case !ok:
			miss = append(miss, i)
		case k.terminal:
			out[i] = k.st
		default:
			out[i].State = sdk.StateInProgress
			running = true
		}
	}
	r.mu.Unlock()
	if running && drained == 0 {
		r.pollYield()
	}
	if len(miss) == 0 {
		return out, nil
	}
	ask := make([]sdk.HandleID, len(miss))
	for j, i := range miss {
		ask[j] = ids[i]
	}
	sts, err := overGRPC(ctx, ask)
	if err != nil {
		return nil, err
	}
	for j, i := range miss {
		out[i] = sts[j]
	}
	return out, nil
}

// Events is what the plugin forwarded of the transport's events, in
// order (ForwardsEvents must hold). When nothing waits, one drain call
// through the rings asks the transport now and returns its answer, errors
// included; unless the transport is a Waker (prompt): the plugin then
// forwards what the transport has as soon as it wakes, and nothing is
// asked (a drain would cost a round trip through the rings on every round
// of the host, for nothing).
func (r *Client) Events(ctx context.Context, max int) ([]sdk.Event, error) {
	if err := r.gone("Events"); err != nil {
		return nil, err
	}
	r.drain()
	if err := r.gone("Events"); err != nil {
		return nil, err
	}
	r.mu.Lock()
	empty := len(r.evq) == 0
	r.mu.Unlock()
	if empty && !r.prompt {
		if _, err := r.submit(ctx, "Events", kindDrainEvents, kindDrainResult, 0, nil, nil); err != nil {
			return nil, err
		}
	}
	return takeLocked(r, &r.evq, max), nil
}

// Notifications is what the plugin forwarded of the transport's
// notifications, in order; when nothing waits, as Events.
func (r *Client) Notifications(ctx context.Context, max int) ([]sdk.Notification, error) {
	if err := r.gone("Notifications"); err != nil {
		return nil, err
	}
	r.drain()
	if err := r.gone("Notifications"); err != nil {
		return nil, err
	}
	r.mu.Lock()
	empty := len(r.notes) == 0
	r.mu.Unlock()
	if empty && !r.prompt {
		if _, err := r.submit(ctx, "Notifications", kindDrainNotes, kindDrainResult, 0, nil, nil); err != nil {
			return nil, err
		}
	}
	return takeLocked(r, &r.notes, max), nil
}
