package conformance_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/custody-dev/custody/conformance"
	"github.com/custody-dev/custody/plugins/fake"
	"github.com/custody-dev/custody/sdk"
)

// broken wraps an in-process fake and breaks one rule of the contract,
// named by mode, beyond the fake's own misbehave modes, so that the tests
// prove each of the suite's other checks can fail. Each break is kept
// small and leaves the fake clean at teardown, so a failing check does not
// leak the fake's goroutines. The empty mode breaks nothing.
type broken struct {
	transport
	mode string
	// p is the chance the break happens at each occasion: 1, or P of a
	// mode given as NAME:P (so that a check's repetitions are shown to
	// catch a rule broken one time in ten).
	p    float64
	salt uint64 // draws breaksFor's choice of handles

	mu       sync.Mutex
	canceled map[sdk.HandleID]bool
	polled   map[sdk.HandleID]bool
	// Kept by the modes that need them.
	live      map[sdk.HandleID]bool                     // busy-needs-handle: unreleased handles
	dlistPeer map[sdk.DlistID]sdk.PeerID                // notify-canceled: each dlist's peer
	postNote  map[sdk.HandleID]sdk.OutboundNotification // notify-canceled
	released  []sdk.HandleID                            // ids-across-kinds: released handle ids
	peerIn    map[sdk.PeerID]sdk.PeerID                 // ids-across-kinds: made-up peer id to the fake's
}

// transport is what broken wraps: the fake, in process or launched.
type transport interface {
	sdk.Transport
	sdk.EventSource
}

// brokenFactory starts agents of inner (nil: in-process fakes) broken in
// mode.
func brokenFactory(mode string, inner conformance.Factory) conformance.Factory {
	if inner == nil {
		inner = func(context.Context) (conformance.Agent, error) { return conformance.Agent{Transport: fake.New()}, nil }
	}
	p := 1.0
	if name, prob, ok := strings.Cut(mode, ":"); ok {
		f, err := strconv.ParseFloat(prob, 64)
		if err != nil || f <= 0 || f > 1 {
			panic("broken: mode " + mode + ": want NAME:P with P in (0, 1]")
		}
		mode, p = name, f
	}
	return func(ctx context.Context) (conformance.Agent, error) {
		ag, err := inner(ctx)
		if err != nil {
			return ag, err
		}
		ag.Transport = &broken{transport: ag.Transport.(transport), mode: mode, p: p, salt: rand.Uint64(),
			canceled: map[sdk.HandleID]bool{}, polled: map[sdk.HandleID]bool{},
			live: map[sdk.HandleID]bool{}, dlistPeer: map[sdk.DlistID]sdk.PeerID{},
			postNote: map[sdk.HandleID]sdk.OutboundNotification{}, peerIn: map[sdk.PeerID]sdk.PeerID{}}
		return ag, nil
	}
}

// breaks reports whether the break happens at this occasion: always, or
// with probability p.
func (b *broken) breaks() bool { return b.p >= 1 || rand.Float64() < b.p }

// breaksFor is breaks decided once for handle id, so that every Poll of
// it tells the same story.
func (b *broken) breaksFor(id sdk.HandleID) bool {
	if b.p >= 1 {
		return true
	}
	x := (uint64(id) ^ b.salt) * 0x9e3779b97f4a7c15
	x ^= x >> 29
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 32
	return float64(x>>11)/(1<<53) < b.p
}

// lieBase is where the ids broken makes up start.
const lieBase = 1 << 62

func (b *broken) Describe(ctx context.Context) (sdk.Description, error) {
	d, err := b.transport.Describe(ctx)
	switch b.mode {
	case "describe-inconsistent":
		if b.breaks() {
			d.Capabilities.Cancel = false
		}
	case "limit-unenforced":
		d.Limits.MaxItemsPerCall = 8
	case "fence-incoming-lie":
		d.FenceScope = sdk.FenceInitiatedAndIncoming // run with fence=initiated: a lie
	}
	return d, err
}

