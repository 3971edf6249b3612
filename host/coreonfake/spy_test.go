package coreonfake

import (
	"context"
	"slices"
	"sync"

	"github.com/custody-dev/custody/plugins/fake"
	"github.com/custody-dev/custody/sdk"
	"github.com/stretchr/testify/require"
)

// spy is the real in-process fake with what it lacks for some cases:
// Cancel that changes nothing, as UCX's (cancelNone), and notifications
// held back (holdNote), plus a record of what core did: which handles it
// was told were terminal, which it released before that, the pool blocks
// each handle it posted and has not released reaches (posted), and the
// notifications it sent.
type spy struct {
	*fake.Transport
	mu            sync.Mutex
	cancelNone    bool
	terminal      map[sdk.HandleID]bool     // handles seen terminal by Poll or Events
	releasedEarly []sdk.HandleID            // Release asked before the handle was seen terminal
	posted        map[sdk.HandleID][]uint32 // posted, not released yet: the local indices (pool blocks) it reaches
	// holdNote, when set, withholds the notifications it selects (their
	// send reports OK) until flushNotes sends them: a notification delayed
	// for as long as a test needs.
	holdNote func(msg []byte) bool
	held     []sdk.OutboundNotification
	sent     []string // every notification core asked to send, in order
}

func (s *spy) SendNotifications(ctx context.Context, msgs []sdk.OutboundNotification) ([]error, error) {
	s.mu.Lock()
	var pass []sdk.OutboundNotification
	var at []int
	for i, m := range msgs {
		s.sent = append(s.sent, string(m.Message))
		if s.holdNote != nil && s.holdNote(m.Message) {
			s.held = append(s.held, m)
			continue
		}
		pass = append(pass, m)
		at = append(at, i)
	}
	s.mu.Unlock()
	out := make([]error, len(msgs))
	if len(pass) == 0 {
		return out, nil
	}
	errs, err := s.Transport.SendNotifications(ctx, pass)
	if err != nil {
		return nil, err
	}
	for k, i := range at {
		out[i] = errs[k]
	}
	return out, nil
}

// flushNotes sends the withheld notifications and stops withholding.
func (s *spy) flushNotes(t testingT, ctx context.Context) {
	t.Helper()
	s.mu.Lock()
	held := s.held
	s.held, s.holdNote = nil, nil
	s.mu.Unlock()
	errs, err := s.Transport.SendNotifications(ctx, held)
	require.NoError(t, err)
	for _, e := range errs {
		require.NoError(t, e)
	}
}

// sentNotes is every notification core asked to send so far.
func (s *spy) sentNotes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.sent)
}

func (s *spy) Describe(ctx context.Context) (sdk.Description, error) {
	d, err := s.Transport.Describe(ctx)
	if s.cancelNone {
		d.CancelEffect = sdk.CancelNone
	}
	return d, err
}

func (s *spy) Cancel(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	s.mu.Lock()
	none := s.cancelNone
	s.mu.Unlock()
	if none {
		return make([]error, len(ids)), nil
	}
	return s.Transport.Cancel(ctx, ids)
}

func (s *spy) Poll(ctx context.Context, ids []sdk.HandleID) ([]sdk.HandleStatus, error) {
	st, err := s.Transport.Poll(ctx, ids)
	s.mu.Lock()
	for i := range st {
		if st[i].Err == nil && st[i].State.Terminal() {
			s.terminal[ids[i]] = true
		}
	}
	s.mu.Unlock()
	return st, err
}

func (s *spy) Events(ctx context.Context, max int) ([]sdk.Event, error) {
	evs, err := s.Transport.Events(ctx, max)
	s.mu.Lock()
	for _, e := range evs {
		if e.State.Terminal() {
			s.terminal[e.Handle] = true
		}
	}
	s.mu.Unlock()
	return evs, err
}

func (s *spy) Release(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	s.mu.Lock()
	for _, id := range ids {
		if !s.terminal[id] {
			s.releasedEarly = append(s.releasedEarly, id)
		}
	}
	s.mu.Unlock()
	errs, err := s.Transport.Release(ctx, ids)
	s.mu.Lock()
	for i, id := range ids {
		if err == nil && i < len(errs) && errs[i] == nil {
			delete(s.posted, id)
		}
	}
	s.mu.Unlock()
	return errs, err
}

// Post records the pool blocks each posted handle reaches: core's pool
// dlist has one descriptor per block, in order, so a post's local indices
// are its blocks.
func (s *spy) Post(ctx context.Context, specs []sdk.PostSpec) ([]sdk.PostResult, error) {
	res, err := s.Transport.Post(ctx, specs)
	s.mu.Lock()
	for k, p := range res {
		if err == nil && p.Err == nil && p.ID != 0 && k < len(specs) {
			s.posted[p.ID] = slices.Clone(specs[k].LocalIndices)
		}
	}
	s.mu.Unlock()
	return res, err
}

// live is every handle core posted and has not released, with the blocks
// it reaches: core's live handles, as long as none is fenced or
// force-released.
func (s *spy) live() map[sdk.HandleID][]uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[sdk.HandleID][]uint32, len(s.posted))
	for h, b := range s.posted {
		out[h] = slices.Clone(b)
	}
	return out
}

// newSpy spies on tr.
func newSpy(tr *fake.Transport) *spy {
	return &spy{Transport: tr, terminal: map[sdk.HandleID]bool{}, posted: map[sdk.HandleID][]uint32{}}
}
