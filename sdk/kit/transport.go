package kit

import (
	"context"
	"errors"
	"sync"

	"github.com/custody-dev/custody/sdk"
)

// Backend is what a transport author writes when the kit's Transport does
// the bookkeeping: the native work alone. The Transport calls its methods
// one at a time (under one lock), only while the agent is open (but
// Describe and Open), and only with arguments the Book already checked:
// ids are known, pins allow the change, descriptors lie inside their
// regions. An error a method returns is that item's (an *sdk.Error with
// the code the contract's table gives; any other error is BACKEND), and
// the item then changes nothing.
//
// R is the backend's value for a registered region, P for a loaded peer.
type Backend[R, P any] interface {
	// Describe says who the transport is and what it promises. It is
	// called once, by New: the Book enforces its Limits.
	Describe() sdk.Description
	// Open starts the agent. An unknown or malformed parameter is
	// INVALID_ARGUMENT. r is how the backend reports completions and
	// received notifications, from any goroutine, at any time until Close.
	Open(agent string, params map[string]string, r Reporter) error
	// Close ends the agent; nothing is held any more. It stops every
	// goroutine the backend started.
	Close() error

	// Register maps and registers a region (path, offset and length
	// already checked for emptiness and overflow).
	Register(spec sdk.Region) (R, error)
	// Deregister undoes Register; no dlist uses the region any more.
	Deregister(r *Region[R]) error
	// Metadata is the blob a peer's LoadPeer reads: it names this agent
	// and each registered region with its length (regions in id order).
	Metadata(agent string, regions []*Region[R]) ([]byte, error)
	// LoadPeer decodes a peer's metadata and reaches it. Garbage is
	// INVALID_ARGUMENT, a peer that is gone REMOTE_DISCONNECT. name is
	// PeerSpec.Name, already non-empty.
	LoadPeer(name string, metadata []byte) (Loaded[P], error)
	// UnloadPeer releases a peer; no dlist references it any more.
	UnloadPeer(p *Peer[P]) error

	// Start begins moving a transfer's bytes and returns at once; it must
	// not wait for them. Later, from any goroutine, the backend reports
	// the transfer's end exactly once with Reporter.Complete: DONE once
	// every byte is in place at the destination (a post's notification is
	// the backend's to send first), FAILED or CANCELED once no byte moves
	// any more. stop, when not nil, is what Cancel calls to ask the
	// transfer to stop (CancelEffect stops); it must not block. When Start
	// fails (a lost peer: REMOTE_DISCONNECT) nothing was started and
	// nothing is reported.
	Start(x *Transfer[R, P]) (stop func(), err error)
	// Send sends a notification to a loaded peer. The message is within
	// Limits.MaxNotificationBytes.
	Send(p *Peer[P], msg []byte) error
}

// Transfer is a checked transfer for Backend.Start.
type Transfer[R, P any] = Handle[R, P, struct{}, func()]

// Reporter takes a backend's reports. Its methods never block and may be
// called from any goroutine, a backend method included; they take effect
// at the Transport's next call.
type Reporter interface {
	// Complete reports that a transfer ended: DONE, FAILED or CANCELED,
	// with the reason of a FAILED or CANCELED one. Only the first report
	// of a handle counts.
	Complete(id sdk.HandleID, state sdk.State, reason error)
	// Deliver hands over a notification received from the agent named
	// from (the sender's name from its Open).
	Deliver(from string, msg []byte)
}

// Transport implements sdk.Transport, sdk.EventSource and sdk.Waker
// around a Backend: it checks every argument, keeps the tables, pins,
// handle states, events and inbox in a Book, and calls the backend only
// for native work. It is safe for concurrent use.
type Transport[R, P any] struct {
	b    Backend[R, P]
	desc sdk.Description
	wake chan struct{}

	mu   sync.Mutex
	book *Book[R, P, struct{}, func()]

	repMu   sync.Mutex // guards what reports wait to apply
	done    []report
	arrived []sdk.Notification
}

type report struct {
	id     sdk.HandleID
	state  sdk.State
	reason error
}

var (
	_ sdk.Transport   = (*Transport[int, int])(nil)
	_ sdk.EventSource = (*Transport[int, int])(nil)
	_ sdk.Waker       = (*Transport[int, int])(nil)
)

// New wraps a backend in a Transport that is not open yet.
func New[R, P any](b Backend[R, P]) *Transport[R, P] {
	d := b.Describe()
	if d.ContractMajor == 0 {
		d.ContractMajor, d.ContractMinor = sdk.ContractMajor, sdk.ContractMinor
	}
	return &Transport[R, P]{b: b, desc: d, wake: make(chan struct{}, 1), book: NewBook[R, P, struct{}, func()](d.Name, d.Limits)}
}

