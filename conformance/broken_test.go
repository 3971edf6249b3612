package conformance_test

import (
	"context"
	"errors"
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

	mu       sync.Mutex
	canceled map[sdk.HandleID]bool
	polled   map[sdk.HandleID]bool
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
	return func(ctx context.Context) (conformance.Agent, error) {
		ag, err := inner(ctx)
		if err != nil {
			return ag, err
		}
		ag.Transport = &broken{transport: ag.Transport.(transport), mode: mode,
			canceled: map[sdk.HandleID]bool{}, polled: map[sdk.HandleID]bool{}}
		return ag, nil
	}
}

// lieBase is where the ids broken makes up start.
const lieBase = 1 << 62

func (b *broken) Describe(ctx context.Context) (sdk.Description, error) {
	d, err := b.transport.Describe(ctx)
	switch b.mode {
	case "describe-inconsistent":
		d.Capabilities.Cancel = false
	case "limit-unenforced":
		d.Limits.MaxItemsPerCall = 8
	}
	return d, err
}

func (b *broken) Poll(ctx context.Context, ids []sdk.HandleID) ([]sdk.HandleStatus, error) {
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
		case b.mode == "disconnect-as-backend" && st[i].Err == nil && errors.Is(st[i].Reason, sdk.ErrRemoteDisconnect):
			st[i].Reason = sdk.Errorf(sdk.CodeBackend, "broken: peer gone")
		case b.mode == "canceled-early" && b.canceled[ids[i]] && st[i].Err == nil && !st[i].State.Terminal():
			st[i] = sdk.HandleStatus{State: sdk.StateCanceled, Reason: sdk.ErrCanceled}
		}
	}
	return st, err
}

func (b *broken) Cancel(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	b.mu.Lock()
	for _, id := range ids {
		b.canceled[id] = true
	}
	b.mu.Unlock()
	if b.mode == "canceled-early" {
		return make([]error, len(ids)), nil // pretends; bytes keep moving
	}
	return b.transport.Cancel(ctx, ids)
}

func (b *broken) Release(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	if b.mode == "canceled-early" {
		b.settle(ctx, ids) // it said CANCELED: make that true before releasing
	}
	errs, err := b.transport.Release(ctx, ids)
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
		time.Sleep(time.Millisecond) // paces a bounded poll loop
	}
}

func (b *broken) Post(ctx context.Context, posts []sdk.PostSpec) ([]sdk.PostResult, error) {
	res, err := b.transport.Post(ctx, posts)
	if b.mode == "post-waits" && err == nil {
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
		ns = double(ns)
	}
	return ns, err
}

func (b *broken) Events(ctx context.Context, max int) ([]sdk.Event, error) {
	evs, err := b.transport.Events(ctx, max)
	if b.mode == "events-twice" {
		evs = double(evs)
	}
	return evs, err
}

func double[X any](xs []X) []X {
	var out []X
	for _, x := range xs {
		out = append(out, x, x)
	}
	return out
}

func (b *broken) LoadPeers(ctx context.Context, peers []sdk.PeerSpec) ([]sdk.PeerResult, error) {
	res, err := b.transport.LoadPeers(ctx, peers)
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
	errs, err := b.transport.UnloadPeers(ctx, ids)
	for i := range errs {
		if b.mode == "garbage-metadata-ok" && ids[i] >= lieBase {
			errs[i] = nil // one it made up
		}
	}
	return errs, err
}

func (b *broken) DeregisterMemory(ctx context.Context, ids []sdk.RegionID) ([]error, error) {
	errs, err := b.transport.DeregisterMemory(ctx, ids)
	if b.mode == "deregister-busy-ok" {
		for i := range errs {
			if errors.Is(errs[i], sdk.ErrBusy) {
				errs[i] = nil
			}
		}
	}
	return errs, err
}

func (b *broken) Resources(ctx context.Context) (sdk.Resources, error) {
	r, err := b.transport.Resources(ctx)
	if b.mode == "resources-leak" {
		r.Handles++
	}
	return r, err
}
