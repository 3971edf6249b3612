package plugin

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/sdk"
)

// The plugin side of the rings: Serve runs it for every transport, so a
// transport gets the rings without code of its own. One goroutine, the
// pump, takes submissions in order, calls the transport, pushes the results,
// and pushes what changed: the transport's events when it is an
// EventSource (claimed in Describe), else the terminal states it finds by
// polling the handles posted and not yet terminal; and the notifications it
// drains, so that the host's Waker covers them. A transport's wake-up
// makes the pump ask for its changes and its notifications; for a
// WakeReasoner, only for what the wake-up was for, so that completions do
// not cost a notification drain each. While the pump is awake it takes the
// wake-ups from Wake's channel itself between its rounds; a goroutine
// forwards them only while it sleeps (forward), so that a completion costs
// no goroutine hop. After serving a Post the pump lets the transport's
// goroutines run (a Go transport hands its transfers to one, which the
// scheduler would otherwise queue behind the pump) and then looks for
// changes at once.
//
// The pump spins while work comes (adapting how long), then sleeps on its
// doorbell: with nothing in flight and a transport that is a Waker, until
// the host or the transport wakes it; with transfers in flight, for a
// backoff that grows from ringMinBackoff to ringBusyBackoff, and to
// ringMaxBackoff once nothing moved for ringStalled; otherwise (a
// transport that cannot say when a notification arrives, so that the
// pump drains its notifications to wake the host) for a pause that grows
// from ringMinIdleNotes to ringIdleNotePoll. An idle pump costs next to
// nothing: some ten wake-ups a second, none for a Waker.
//
// step is the pump's unit of work (take what was submitted, answer it,
// push what changed); a transport whose own progress thread should take
// ring entries, without a goroutine hop per call, would run it there in
// place of the pump. No transport does yet.

// ringsEnv, set to "off" in a transport process's environment, makes it
// refuse rings: the host then stays on gRPC. It exists to test that
// fallback and to rule the rings out when debugging.
const ringsEnv = "CUSTODY_TRANSPORT_RINGS"

// Pump timing.
const (
	ringMinSpin      = 5 * time.Microsecond
	ringMaxSpin      = 200 * time.Microsecond
	ringMinBackoff   = 20 * time.Microsecond
	ringBusyBackoff  = 200 * time.Microsecond // longest sleep while transfers move
	ringStalled      = 50 * time.Millisecond  // after this long without progress...
	ringMaxBackoff   = 2 * time.Millisecond   // ...sleeps grow to this
	ringMinIdleNotes = time.Millisecond
	ringIdleNotePoll = 100 * time.Millisecond
	ringActiveNotes  = 50 * time.Microsecond // least time between two notification drains while busy
	ringDrainTimeout = time.Second           // bounds the pump's own calls (events, polls, notifications)
)

