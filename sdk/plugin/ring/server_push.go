package ring

import (
	"context"
	"errors"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// What the pump pushes into the completion ring: results of calls, and
// what changed for the handles it follows (events or polled states) and
// the notifications it drains, on its own.

// followHandles pushes what changed for the handles in flight: the
// transport's events, or the terminal states a poll finds.
func (s *Server) followHandles() (bool, error) {
	ctx := newCallCtx(time.Now().Add(drainTimeout))
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
func (s *Server) forwardNotes() (bool, error) {
	ctx := newCallCtx(time.Now().Add(drainTimeout))
	defer ctx.end(context.Canceled)
	ns, err := s.impl.Notifications(ctx, 0)
	if err != nil || len(ns) == 0 {
		// An error here is the host's to see when it asks (a drain call).
		return false, nil
	}
	return true, s.pushNotes(ns)
}

func (s *Server) pushEvents(kind uint16, evs []sdk.Event) error {
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

// releaseAtTerminal releases, when the host asked for it, the handles that
// evs report terminal and that the pump follows, before their states go
// out; it says which it released. A handle whose Release failed (or a
// whole call that failed) is left to the host's own Release, as without
// this.
func (s *Server) releaseAtTerminal(evs []sdk.Event) []bool {
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
	ctx := newCallCtx(time.Now().Add(drainTimeout))
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

func (s *Server) pushNotes(ns []sdk.Notification) error {
	if len(ns) == 0 {
		return nil
	}
	return s.pushItems(kindNotes, 0, len(ns), func(w wire, i int) wire { return encodeNote(w, ns[i]) })
}

// pushCallError answers a call with its call-level outcome and no items.
func (s *Server) pushCallError(kind uint16, call uint64, err error) error {
	code, msg := uint16(0), []byte(nil)
	if err != nil {
		code, msg = errCodeMessage(err)
	}
	return s.push(entry{kind: kind, call: call, code: code}, msg)
}

// pushItems pushes n items, in parts that each fit a quarter of the arena.
func (s *Server) pushItems(kind uint16, call uint64, n int, enc func(wire, int) wire) error {
	limit := len(s.comp.r.arena) / 4
	w := s.scratch[:0]
	first := 0
	for i := range n {
		before := len(w)
		w = enc(w, i)
		if len(w) > limit && i > first {
			if err := s.push(entry{kind: kind, call: call, first: uint32(first), count: uint32(i - first), total: uint32(n)}, w[:before]); err != nil {
				return err
			}
			w = append(w[:0], w[before:]...)
			first = i
		}
	}
	err := s.push(entry{kind: kind, call: call, first: uint32(first), count: uint32(n - first), total: uint32(n)}, w)
	s.scratch = w[:0]
	return err
}

// push publishes one completion entry, waiting for room while the host
// drains.
func (s *Server) push(e entry, payload []byte) error {
	spun := time.Now()
	var sp spinner
	for {
		err := s.pushOnce(e, payload)
		if !errors.Is(err, errFull) {
			return err
		}
		if s.stopped.Load() {
			return nil
		}
		s.m.host.ring()
		if time.Since(spun) < maxSpin {
			sp.yield(spun, s.m.plugin, s.m.host)
			continue
		}
		// Sleep until the host frees room: announce it, then look
		// once more, since the host may have freed it meanwhile.
		v := s.m.plugin.prepare(awaitingRoom)
		if err := s.pushOnce(e, payload); !errors.Is(err, errFull) {
			s.m.plugin.cancel()
			return err
		}
		if s.stopped.Load() {
			s.m.plugin.cancel()
			continue
		}
		s.m.plugin.wait(v, maxBackoff)
	}
}

func (s *Server) pushOnce(e entry, payload []byte) error {
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
