package ring

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// Server is the plugin's side of one mapping. NewServer starts its pump
// (server_pump.go), one goroutine that takes submissions in order, calls
// the transport, and pushes the results and what changed
// (server_push.go). A transport gets the rings without code of its own:
// the Server speaks to it through sdk.Transport and the optional
// interfaces it implements (EventSource, Waker, WakeReasoner).
type Server struct {
	impl   sdk.Transport
	events sdk.EventSource // nil unless the transport is one and claims it
	waker  sdk.Waker       // nil unless the transport is one
	// reasons says what a wake-up was for; nil unless the Waker is a
	// WakeReasoner (every wake-up is then taken as both).
	reasons sdk.WakeReasoner
	log     Logger
	// releaseTerminal: the host asked the pump to release each handle it
	// follows as soon as it pushes the handle's terminal state (doc.go:
	// release at terminal).
	releaseTerminal bool

	mem     []byte
	m       *mapping
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

// NewServer serves impl on mem, mapped from a ring file of layout l
// (AttachFile): it starts the pump at once, and the goroutine that
// forwards the transport's wake-ups when it is a Waker. ctx bounds the one
// Describe that says whether the transport claims events. With
// releaseTerminal (the host asked for it), the pump releases each handle
// it follows as soon as it reports the handle terminal. The Server stops
// serving, and unmaps mem, when the host detaches or breaks the protocol
// (Done).
func NewServer(ctx context.Context, impl sdk.Transport, mem []byte, l Layout, log Logger, releaseTerminal bool) *Server {
	m := newMapping(mem, l)
	s := &Server{
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
	go s.run()
	if s.waker != nil {
		go s.forward()
	}
	return s
}

// Done is closed once the Server stopped serving and unmapped the rings.
func (s *Server) Done() <-chan struct{} { return s.done }

// ForwardsEvents reports whether the pump forwards the transport's events
// (it is an EventSource and claims events in Describe); else it polls the
// handles it follows.
func (s *Server) ForwardsEvents() bool { return s.events != nil }

// Prompt reports whether the transport is a Waker, so that the pump
// forwards its events and notifications as soon as it wakes.
func (s *Server) Prompt() bool { return s.waker != nil }

// ReleasesAtTerminal reports whether the pump releases each handle it
// follows as soon as it reports the handle terminal.
func (s *Server) ReleasesAtTerminal() bool { return s.releaseTerminal }

// The calls below tell the Server of calls that came over gRPC instead of
// through the rings (a Post too large for them, any Cancel), so that the
// pump follows the same handles either way.

// Posted is told of a Post that came over gRPC (too large for the ring):
// its handles are followed like the ring's. A handle already terminal when
// polled here is not (its terminal event, if any, was or will be
// forwarded whether tracked or not).
func (s *Server) Posted(ctx context.Context, res []sdk.PostResult) {
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

// Released is told of a Release that came over gRPC (and is called for
// each one that came through the rings): a handle released is no longer
// followed.
func (s *Server) Released(ids []sdk.HandleID, errs []error) {
	for i, err := range errs {
		if err == nil && i < len(ids) {
			s.untrack(ids[i])
		}
	}
}

// Canceled is told of the transport's answer to a Cancel that came over
// gRPC: under release at terminal, when the transport said NOT_FOUND, it
// returns only once the states of every handle the pump released at
// terminal so far are in the completion ring (settled), so that the host
// finds the state of such a handle when the answer reaches it.
func (s *Server) Canceled(errs []error) {
	if s.releaseTerminal && slices.ContainsFunc(errs, isNotFound) {
		s.settled()
	}
}

// settled returns once the states of every handle the pump released at
// terminal so far are in the completion ring: a call the transport
// answered NOT_FOUND for such a handle then reaches the host after the
// state that tells it why.
func (s *Server) settled() {
	s.releasing.Lock()
	defer s.releasing.Unlock()
}

// forward turns the transport's wake-ups into kicks of the pump while the
// pump sleeps (or is about to): it waits on Wake's channel only after the
// pump said so (listen), until it forwarded one. Meanwhile the pump takes
// the wake-ups itself between its rounds, so that a completion costs no
// run of this goroutine and no second wake-up of the pump.
func (s *Server) forward() {
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
func (s *Server) wakeReasons() (states, notes bool) {
	if s.reasons != nil {
		return s.reasons.WakeReasons()
	}
	return true, true
}

// kick makes the pump drain events and notifications once more, waking
// it whether or not it says it sleeps.
func (s *Server) kick() {
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
func (s *Server) kickFor(states, notes bool) {
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
func (s *Server) stop() {
	s.stopped.Store(true)
	s.kick()
	<-s.done
}

func (s *Server) track(ids []sdk.HandleID) {
	s.trackMu.Lock()
	for _, id := range ids {
		s.inflight[id] = struct{}{}
	}
	s.trackMu.Unlock()
}

func (s *Server) untrack(id sdk.HandleID) {
	s.trackMu.Lock()
	delete(s.inflight, id)
	s.trackMu.Unlock()
}

func (s *Server) tracked() int {
	s.trackMu.Lock()
	defer s.trackMu.Unlock()
	return len(s.inflight)
}
