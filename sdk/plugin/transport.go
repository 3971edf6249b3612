package plugin

import (
	"context"

	"github.com/custody-dev/custody/sdk"
)

// This file is Plugin's side of the contract: every method of
// sdk.Transport, sdk.EventSource and sdk.Waker, and of the rings' fast
// paths (RingReporter, LocalAnswerer), and which way each call crosses to
// the process. Until Open has
// attached the rings, after Close has detached them, and whenever the
// transport refused them or LaunchOptions.DisableRings holds, every call
// crosses over gRPC (grpcClient). While they are attached (p.rings), Post,
// Release and SendNotifications cross through them, and Poll, Events and
// Notifications answer from what the completion ring brought; each is
// handed the same call over gRPC for what the rings cannot carry (a batch
// too large for a submission, an id they do not know). Every other call
// crosses over gRPC.

var (
	_ sdk.Transport   = (*Plugin)(nil)
	_ sdk.EventSource = (*Plugin)(nil)
	_ sdk.Waker       = (*Plugin)(nil)
	_ RingReporter    = (*Plugin)(nil)
	_ LocalAnswerer   = (*Plugin)(nil)
)

// RingReporter is implemented by a transport process whose hot path may
// cross shared-memory rings (Plugin). A host asks it, by type assertion,
// before it relies on the process's Waker.
type RingReporter interface {
	// Rings reports whether Post, Release and completions go through the
	// rings now. While false every call crosses over gRPC and the
	// process's Waker only ticks (every fallbackWakeEvery), so a host
	// polls while work is in flight instead of waking on it. A transport
	// that does not implement RingReporter has no rings and keeps its own
	// Waker.
	Rings() bool
}

// LocalAnswerer is implemented by a transport process that can answer some
// calls at once, in the host's own process, from what its rings already
// brought (Plugin): they never wait on the process, so a host may make
// them on its own goroutine. ok false means the call was not made and
// nothing was taken; the ordinary call (Events, Notifications, Release)
// gives the answer, errors included.
type LocalAnswerer interface {
	EventsNow(max int) ([]sdk.Event, bool)
	NotificationsNow(max int) ([]sdk.Notification, bool)
	ReleaseNow(ids []sdk.HandleID) ([]error, bool)
}

// Describe is Transport.Describe, over gRPC. Description holds what it
// answered at launch.
func (p *Plugin) Describe(ctx context.Context) (sdk.Description, error) {
	return p.grpc.Describe(ctx)
}

// Open is Transport.Open, over gRPC; once it succeeds the rings are
// offered to the plugin (unless LaunchOptions.DisableRings).
func (p *Plugin) Open(ctx context.Context, req sdk.OpenRequest) error {
	if err := p.grpc.Open(ctx, req); err != nil {
		return err
	}
	p.attachRings(ctx)
	return nil
}

// Close is Transport.Close, over gRPC. Once the agent closed, the rings
// are detached and every later call goes over gRPC.
func (p *Plugin) Close(ctx context.Context) error {
	if err := p.grpc.Close(ctx); err != nil {
		return err
	}
	if r := p.rings.Swap(nil); r != nil {
		r.Detach()
	}
	return nil
}

// RegisterMemory is Transport.RegisterMemory, over gRPC.
func (p *Plugin) RegisterMemory(ctx context.Context, regions []sdk.Region) ([]sdk.Registration, error) {
	return p.grpc.RegisterMemory(ctx, regions)
}

// DeregisterMemory is Transport.DeregisterMemory, over gRPC.
func (p *Plugin) DeregisterMemory(ctx context.Context, ids []sdk.RegionID) ([]error, error) {
	return p.grpc.DeregisterMemory(ctx, ids)
}

// LocalMetadata is Transport.LocalMetadata, over gRPC.
func (p *Plugin) LocalMetadata(ctx context.Context) ([]byte, error) {
	return p.grpc.LocalMetadata(ctx)
}

// LoadPeers is Transport.LoadPeers, over gRPC.
func (p *Plugin) LoadPeers(ctx context.Context, peers []sdk.PeerSpec) ([]sdk.PeerResult, error) {
	return p.grpc.LoadPeers(ctx, peers)
}

// UnloadPeers is Transport.UnloadPeers, over gRPC.
func (p *Plugin) UnloadPeers(ctx context.Context, ids []sdk.PeerID) ([]error, error) {
	return p.grpc.UnloadPeers(ctx, ids)
}

// PrepareDescriptors is Transport.PrepareDescriptors, over gRPC.
func (p *Plugin) PrepareDescriptors(ctx context.Context, lists []sdk.DlistSpec) ([]sdk.DlistResult, error) {
	return p.grpc.PrepareDescriptors(ctx, lists)
}

// ReleaseDescriptors is Transport.ReleaseDescriptors, over gRPC.
func (p *Plugin) ReleaseDescriptors(ctx context.Context, ids []sdk.DlistID) ([]error, error) {
	return p.grpc.ReleaseDescriptors(ctx, ids)
}

// Post is Transport.Post: through the rings when attached (a batch too
// large for a submission goes over gRPC), else over gRPC.
func (p *Plugin) Post(ctx context.Context, posts []sdk.PostSpec) ([]sdk.PostResult, error) {
	if r := p.rings.Load(); r != nil {
		return r.Post(ctx, posts, p.grpc.Post)
	}
	return p.grpc.Post(ctx, posts)
}

// Poll is Transport.Poll: when the rings are attached, from the completion
// ring for handles posted through it, over gRPC for any other id; else
// over gRPC.
func (p *Plugin) Poll(ctx context.Context, ids []sdk.HandleID) ([]sdk.HandleStatus, error) {
	if r := p.rings.Load(); r != nil {
		return r.Poll(ctx, ids, p.grpc.Poll)
	}
	return p.grpc.Poll(ctx, ids)
}

