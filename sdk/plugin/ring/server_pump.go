package ring

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/custody-dev/custody/sdk"
)

// The pump: one goroutine takes submissions in order, calls the
// transport, pushes the results, and pushes what changed: the transport's events when it is an
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
// backoff that grows from minBackoff to busyBackoff, and to
// maxBackoff once nothing moved for stalledAfter; otherwise (a
// transport that cannot say when a notification arrives, so that the
// pump drains its notifications to wake the host) for a pause that grows
// from minIdleNotes to idleNotePoll. An idle pump costs next to
// nothing: some ten wake-ups a second, none for a Waker.
//
// step is the pump's unit of work: take what was submitted, answer it,
// push what changed.

// Pump timing.
const (
	minSpin      = 5 * time.Microsecond
	maxSpin      = 200 * time.Microsecond
	minBackoff   = 20 * time.Microsecond
	busyBackoff  = 200 * time.Microsecond // longest sleep while transfers move
	stalledAfter = 50 * time.Millisecond  // after this long without progress...
	maxBackoff   = 2 * time.Millisecond   // ...sleeps grow to this
	minIdleNotes = time.Millisecond
	idleNotePoll = 100 * time.Millisecond
	activeNotes  = 50 * time.Microsecond // least time between two notification drains while busy
	drainTimeout = time.Second           // bounds the pump's own calls (events, polls, notifications)
)

// run is the pump: it serves the rings until the host detaches, the
// Server is stopped or the host breaks the protocol, then unmaps them.
func (s *Server) run() {
	defer func() {
		s.mapMu.Lock()
		s.unmapped = true
		_ = unix.Munmap(s.mem)
		s.mapMu.Unlock()
		close(s.done)
	}()
	spin := 50 * time.Microsecond
	backoff, idleNotes := minBackoff, minIdleNotes
	last := time.Now()
	var notesAt time.Time
	var sp spinner
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
			if gap < maxSpin {
				spin = max(spin, min(2*max(gap, 0), maxSpin))
			}
			last, backoff, idleNotes = time.Now(), minBackoff, minIdleNotes
			continue
		}
		if now.Sub(last) < spin || (s.tracked() > 0 && now.Sub(s.postedAt) < s.doneSpin()) {
			sp.yield(last, s.m.plugin, s.m.host)
			continue
		}
		// Spinning did not pay this time: shorten it.
		spin = max(spin*3/4, minSpin)
		var timeout time.Duration // forever
		switch {
		case s.tracked() > 0:
			// Transfers in flight: look again soon, less often the
			// longer nothing moves.
			timeout = backoff
			limit := busyBackoff
			if now.Sub(last) > stalledAfter {
				limit = maxBackoff
			}
			backoff = min(2*backoff, limit)
		case s.waker == nil:
			timeout = idleNotes
			idleNotes = min(2*idleNotes, idleNotePoll)
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
		v := s.m.plugin.prepare(asleep)
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
func (s *Server) takeKicks() (states, notes bool) {
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
// changes: twice their usual delay, within maxSpin.
func (s *Server) doneSpin() time.Duration {
	return min(2*s.doneTime+minSpin, maxSpin)
}

// fatal stops serving the rings after a protocol violation by the host
// side, and tells the host why.
func (s *Server) fatal(err error) {
	s.log.Error("rings: the host broke the ring protocol; no longer serving the rings, the host must fence this transport", "error", err)
	msg := []byte(err.Error())
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
	}
	// Best effort: the completion ring may be what is broken.
	_ = s.pushOnce(entry{kind: kindFatal}, msg)
}

// step does one round of work and says whether there was any.
//
// The transport is asked for changes (Events or Poll) no more often than
// its own answers take, doubling the gap while they come back empty (up to
// busyBackoff), so that a transport whose calls hop to a worker thread
// spends at most about half its time answering the pump; a submission or a
// change found resets the gap. While a Post's change is due (doneSpin after
// it) the gap does not grow past one answer's time: a transport that
// progresses its transfers in Events (UCX does) then finds the completion
// at once instead of one doubling later.
func (s *Server) step(kickedStates, kickedNotes bool, now time.Time, notesAt *time.Time) (bool, error) {
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
		s.m.host.roomFreed()
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
			s.followGap = min(max(2*s.followGap, took), busyBackoff)
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
		s.notesGap = max(activeNotes, 2*notesAt.Sub(t0))
		worked = worked || w
	}
	return worked, nil
}

// serveOne takes one submission and answers it; posted says it was a Post.
func (s *Server) serveOne() (posted bool, err error) {
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
		s.Released(ids, errs)
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
			if errors.As(err, new(*violation)) {
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
	return false, violationf("submission %d: kind %d is not served", e.seq, e.kind)
}

// gather appends the items of one part of a call submitted in parts; each
// part must follow the one before.
func gather[T any](e entry, have, items []T) ([]T, error) {
	if uint32(len(have)) != e.first {
		return nil, violationf("submission %d (call %d): part starts at item %d, %d came before", e.seq, e.call, e.first, len(have))
	}
	return append(have, items...), nil
}