func (b *broken) Poll(ctx context.Context, ids []sdk.HandleID) ([]sdk.HandleStatus, error) {
	if b.mode == "limit-unenforced" && len(ids) > 8 && !b.breaks() {
		return nil, sdk.Errorf(sdk.CodeInvalidArgument, "broken: %d ids, over MaxItemsPerCall 8", len(ids))
	}
	st, err := b.transport.Poll(ctx, ids)
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range st {
		switch {
		case b.mode == "poll-error-with-state" && st[i].Err != nil:
			st[i].State = sdk.StateDone
		case b.mode == "cancel-frees" && b.canceled[ids[i]] && !b.polled[ids[i]]:
			b.polled[ids[i]] = true
			st[i] = sdk.HandleStatus{Err: sdk.Errorf(sdk.CodeNotFound, "broken: handle %d freed by Cancel", ids[i])}
		case b.mode == "disconnect-as-backend" && st[i].Err == nil && errors.Is(st[i].Reason, sdk.ErrRemoteDisconnect) && b.breaksFor(ids[i]):
			st[i].Reason = sdk.Errorf(sdk.CodeBackend, "broken: peer gone")
		case b.mode == "canceled-early" && b.canceled[ids[i]] && st[i].Err == nil && !st[i].State.Terminal():
			st[i] = sdk.HandleStatus{State: sdk.StateCanceled, Reason: sdk.ErrCanceled}
		case b.mode == "disconnect-as-done" && st[i].Err == nil && st[i].State == sdk.StateFailed && errors.Is(st[i].Reason, sdk.ErrRemoteDisconnect) && b.breaksFor(ids[i]):
			st[i] = sdk.HandleStatus{State: sdk.StateDone}
		}
	}
	return st, err
}

func (b *broken) Cancel(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	b.mu.Lock()
	var notes []sdk.OutboundNotification
	for _, id := range ids {
		b.canceled[id] = true
		if n, ok := b.postNote[id]; ok {
			notes = append(notes, n)
			delete(b.postNote, id)
		}
	}
	b.mu.Unlock()
	if b.mode == "notify-canceled" && len(notes) > 0 {
		// Delivers the notification of a post it was asked to stop.
		if _, err := b.transport.SendNotifications(ctx, notes); err != nil {
			return nil, err
		}
	}
	if b.mode == "canceled-early" {
		return make([]error, len(ids)), nil // pretends; bytes keep moving
	}
	return b.transport.Cancel(ctx, ids)
}

func (b *broken) Release(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	if b.mode == "canceled-early" || b.mode == "release-waits" && b.breaks() {
		// canceled-early said CANCELED: make that true before releasing;
		// release-waits waits for running transfers, which Release must
		// never do.
		b.settle(ctx, ids)
	}
	errs, err := b.transport.Release(ctx, ids)
	b.mu.Lock()
	for i := range errs {
		if errs[i] == nil && err == nil {
			delete(b.live, ids[i])
			b.released = append(b.released, ids[i])
		}
	}
	b.mu.Unlock()
	if b.mode == "release-unknown-ok" {
		for i := range errs {
			if errors.Is(errs[i], sdk.ErrNotFound) {
				errs[i] = nil
			}
		}
	}
	return errs, err
}

// settle waits, bounded, until the fake's own state of ids is terminal.
func (b *broken) settle(ctx context.Context, ids []sdk.HandleID) {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		st, err := b.transport.Poll(ctx, ids)
		if err != nil {
			return
		}
		running := false
		for _, s := range st {
			running = running || (s.Err == nil && !s.State.Terminal())
		}
		if !running {
			return
		}
		// Pacing, not synchronisation: the loop ends on the state Poll
		// reads. The wrapper cannot wait on the transport's Wake instead:
		// the check under test waits on that channel, and a wake-up taken
		// here would be one the check never sees.
		time.Sleep(time.Millisecond)
	}
}

func (b *broken) Post(ctx context.Context, posts []sdk.PostSpec) ([]sdk.PostResult, error) {
	res, err := b.transport.Post(ctx, posts)
	b.mu.Lock()
	for i, r := range res {
		if r.Err == nil && err == nil {
			b.live[r.ID] = true
			if peer, ok := b.dlistPeer[posts[i].Remote]; ok && len(posts[i].Notification) > 0 {
				b.postNote[r.ID] = sdk.OutboundNotification{Peer: peer, Message: posts[i].Notification}
			}
		}
	}
	b.mu.Unlock()
	if b.mode == "post-waits" && err == nil && b.breaks() {
		var ids []sdk.HandleID
		for _, r := range res {
			if r.Err == nil {
				ids = append(ids, r.ID)
			}
		}
		b.settle(ctx, ids)
	}
	return res, err
}

func (b *broken) Notifications(ctx context.Context, max int) ([]sdk.Notification, error) {
	ns, err := b.transport.Notifications(ctx, max)
	if b.mode == "notify-twice" {
		ns = double(b, ns)
	}
	return ns, err
}