// PollTransport is Poll asked of the transport itself, over gRPC, past the
// rings: they answer a terminal handle's Poll from the state the plugin
// reported, so a transport whose terminal state changes later shows it
// only here. The conformance suite's re-checks of terminal states use it
// (conformance.Agent.PollTransport); a host has no use for it.
func (p *Plugin) PollTransport(ctx context.Context, ids []sdk.HandleID) ([]sdk.HandleStatus, error) {
	return p.grpc.Poll(ctx, ids)
}

// Cancel is Transport.Cancel, over gRPC; when the rings are attached under
// release at terminal, a handle the plugin released at terminal is
// answered OK from the rings' record, as the transport answers for a
// terminal handle.
func (p *Plugin) Cancel(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	if r := p.rings.Load(); r != nil {
		return r.Cancel(ctx, ids, p.grpc.Cancel)
	}
	return p.grpc.Cancel(ctx, ids)
}

// Release is Transport.Release: when the rings are attached, a handle the
// plugin released at terminal is answered from the rings' record and the
// others go through the rings (too many for a submission: over gRPC);
// else over gRPC.
func (p *Plugin) Release(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	if r := p.rings.Load(); r != nil {
		return r.Release(ctx, ids, p.grpc.Release)
	}
	return p.grpc.Release(ctx, ids)
}

// SendNotifications is Transport.SendNotifications: through the rings when
// attached (a batch too large for a submission goes over gRPC), else over
// gRPC.
func (p *Plugin) SendNotifications(ctx context.Context, msgs []sdk.OutboundNotification) ([]error, error) {
	if r := p.rings.Load(); r != nil {
		return r.SendNotifications(ctx, msgs, p.grpc.SendNotifications)
	}
	return p.grpc.SendNotifications(ctx, msgs)
}

// Notifications is Transport.Notifications: what the plugin forwarded
// through the rings when attached, else over gRPC.
func (p *Plugin) Notifications(ctx context.Context, max int) ([]sdk.Notification, error) {
	if r := p.rings.Load(); r != nil {
		return r.Notifications(ctx, max)
	}
	return p.grpc.Notifications(ctx, max)
}

// Resources is Transport.Resources, over gRPC.
func (p *Plugin) Resources(ctx context.Context) (sdk.Resources, error) {
	return p.grpc.Resources(ctx)
}

// Events is EventSource.Events when the transport claims events in
// Describe (HasEvents): what the plugin forwarded through the rings when
// they are attached and carry events, else over gRPC. Otherwise it returns
// an error matching ErrUnsupported without crossing to the process. Once
// the process is gone it returns ErrPluginShutdown, like every call.
func (p *Plugin) Events(ctx context.Context, max int) ([]sdk.Event, error) {
	if p.grpc.done.Err() != nil {
		return nil, p.grpc.shutdown("Events")
	}
	if !p.HasEvents() {
		return nil, sdk.Errorf(sdk.CodeUnsupported, "Events: %s does not claim events in Describe; poll every live handle instead", p.grpc.name)
	}
	if r := p.rings.Load(); r != nil && r.ForwardsEvents() {
		return r.Events(ctx, max)
	}
	return p.grpc.Events(ctx, max)
}

// Wake is sdk.Waker. With rings, it receives a value whenever the
// completion ring brought a state change, an event or a notification; the
// plugin drains the transport's notifications at once when the transport
// is itself a Waker, else every 50 µs while busy and at least every 100 ms
// when idle. Without rings (off or refused) it receives one every
// fallbackWakeEvery, since the host can learn nothing by itself then;
// before Open, and after Close, there is nothing to wake for.
func (p *Plugin) Wake() <-chan struct{} {
	p.startFallbackTicker()
	return p.wake
}

// Rings is RingReporter.Rings: whether Post, Release and completions go
// through the shared-memory rings now (false: over gRPC).
func (p *Plugin) Rings() bool { return p.rings.Load() != nil }

// ReleasesAtTerminal reports whether the rings are attached and run release
// at terminal (LaunchOptions.ReleaseTerminal, taken by the plugin).
func (p *Plugin) ReleasesAtTerminal() bool {
	r := p.rings.Load()
	return r != nil && r.ReleasesAtTerminal()
}

// The calls below are LocalAnswerer: they answer, at once and in the
// caller's process, what the completion ring already brought. A host runs
// them on its own goroutine instead of handing them to the one that makes
// transport calls, which saves two goroutine hand-offs per call. ok is
// false when the call would have to ask the plugin (no rings, rings that
// are not prompt, a handle not released at terminal) or when the rings are
// broken or the process gone.

// EventsNow is Events from the completion ring, when the transport claims
// events and is a Waker (prompt rings): nothing is asked of the plugin.
func (p *Plugin) EventsNow(max int) ([]sdk.Event, bool) {
	if r := p.rings.Load(); r != nil && p.HasEvents() {
		return r.EventsNow(max)
	}
	return nil, false
}

// NotificationsNow is Notifications from the completion ring, when the
// transport is a Waker (prompt rings).
func (p *Plugin) NotificationsNow(max int) ([]sdk.Notification, bool) {
	if r := p.rings.Load(); r != nil {
		return r.NotificationsNow(max)
	}
	return nil, false
}

// ReleaseNow is Release when the plugin released every one of ids at
// terminal (LaunchOptions.ReleaseTerminal), each once: every item is OK.
func (p *Plugin) ReleaseNow(ids []sdk.HandleID) ([]error, bool) {
	if r := p.rings.Load(); r != nil {
		return r.ReleaseNow(ids)
	}
	return nil, false
}