// ringServer is the plugin side of one mapping.
type ringServer struct {
	impl   sdk.Transport
	events sdk.EventSource // nil unless the transport is one and claims it
	waker  sdk.Waker       // nil unless the transport is one
	// reasons says what a wake-up was for; nil unless the Waker is a
	// WakeReasoner (every wake-up is then taken as both).
	reasons sdk.WakeReasoner
	log     hclog.Logger
	// releaseTerminal: the host asked the pump to release each handle it
	// follows as soon as it pushes the handle's terminal state (ring.go:
	// release at terminal).
	releaseTerminal bool

	mem     []byte
	m       *ringMap
	sub     *consumer
	comp    *producer
	scratch wire

	trackMu  sync.Mutex
	inflight map[sdk.HandleID]struct{}
	// releasing is held by the pump from releasing handles at terminal
	// until their states are in the completion ring (settled).
	releasing sync.Mutex

	// kickedStates and kickedNotes make the pump ask the transport for
	// its changes (events or polls) and for its notifications, at once.
	kickedStates atomic.Bool
	kickedNotes  atomic.Bool
	stopped      atomic.Bool
	// listen tells the goroutine that forwards the transport's wake-ups
	// that the pump is about to sleep, so that it forwards the next one
	// (capacity 1). While the pump is awake it takes them from Wake's
	// channel itself (takeKicks), without a goroutine hop.
	listen chan struct{}
	// mapMu guards the mapping's life against wake-ups from gRPC
	// handlers: unmapped is set, under it, once the pump unmapped it.
	mapMu    sync.RWMutex
	unmapped bool
	done     chan struct{}
	// followAt is when the pump may next ask the transport for changes,
	// followGap how long it waits after an empty answer; notesGap the
	// least time between two notification drains while busy.
	followAt  time.Time
	followGap time.Duration
	notesGap  time.Duration
	// lastSent is when the host published the submission served last.
	lastSent int64
	// postedAt is when the pump served the last Post; doneTime is a
	// moving average of how long after it the next change came, so that
	// the pump spins while a change is about due (doneSpin).
	postedAt time.Time
	doneTime time.Duration
	// pending holds the items of a call submitted in parts.
	pendingPosts []sdk.PostSpec
	pendingIDs   []sdk.HandleID
	pendingNotes []sdk.OutboundNotification
}

// newRingServer serves the rings of mem for impl; call run.
func newRingServer(ctx context.Context, impl sdk.Transport, mem []byte, l ringLayout, log hclog.Logger, releaseTerminal bool) *ringServer {
	m := newRingMap(mem, l)
	s := &ringServer{
		impl: impl, log: log, mem: mem, m: m, releaseTerminal: releaseTerminal,
		sub:      newConsumer(m.sub, "submission"),
		comp:     newProducer(m.comp, "completion"),
		inflight: map[sdk.HandleID]struct{}{},
		done:     make(chan struct{}),
		listen:   make(chan struct{}, 1),
	}
	if es, ok := impl.(sdk.EventSource); ok {
		if d, err := impl.Describe(ctx); err == nil && d.Capabilities.Events {
			s.events = es
		}
	}
	s.waker, _ = impl.(sdk.Waker)
	s.reasons, _ = impl.(sdk.WakeReasoner)
	return s
}

// start runs the pump, and forwards the transport's wake-ups when it is a
// Waker.
func (s *ringServer) start() {
	go s.run()
	if s.waker != nil {
		go s.forward()
	}
}

// forward turns the transport's wake-ups into kicks of the pump while the
// pump sleeps (or is about to): it waits on Wake's channel only after the
// pump said so (listen), until it forwarded one. Meanwhile the pump takes
// the wake-ups itself between its rounds, so that a completion costs no
// run of this goroutine and no second wake-up of the pump.
func (s *ringServer) forward() {
	for {
		select {
		case <-s.listen:
		case <-s.done:
			return
		}
		for {
			select {
			case <-s.waker.Wake():
			case <-s.done:
				return
			}
			states, notes := s.wakeReasons()
			if states || notes {
				s.kickFor(states, notes)
				break
			}
		}
	}
}

// wakeReasons is what a wake-up of the transport was for: both, unless it
// is a WakeReasoner.
func (s *ringServer) wakeReasons() (states, notes bool) {
	if s.reasons != nil {
		return s.reasons.WakeReasons()
	}
	return true, true
}

// kick makes the pump drain events and notifications once more, waking
// it whether or not it says it sleeps.
func (s *ringServer) kick() {
	s.kickedStates.Store(true)
	s.kickedNotes.Store(true)
	s.mapMu.RLock()
	if !s.unmapped {
		s.m.plugin.force()
	}
	s.mapMu.RUnlock()
}

// kickFor makes the pump ask the transport for its changes (states), its
// notifications (notes), or both, at once.
func (s *ringServer) kickFor(states, notes bool) {
	if states {
		s.kickedStates.Store(true)
	}
	if notes {
		s.kickedNotes.Store(true)
	}
	// The pump looks at the flags after it says it sleeps (prepare), so
	// one that does not say so yet will see them.
	s.mapMu.RLock()
	if !s.unmapped {
		s.m.plugin.ring()
	}
	s.mapMu.RUnlock()
}