// Describe returns the backend's description.
func (t *Transport[R, P]) Describe(ctx context.Context) (sdk.Description, error) {
	if err := ContextError(ctx, t.desc.Name); err != nil {
		return sdk.Description{}, err
	}
	return t.desc, nil
}

// Open starts the agent once (see Book.Open), then the backend.
func (t *Transport[R, P]) Open(ctx context.Context, req sdk.OpenRequest) error {
	if err := ContextError(ctx, t.desc.Name); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.book.Open(req.Agent, func() error { return t.b.Open(req.Agent, req.Params, (*reporter[R, P])(t)) })
}

// Close ends the agent: BUSY while anything is held (see Book.Close).
func (t *Transport[R, P]) Close(ctx context.Context) error {
	if err := ContextError(ctx, t.desc.Name); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	_, err := t.book.Close(t.b.Close)
	return err
}

// call starts a call of an open agent with n items: it checks the
// context, takes the lock, applies pending reports and checks the gate and
// MaxItemsPerCall. On nil the caller holds t.mu.
func (t *Transport[R, P]) call(ctx context.Context, name string, n int) error {
	if err := ContextError(ctx, t.desc.Name); err != nil {
		return err
	}
	t.mu.Lock()
	t.apply()
	err := t.book.Check()
	if err == nil {
		err = t.book.Items(name, n)
	}
	if err != nil {
		t.mu.Unlock()
	}
	return err
}

// each runs f for n items under the lock and collects their results.
func each[R, P, T any](t *Transport[R, P], ctx context.Context, name string, n int, f func(i int) T) ([]T, error) {
	if err := t.call(ctx, name, n); err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	out := make([]T, n)
	for i := range out {
		out[i] = f(i)
	}
	return out, nil
}

// RegisterMemory registers regions through Backend.Register.
func (t *Transport[R, P]) RegisterMemory(ctx context.Context, regions []sdk.Region) ([]sdk.Registration, error) {
	return each(t, ctx, "RegisterMemory", len(regions), func(i int) sdk.Registration {
		id, err := t.book.Register(regions[i], func() (R, error) { return t.b.Register(regions[i]) })
		return sdk.Registration{ID: id, Err: err}
	})
}

// DeregisterMemory deregisters regions: BUSY while a dlist uses one.
func (t *Transport[R, P]) DeregisterMemory(ctx context.Context, ids []sdk.RegionID) ([]error, error) {
	return each(t, ctx, "DeregisterMemory", len(ids), func(i int) error {
		return t.book.Deregister(ids[i], t.b.Deregister)
	})
}

// LocalMetadata returns Backend.Metadata; a blob over
// Limits.MaxMetadataBytes is BACKEND.
func (t *Transport[R, P]) LocalMetadata(ctx context.Context) ([]byte, error) {
	if err := t.call(ctx, "LocalMetadata", 0); err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	blob, err := t.b.Metadata(t.book.Agent(), t.book.Regions())
	if err != nil {
		return nil, err
	}
	if max := t.desc.Limits.MaxMetadataBytes; max > 0 && len(blob) > int(max) {
		return nil, sdk.Errorf(sdk.CodeBackend, "%s: LocalMetadata: %d bytes exceed the limit of %d; register fewer regions", t.desc.Name, len(blob), max)
	}
	return blob, nil
}

// LoadPeers loads peers through Backend.LoadPeer.
func (t *Transport[R, P]) LoadPeers(ctx context.Context, peers []sdk.PeerSpec) ([]sdk.PeerResult, error) {
	return each(t, ctx, "LoadPeers", len(peers), func(i int) sdk.PeerResult {
		s := peers[i]
		id, err := t.book.LoadPeer(s, func() (Loaded[P], error) { return t.b.LoadPeer(s.Name, s.Metadata) })
		return sdk.PeerResult{ID: id, Err: err}
	})
}

// UnloadPeers unloads peers: BUSY while a dlist references one.
func (t *Transport[R, P]) UnloadPeers(ctx context.Context, ids []sdk.PeerID) ([]error, error) {
	return each(t, ctx, "UnloadPeers", len(ids), func(i int) error {
		return t.book.UnloadPeer(ids[i], t.b.UnloadPeer)
	})
}

// PrepareDescriptors prepares dlists; the Book checks them, the backend
// has nothing to do.
func (t *Transport[R, P]) PrepareDescriptors(ctx context.Context, lists []sdk.DlistSpec) ([]sdk.DlistResult, error) {
	return each(t, ctx, "PrepareDescriptors", len(lists), func(i int) sdk.DlistResult {
		id, err := t.book.Prepare(lists[i], nil)
		return sdk.DlistResult{ID: id, Err: err}
	})
}

