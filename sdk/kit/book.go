package kit

import (
	"slices"

	"github.com/custody-dev/custody/sdk"
)

// Lifecycle states of a Book's agent.
const (
	stateNew = iota
	stateOpen
	stateClosed
)

// Book is the contract's bookkeeping for one agent: the tables of regions,
// peers, dlists and handles, the pins that make teardown BUSY while a
// resource is in use, the handle state machine, the event queue, the
// notification inbox, the Open/Close gate and the limit checks. It calls
// no backend: each method that would change something takes a callback
// that does the native work, and records the change only when the
// callback succeeded, so a refused or failed item changes nothing.
//
// R, P, D and H are the transport's own values for a region, a peer, a
// dlist and a handle (a mapping, an endpoint, resolved addresses and
// keys, a native request); the Book keeps them and hands them back. A
// transport that keeps nothing of a kind uses struct{}. They are type
// parameters, not attachments of type any, so that a transport reads its
// values back without a type assertion on its hot path, and a wrong type
// is a compile error rather than a panic.
//
// A Book is not safe for concurrent use: its owner serialises every call,
// with a mutex (the fake) or by owning it on one goroutine (a transport
// whose native library is single-threaded). Callbacks run inside the
// call, so they must not call the Book.
type Book[R, P, D, H any] struct {
	name      string
	limits    sdk.Limits
	misbehave Misbehave

	state int
	agent string

	regions map[sdk.RegionID]*Region[R]
	peers   map[sdk.PeerID]*Peer[P]
	dlists  map[sdk.DlistID]*Dlist[R, P, D]
	handles map[sdk.HandleID]*Handle[R, P, D, H]
	running int // posted transfers not reported terminal yet, released or not (InFlight)

	events []sdk.Event
	inbox  []sdk.Notification
}

// NewBook returns the bookkeeping of an agent that is not open yet. name
// opens every error message ("fake", "memcopy"); limits are the Limits the
// transport's Describe states, which the Book enforces.
func NewBook[R, P, D, H any](name string, limits sdk.Limits) *Book[R, P, D, H] {
	return &Book[R, P, D, H]{
		name:    name,
		limits:  limits,
		regions: map[sdk.RegionID]*Region[R]{},
		peers:   map[sdk.PeerID]*Peer[P]{},
		dlists:  map[sdk.DlistID]*Dlist[R, P, D]{},
		handles: map[sdk.HandleID]*Handle[R, P, D, H]{},
	}
}

// Misbehave lists the contract rules a Book lets its owner break on
// purpose. It exists so that a simulator (the fake's misbehave modes) can
// prove that the conformance suite catches each violation; a transport
// that means to be correct never sets it.
type Misbehave struct {
	// ReleaseRunning makes Release free a handle that is not terminal. Its
	// transfer keeps running and counts in Resources.InFlight until the
	// transport reports its end with Complete, which queues no event.
	ReleaseRunning bool
	// HandleID, when set, is asked for each new handle's id; when it
	// returns false the process counter gives the id as usual. It may
	// return an id that was used before.
	HandleID func() (sdk.HandleID, bool)
}

// SetMisbehave installs deliberate contract violations; see Misbehave.
func (b *Book[R, P, D, H]) SetMisbehave(m Misbehave) { b.misbehave = m }

// Limits returns the limits the Book enforces.
func (b *Book[R, P, D, H]) Limits() sdk.Limits { return b.limits }

// Open opens the gate: an agent opens once, with a non-empty name. start
// does the transport's own setup; when it fails the agent stays unopened
// and its error is Open's. A second Open, or one after Close, is
// INVALID_ARGUMENT.
func (b *Book[R, P, D, H]) Open(agent string, start func() error) error {
	if b.state != stateNew {
		return b.errorf(sdk.CodeInvalidArgument, "Open: agent %q was opened before; an agent opens once, make a new one", b.agent)
	}
	if agent == "" {
		return b.errorf(sdk.CodeInvalidArgument, "Open: agent name is empty; name the agent")
	}
	if start != nil {
		if err := start(); err != nil {
			return err
		}
	}
	b.state, b.agent = stateOpen, agent
	return nil
}

// Check returns the error of any call but Open, Close, Describe and
// Resources (which counts nothing then) made while the agent is not open:
// INVALID_ARGUMENT before Open and after Close. It returns nil while the
// agent is open.
func (b *Book[R, P, D, H]) Check() error {
	switch b.state {
	case stateNew:
		return b.errorf(sdk.CodeInvalidArgument, "agent is not open; call Open first")
	case stateClosed:
		return b.errorf(sdk.CodeInvalidArgument, "agent %q is closed; make a new one", b.agent)
	}
	return nil
}

// Close closes the gate. It is INVALID_ARGUMENT before Open; BUSY, changing
// nothing, while any region, peer, dlist or handle is held; OK and a no-op
// once closed. end does the transport's own teardown; when it fails the
// agent stays open and its error is Close's. Close reports whether this
// call closed the agent.
func (b *Book[R, P, D, H]) Close(end func() error) (closed bool, err error) {
	switch b.state {
	case stateNew:
		return false, b.errorf(sdk.CodeInvalidArgument, "Close: agent is not open; call Open first")
	case stateClosed:
		return false, nil
	}
	if r := b.Resources(); r.Regions+r.Peers+r.Dlists+r.Handles > 0 {
		return false, b.errorf(sdk.CodeBusy, "Close of agent %q: still held: %d regions, %d peers, %d dlists, %d handles; release them first", b.agent, r.Regions, r.Peers, r.Dlists, r.Handles)
	}
	if end != nil {
		if err := end(); err != nil {
			return false, err
		}
	}
	b.state = stateClosed
	b.events, b.inbox = nil, nil
	return true, nil
}

// Opened reports whether the agent is open.
func (b *Book[R, P, D, H]) Opened() bool { return b.state == stateOpen }

// Agent is the agent's name from Open ("" before).
func (b *Book[R, P, D, H]) Agent() string { return b.agent }

// Items refuses a batch of n items over Limits.MaxItemsPerCall as a whole:
// INVALID_ARGUMENT for the call, no item takes effect. An empty batch is
// not an error.
func (b *Book[R, P, D, H]) Items(call string, n int) error {
	if max := b.limits.MaxItemsPerCall; max > 0 && n > int(max) {
		return b.errorf(sdk.CodeInvalidArgument, "%s: %d items exceed the limit of %d per call; split the batch", call, n, max)
	}
	return nil
}

// Resources counts what the Book holds: every unreleased region, peer,
// dlist and handle, and as InFlight (sdk.Resources) every posted transfer
// whose end the transport has not reported with Complete: the live
// handles that are not terminal, and any released while running
// (Misbehave.ReleaseRunning). A Book that is not open holds nothing.
func (b *Book[R, P, D, H]) Resources() sdk.Resources {
	return sdk.Resources{
		Regions:  uint64(len(b.regions)),
		Peers:    uint64(len(b.peers)),
		Dlists:   uint64(len(b.dlists)),
		Handles:  uint64(len(b.handles)),
		InFlight: uint64(b.running),
	}
}

// errorf builds an *sdk.Error whose message starts with the Book's name.
func (b *Book[R, P, D, H]) errorf(c sdk.Code, format string, args ...any) error {
	return sdk.Errorf(c, b.name+": "+format, args...)
}

// sorted returns the values of m ordered by key.
func sorted[K ~uint64, V any](m map[K]V) []V {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]V, len(keys))
	for i, k := range keys {
		out[i] = m[k]
	}
	return out
}