// stop ends the pump and waits for it; the mapping is unmapped then.
func (s *ringServer) stop() {
	s.stopped.Store(true)
	s.kick()
	<-s.done
}

func (s *ringServer) track(ids []sdk.HandleID) {
	s.trackMu.Lock()
	for _, id := range ids {
		s.inflight[id] = struct{}{}
	}
	s.trackMu.Unlock()
}

func (s *ringServer) untrack(id sdk.HandleID) {
	s.trackMu.Lock()
	delete(s.inflight, id)
	s.trackMu.Unlock()
}

func (s *ringServer) tracked() int {
	s.trackMu.Lock()
	defer s.trackMu.Unlock()
	return len(s.inflight)
}

// trackPosted is for a Post that came over gRPC (too large for the ring):
// its handles are followed like the ring's. A handle already terminal when
// polled here is not (its terminal event, if any, was or will be
// forwarded whether tracked or not).
func (s *ringServer) trackPosted(ctx context.Context, res []sdk.PostResult) {
	var ids []sdk.HandleID
	for _, r := range res {
		if r.Err == nil {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) == 0 {
		return
	}
	s.track(ids)
	if sts, err := s.impl.Poll(ctx, ids); err == nil && len(sts) == len(ids) {
		for i, st := range sts {
			if st.Err == nil && st.State.Terminal() {
				s.untrack(ids[i])
			}
		}
	}
	s.kick()
}

// untrackReleased is for a Release that came over gRPC.
func (s *ringServer) untrackReleased(ids []sdk.HandleID, errs []error) {
	for i, err := range errs {
		if err == nil && i < len(ids) {
			s.untrack(ids[i])
		}
	}
}

func (s *ringServer) run() {
	defer func() {
		s.mapMu.Lock()
		s.unmapped = true
		_ = unix.Munmap(s.mem)
		s.mapMu.Unlock()
		close(s.done)
	}()
	spin := 50 * time.Microsecond
	backoff, idleNotes := ringMinBackoff, ringMinIdleNotes
	last := time.Now()
	var notesAt time.Time
	for !s.stopped.Load() {
		now := time.Now()
		states, notes := s.takeKicks()
		worked, err := s.step(states, notes, now, &notesAt)
		if err != nil {
			s.fatal(err)
			return
		}
		if worked {
			// How long was the pump idle before the host submitted
			// this? Had it spun that long, it would have been awake:
			// spin twice that from now on (the submission's own time,
			// not when the pump got to it, so that a pump slow to wake
			// does not mistake its own latency for the host's pace).
			gap := now.Sub(last)
			if sent := s.lastSent; sent != 0 {
				gap = time.Unix(0, sent).Sub(last)
				s.lastSent = 0
			}
			if gap < ringMaxSpin {
				spin = max(spin, min(2*max(gap, 0), ringMaxSpin))
			}
			last, backoff, idleNotes = time.Now(), ringMinBackoff, ringMinIdleNotes
			continue
		}
		if now.Sub(last) < spin || (s.tracked() > 0 && now.Sub(s.postedAt) < s.doneSpin()) {
			yield(last, s.m.plugin, s.m.host)
			continue
		}
		// Spinning did not pay this time: shorten it.
		spin = max(spin*3/4, ringMinSpin)
		var timeout time.Duration // forever
		switch {
		case s.tracked() > 0:
			// Transfers in flight: look again soon, less often the
			// longer nothing moves.
			timeout = backoff
			limit := ringBusyBackoff
			if now.Sub(last) > ringStalled {
				limit = ringMaxBackoff
			}
			backoff = min(2*backoff, limit)
		case s.waker == nil:
			timeout = idleNotes
			idleNotes = min(2*idleNotes, ringIdleNotePoll)
		}
		if s.waker != nil {
			// From here the transport's wake-ups must reach the pump
			// through forward; one that came meanwhile waits in Wake's
			// channel, and is forwarded at once.
			select {
			case s.listen <- struct{}{}:
			default:
			}
		}
		v := s.m.plugin.prepare()
		if n, err := s.sub.available(); err != nil || n > 0 || s.kickedStates.Load() || s.kickedNotes.Load() || s.stopped.Load() {
			s.m.plugin.cancel()
			continue
		}
		s.m.plugin.wait(v, timeout)
	}
}

// takeKicks takes the kicks that came since the last time, and a wake-up
// of the transport waiting in Wake's channel (the pump is awake, so
// nothing forwards it).
func (s *ringServer) takeKicks() (states, notes bool) {
	states, notes = s.kickedStates.Swap(false), s.kickedNotes.Swap(false)
	if s.waker != nil {
		select {
		case <-s.waker.Wake():
			st, nt := s.wakeReasons()
			states, notes = states || st, notes || nt
		default:
		}
	}
	return states, notes
}

// doneSpin is how long after a Post the pump keeps spinning for its
// changes: twice their usual delay, within ringMaxSpin.
func (s *ringServer) doneSpin() time.Duration {
	return min(2*s.doneTime+ringMinSpin, ringMaxSpin)
}

// fatal stops serving the rings after a protocol violation by the host
// side, and tells the host why.
func (s *ringServer) fatal(err error) {
	s.log.Error("rings: the host broke the ring protocol; no longer serving the rings, the host must fence this transport", "error", err)
	msg := []byte(err.Error())
	if len(msg) > maxRingMessage {
		msg = msg[:maxRingMessage]
	}
	// Best effort: the completion ring may be what is broken.
	_ = s.pushOnce(ringEntry{kind: kindFatal}, msg)
}

// step does one round of work and says whether there was any.
//
// The transport is asked for changes (Events or Poll) no more often than
// its own answers take, doubling the gap while they come back empty (up to
// ringBusyBackoff), so that a transport whose calls hop to a worker thread
// spends at most about half its time answering the pump; a submission or a
// change found resets the gap. While a Post's change is due (doneSpin after
// it) the gap does not grow past one answer's time: a transport that
// progresses its transfers in Events (UCX does) then finds the completion
// at once instead of one doubling later.
func (s *ringServer) step(kickedStates, kickedNotes bool, now time.Time, notesAt *time.Time) (bool, error) {
	worked := false
	n, err := s.sub.available()
	if err != nil {
		return false, err
	}
	posted := false
	for range n {
		if s.stopped.Load() {
			return true, nil
		}
		p, err := s.serveOne()
		if err != nil {
			return false, err
		}
		worked, posted = true, posted || p
	}
	if n > 0 {
		// Slots were freed: a host waiting for room may sleep.
		s.m.host.ring()
		s.followGap, s.followAt = 0, now
	}
	if posted {
		// A Go transport's Post hands its transfers to a goroutine of
		// its own, which the Go scheduler queues behind the pump on this
		// very thread (or on an idle thread that must first get a CPU):
		// let it run now, so that a quick transfer is over, and its
		// change known, before the pump looks for changes below.
		runtime.Gosched()
		st, nt := s.takeKicks()
		kickedStates, kickedNotes = kickedStates || st, kickedNotes || nt
	}
	if kickedStates || (s.tracked() > 0 && !now.Before(s.followAt)) {
		t0 := time.Now()
		w, err := s.followHandles()
		if err != nil {
			return false, err
		}
		took := time.Since(t0)
		if w {
			s.followGap = 0
			if !s.postedAt.IsZero() {
				d := t0.Sub(s.postedAt)
				s.doneTime += (d - s.doneTime) / 8
				s.postedAt = time.Time{}
			}
		} else if !s.postedAt.IsZero() && now.Sub(s.postedAt) < s.doneSpin() {
			// A Post's change is due: ask again as soon as half this
			// pump's time would allow, not later each time.
			s.followGap = took
		} else {
			s.followGap = min(max(2*s.followGap, took), ringBusyBackoff)
		}
		s.followAt = t0.Add(took + s.followGap)
		worked = worked || w
	}
	due := kickedNotes || (s.waker == nil && now.Sub(*notesAt) >= s.notesGap)
	if due {
		t0 := time.Now()
		w, err := s.forwardNotes()
		if err != nil {
			return false, err
		}
		*notesAt = time.Now()
		s.notesGap = max(ringActiveNotes, 2*notesAt.Sub(t0))
		worked = worked || w
	}
	return worked, nil
}

// serveOne takes one submission and answers it; posted says it was a Post.
func (s *ringServer) serveOne() (posted bool, err error) {
	e, payload, err := s.sub.next()
	if err != nil {
		return false, err
	}
	if err := e.check(true); err != nil {
		return false, err
	}
	s.sub.advance()
	s.lastSent = e.sent
	var dl time.Time
	if e.deadline != 0 {
		dl = time.Unix(0, e.deadline)
	}
	ctx := newCallCtx(dl)
	defer ctx.end(context.Canceled)
	switch e.kind {
	case kindPost:
		s.postedAt = time.Now()
		specs, err := decodePostSpecs(payload, e.count)
		if err != nil {
			return true, fmt.Errorf("post call %d: %w", e.call, err)
		}
		if s.pendingPosts, err = gather(e, s.pendingPosts, specs); err != nil || uint32(len(s.pendingPosts)) < e.total {
			return true, err
		}
		specs, s.pendingPosts = s.pendingPosts, nil
		res, err := s.impl.Post(ctx, specs)
		if err != nil {
			return true, s.pushCallError(kindPostResult, e.call, err)
		}
		var ids []sdk.HandleID
		for _, r := range res {
			if r.Err == nil {
				ids = append(ids, r.ID)
			}
		}
		s.track(ids)
		return true, s.pushItems(kindPostResult, e.call, len(res), func(w wire, i int) wire { return encodePostResult(w, res[i]) })
	case kindRelease:
		ids, err := decodeIDs(payload, e.count)
		if err != nil {
			return false, fmt.Errorf("release call %d: %w", e.call, err)
		}
		if s.pendingIDs, err = gather(e, s.pendingIDs, ids); err != nil || uint32(len(s.pendingIDs)) < e.total {
			return false, err
		}
		ids, s.pendingIDs = s.pendingIDs, nil
		errs, err := s.impl.Release(ctx, ids)
		if err != nil {
			return false, s.pushCallError(kindReleaseRes, e.call, err)
		}
		s.untrackReleased(ids, errs)
		return false, s.pushItems(kindReleaseRes, e.call, len(errs), func(w wire, i int) wire { return w.err(errs[i]) })
	case kindSendNotes:
		msgs, err := decodeOutNotes(payload, e.count)
		if err != nil {
			return false, fmt.Errorf("send-notifications call %d: %w", e.call, err)
		}
		if s.pendingNotes, err = gather(e, s.pendingNotes, msgs); err != nil || uint32(len(s.pendingNotes)) < e.total {
			return false, err
		}
		msgs, s.pendingNotes = s.pendingNotes, nil
		errs, err := s.impl.SendNotifications(ctx, msgs)
		if err != nil {
			return false, s.pushCallError(kindSendNotesRes, e.call, err)
		}
		return false, s.pushItems(kindSendNotesRes, e.call, len(errs), func(w wire, i int) wire { return w.err(errs[i]) })
	case kindDrainEvents:
		var err error
		if s.events == nil {
			err = sdk.Errorf(sdk.CodeUnsupported, "transport does not implement sdk.EventSource; poll instead")
		} else {
			var evs []sdk.Event
			if evs, err = s.events.Events(ctx, 0); err == nil {
				err = s.pushEvents(kindEvents, evs)
			}
			if errors.As(err, new(*ringError)) {
				return false, err
			}
		}
		return false, s.pushCallError(kindDrainResult, e.call, err)
	case kindDrainNotes:
		ns, err := s.impl.Notifications(ctx, 0)
		if err == nil {
			if err := s.pushNotes(ns); err != nil {
				return false, err
			}
		}
		return false, s.pushCallError(kindDrainResult, e.call, err)
	case kindDetach:
		s.stopped.Store(true)
		return false, nil
	}
	return false, ringErrorf("submission %d: kind %d is not served", e.seq, e.kind)
}

// gather appends the items of one part of a call submitted in parts; each
// part must follow the one before.
func gather[T any](e ringEntry, have, items []T) ([]T, error) {
	if uint32(len(have)) != e.first {
		return nil, ringErrorf("submission %d (call %d): part starts at item %d, %d came before", e.seq, e.call, e.first, len(have))
	}
	return append(have, items...), nil
}

// followHandles pushes what changed for the handles in flight: the
// transport's events, or the terminal states a poll finds.
func (s *ringServer) followHandles() (bool, error) {
	ctx := newCallCtx(time.Now().Add(ringDrainTimeout))
	defer ctx.end(context.Canceled)
	if s.events != nil {
		evs, err := s.events.Events(ctx, 0)
		if err == nil {
			return len(evs) > 0, s.pushEvents(kindEvents, evs)
		}
		// Fall through to polling this round.
	}
	s.trackMu.Lock()
	ids := make([]sdk.HandleID, 0, len(s.inflight))
	for id := range s.inflight {
		ids = append(ids, id)
	}
	s.trackMu.Unlock()
	if len(ids) == 0 {
		return false, nil
	}
	sts, err := s.impl.Poll(ctx, ids)
	if err != nil || len(sts) != len(ids) {
		return false, nil
	}
	var evs []sdk.Event
	for i, st := range sts {
		if st.Err == nil && st.State.Terminal() {
			evs = append(evs, sdk.Event{Handle: ids[i], State: st.State, Reason: st.Reason})
		}
	}
	return len(evs) > 0, s.pushEvents(kindStates, evs)
}

// forwardNotes drains the transport's notifications into the ring.
func (s *ringServer) forwardNotes() (bool, error) {
	ctx := newCallCtx(time.Now().Add(ringDrainTimeout))
	defer ctx.end(context.Canceled)
	ns, err := s.impl.Notifications(ctx, 0)
	if err != nil || len(ns) == 0 {
		// An error here is the host's to see when it asks (a drain call).
		return false, nil
	}
	return true, s.pushNotes(ns)
}

func (s *ringServer) pushEvents(kind uint16, evs []sdk.Event) error {
	s.releasing.Lock()
	defer s.releasing.Unlock()
	released := s.releaseAtTerminal(evs)
	for _, e := range evs {
		if e.State.Terminal() {
			s.untrack(e.Handle)
		}
	}
	if len(evs) == 0 {
		return nil
	}
	enc := func(w wire, i int) wire { return encodeEvent(w, evs[i]) }
	if s.releaseTerminal {
		enc = func(w wire, i int) wire { return encodeReleasedEvent(w, evs[i], released[i]) }
	}
	return s.pushItems(kind, 0, len(evs), enc)
}

// canceled is told of the transport's answer to a Cancel that came over
// gRPC: under release at terminal, when the transport said NOT_FOUND, it
// returns only once the states of every handle the pump released at
// terminal so far are in the completion ring (settled), so that the host
// finds the state of such a handle when the answer reaches it.
func (s *ringServer) canceled(errs []error) {
	if s.releaseTerminal && slices.ContainsFunc(errs, isNotFound) {
		s.settled()
	}
}

// settled returns once the states of every handle the pump released at
// terminal so far are in the completion ring: a call the transport
// answered NOT_FOUND for such a handle then reaches the host after the
// state that tells it why.
func (s *ringServer) settled() {
	s.releasing.Lock()
	defer s.releasing.Unlock()
}

// releaseAtTerminal releases, when the host asked for it, the handles that
// evs report terminal and that the pump follows, before their states go
// out; it says which it released. A handle whose Release failed (or a
// whole call that failed) is left to the host's own Release, as without
// this.
func (s *ringServer) releaseAtTerminal(evs []sdk.Event) []bool {
	if !s.releaseTerminal || len(evs) == 0 {
		return nil
	}
	released := make([]bool, len(evs))
	var ids []sdk.HandleID
	var at []int
	s.trackMu.Lock()
	for i, e := range evs {
		if _, ok := s.inflight[e.Handle]; ok && e.State.Terminal() {
			ids = append(ids, e.Handle)
			at = append(at, i)
		}
	}
	s.trackMu.Unlock()
	if len(ids) == 0 {
		return released
	}
	ctx := newCallCtx(time.Now().Add(ringDrainTimeout))
	defer ctx.end(context.Canceled)
	errs, err := s.impl.Release(ctx, ids)
	if err != nil || len(errs) != len(ids) {
		return released
	}
	for j, i := range at {
		released[i] = errs[j] == nil
	}
	return released
}

func (s *ringServer) pushNotes(ns []sdk.Notification) error {
	if len(ns) == 0 {
		return nil
	}
	return s.pushItems(kindNotes, 0, len(ns), func(w wire, i int) wire { return encodeNote(w, ns[i]) })
}

// pushCallError answers a call with its call-level outcome and no items.
func (s *ringServer) pushCallError(kind uint16, call uint64, err error) error {
	code, msg := uint16(0), []byte(nil)
	if err != nil {
		code, msg = errCodeMessage(err)
	}
	return s.push(ringEntry{kind: kind, call: call, code: code}, msg)
}

// pushItems pushes n items, in parts that each fit a quarter of the arena.
func (s *ringServer) pushItems(kind uint16, call uint64, n int, enc func(wire, int) wire) error {
	limit := len(s.comp.r.arena) / 4
	w := s.scratch[:0]
	first := 0
	for i := range n {
		before := len(w)
		w = enc(w, i)
		if len(w) > limit && i > first {
			if err := s.push(ringEntry{kind: kind, call: call, first: uint32(first), count: uint32(i - first), total: uint32(n)}, w[:before]); err != nil {
				return err
			}
			w = append(w[:0], w[before:]...)
			first = i
		}
	}
	err := s.push(ringEntry{kind: kind, call: call, first: uint32(first), count: uint32(n - first), total: uint32(n)}, w)
	s.scratch = w[:0]
	return err
}

// push publishes one completion entry, waiting for room while the host
// drains.
func (s *ringServer) push(e ringEntry, payload []byte) error {
	spun := time.Now()
	for {
		err := s.pushOnce(e, payload)
		if !errors.Is(err, errRingFull) {
			return err
		}
		if s.stopped.Load() {
			return nil
		}
		s.m.host.ring()
		if time.Since(spun) < ringMaxSpin {
			yield(spun, s.m.plugin, s.m.host)
			continue
		}
		v := s.m.plugin.prepare()
		if s.stopped.Load() {
			s.m.plugin.cancel()
			continue
		}
		s.m.plugin.wait(v, ringMaxBackoff)
	}
}

func (s *ringServer) pushOnce(e ringEntry, payload []byte) error {
	ent, arena, off, err := s.comp.reserve(len(payload))
	if err != nil {
		return err
	}
	copy(arena, payload)
	e.seq = s.comp.tail
	e.arenaOff, e.arenaLen = off, uint32(len(payload))
	e.encode(ent)
	s.comp.publish()
	s.m.host.ring()
	return nil
}