// ReleaseDescriptors releases dlists: BUSY while a handle uses one.
func (t *Transport[R, P]) ReleaseDescriptors(ctx context.Context, ids []sdk.DlistID) ([]error, error) {
	return each(t, ctx, "ReleaseDescriptors", len(ids), func(i int) error {
		return t.book.ReleaseDlist(ids[i], nil)
	})
}

// Post checks each transfer and starts it with Backend.Start.
func (t *Transport[R, P]) Post(ctx context.Context, posts []sdk.PostSpec) ([]sdk.PostResult, error) {
	return each(t, ctx, "Post", len(posts), func(i int) sdk.PostResult {
		id, err := t.book.Post(posts[i], func(x *Transfer[R, P]) (err error) {
			x.Value, err = t.b.Start(x)
			return err
		})
		return sdk.PostResult{ID: id, Err: err}
	})
}

// Poll reports each handle's state.
func (t *Transport[R, P]) Poll(ctx context.Context, ids []sdk.HandleID) ([]sdk.HandleStatus, error) {
	return each(t, ctx, "Poll", len(ids), func(i int) sdk.HandleStatus { return t.book.Poll(ids[i]) })
}

// Cancel calls the stop function Start returned for each running handle;
// it frees nothing.
func (t *Transport[R, P]) Cancel(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	stop := func(x *Transfer[R, P]) {
		if x.Value != nil {
			x.Value()
		}
	}
	return each(t, ctx, "Cancel", len(ids), func(i int) error { return t.book.Cancel(ids[i], stop) })
}

// Release frees terminal handles: BUSY while one is running.
func (t *Transport[R, P]) Release(ctx context.Context, ids []sdk.HandleID) ([]error, error) {
	return each(t, ctx, "Release", len(ids), func(i int) error { return t.book.Release(ids[i], nil) })
}

// SendNotifications sends each message with Backend.Send.
func (t *Transport[R, P]) SendNotifications(ctx context.Context, msgs []sdk.OutboundNotification) ([]error, error) {
	return each(t, ctx, "SendNotifications", len(msgs), func(i int) error {
		p, err := t.book.CheckSend(msgs[i])
		if err != nil {
			return err
		}
		return t.b.Send(p, msgs[i].Message)
	})
}

// Notifications drains received messages.
func (t *Transport[R, P]) Notifications(ctx context.Context, max int) ([]sdk.Notification, error) {
	if err := t.call(ctx, "Notifications", 0); err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	return t.book.Notifications(max), nil
}

// Events drains state changes: each handle's turn to terminal, once.
func (t *Transport[R, P]) Events(ctx context.Context, max int) ([]sdk.Event, error) {
	if err := t.call(ctx, "Events", 0); err != nil {
		return nil, err
	}
	defer t.mu.Unlock()
	return t.book.Events(max), nil
}

// Resources counts what the agent holds; zero before Open and after Close.
func (t *Transport[R, P]) Resources(ctx context.Context) (sdk.Resources, error) {
	if err := ContextError(ctx, t.desc.Name); err != nil {
		return sdk.Resources{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.apply()
	return t.book.Resources(), nil
}

// Wake signals whenever a report arrived.
func (t *Transport[R, P]) Wake() <-chan struct{} { return t.wake }

// apply moves waiting reports into the Book. The caller holds t.mu.
func (t *Transport[R, P]) apply() {
	t.repMu.Lock()
	done, arrived := t.done, t.arrived
	t.done, t.arrived = nil, nil
	t.repMu.Unlock()
	for _, r := range done {
		if h, err := t.book.Handle("Complete", r.id); err == nil {
			t.book.Complete(h, r.state, r.reason)
		}
	}
	for _, n := range arrived {
		t.book.Deliver(n.From, n.Message)
	}
}

// reporter is the Transport seen as the backend's Reporter.
type reporter[R, P any] Transport[R, P]

func (r *reporter[R, P]) Complete(id sdk.HandleID, state sdk.State, reason error) {
	r.repMu.Lock()
	r.done = append(r.done, report{id, state, reason})
	r.repMu.Unlock()
	r.signal()
}

func (r *reporter[R, P]) Deliver(from string, msg []byte) {
	r.repMu.Lock()
	r.arrived = append(r.arrived, sdk.Notification{From: from, Message: msg})
	r.repMu.Unlock()
	r.signal()
}

func (r *reporter[R, P]) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// ContextError is the error of a call whose context ended before it
// started, or nil while ctx is live: TIMEOUT for a passed deadline,
// CANCELED otherwise; nothing changed. name opens the message.
func ContextError(ctx context.Context, name string) error {
	switch err := ctx.Err(); {
	case err == nil:
		return nil
	case errors.Is(err, context.DeadlineExceeded):
		return sdk.Errorf(sdk.CodeTimeout, "%s: deadline passed before the call started; nothing changed", name)
	}
	return sdk.Errorf(sdk.CodeCanceled, "%s: context canceled before the call started; nothing changed", name)
}