func (b *broken) Events(ctx context.Context, max int) ([]sdk.Event, error) {
	if b.mode == "events-over-max" && b.breaks() {
		max = 0 // returns every event, however few were asked for
	}
	evs, err := b.transport.Events(ctx, max)
	if b.mode == "events-twice" {
		evs = double(b, evs)
	}
	return evs, err
}

// double repeats each of xs, or, under NAME:P, each with probability P.
func double[X any](b *broken, xs []X) []X {
	var out []X
	for _, x := range xs {
		out = append(out, x)
		if b.breaks() {
			out = append(out, x)
		}
	}
	return out
}

func (b *broken) LoadPeers(ctx context.Context, peers []sdk.PeerSpec) ([]sdk.PeerResult, error) {
	res, err := b.transport.LoadPeers(ctx, peers)
	if b.mode == "ids-across-kinds" {
		// Names a new peer by a released handle's id: an id of another
		// kind, reused.
		b.mu.Lock()
		for i := range res {
			if res[i].Err == nil && len(b.released) > 0 {
				out := sdk.PeerID(b.released[0])
				b.released = b.released[1:]
				b.peerIn[out] = res[i].ID
				res[i].ID = out
			}
		}
		b.mu.Unlock()
	}
	if b.mode == "garbage-metadata-ok" {
		for i := range res {
			if errors.Is(res[i].Err, sdk.ErrInvalidArgument) {
				res[i] = sdk.PeerResult{ID: sdk.PeerID(lieBase + i)}
			}
		}
	}
	return res, err
}

func (b *broken) UnloadPeers(ctx context.Context, ids []sdk.PeerID) ([]error, error) {
	ids = b.peersIn(ids)
	errs, err := b.transport.UnloadPeers(ctx, ids)
	b.mu.Lock()
	noHandle := len(b.live) == 0
	b.mu.Unlock()
	for i := range errs {
		if b.mode == "garbage-metadata-ok" && ids[i] >= lieBase {
			errs[i] = nil // one it made up
		}
		if b.mode == "busy-needs-handle" && noHandle && errors.Is(errs[i], sdk.ErrBusy) && b.breaks() {
			errs[i] = nil // pretends: only a handle would keep the peer
		}
	}
	return errs, err
}

// peersIn maps the peer ids ids-across-kinds made up to the fake's.
func (b *broken) peersIn(ids []sdk.PeerID) []sdk.PeerID {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]sdk.PeerID, len(ids))
	for i, id := range ids {
		out[i] = id
		if in, ok := b.peerIn[id]; ok {
			out[i] = in
		}
	}
	return out
}

func (b *broken) PrepareDescriptors(ctx context.Context, specs []sdk.DlistSpec) ([]sdk.DlistResult, error) {
	in := make([]sdk.DlistSpec, len(specs))
	for i, s := range specs {
		in[i] = s
		in[i].Peer = b.peersIn([]sdk.PeerID{s.Peer})[0]
	}
	res, err := b.transport.PrepareDescriptors(ctx, in)
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, r := range res {
		if r.Err == nil && in[i].Peer != 0 {
			b.dlistPeer[r.ID] = in[i].Peer
		}
	}
	return res, err
}

func (b *broken) SendNotifications(ctx context.Context, msgs []sdk.OutboundNotification) ([]error, error) {
	in := make([]sdk.OutboundNotification, len(msgs))
	for i, m := range msgs {
		in[i] = m
		in[i].Peer = b.peersIn([]sdk.PeerID{m.Peer})[0]
	}
	return b.transport.SendNotifications(ctx, in)
}

func (b *broken) DeregisterMemory(ctx context.Context, ids []sdk.RegionID) ([]error, error) {
	errs, err := b.transport.DeregisterMemory(ctx, ids)
	b.mu.Lock()
	noHandle := len(b.live) == 0
	b.mu.Unlock()
	for i := range errs {
		if errors.Is(errs[i], sdk.ErrBusy) && (b.mode == "deregister-busy-ok" || b.mode == "busy-needs-handle" && noHandle) && b.breaks() {
			errs[i] = nil // pretends
		}
	}
	return errs, err
}

func (b *broken) Resources(ctx context.Context) (sdk.Resources, error) {
	r, err := b.transport.Resources(ctx)
	if b.mode == "resources-leak" && b.breaks() {
		r.Handles++
	}
	return r, err
}
