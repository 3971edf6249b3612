package sdk

import "context"

// Transport is the contract between the custody host and one backend agent.
// See the package documentation for what each call promises and what the
// caller may assume after each code.
//
// Batched calls take a slice and return one result per item, in order, with
// an error per item; their second return value is an error of the call as a
// whole (the transport could not be reached, the agent is not open, the
// batch is over Limits.MaxItemsPerCall), in which case no item took effect unless that error is
// CodeTimeout or CodePluginShutdown, after which the caller must not assume
// either way.
//
// Every method is safe for concurrent use.
type Transport interface {
	// Describe says who the transport is and what it promises. It may be
	// called before Open.
	Describe(ctx context.Context) (Description, error)
	// Open starts the agent. It is called once, before any other call but
	// Describe.
	Open(ctx context.Context, req OpenRequest) error
	// Close ends the agent. It is refused with CodeBusy while any region,
	// peer, dlist or handle is still held.
	Close(ctx context.Context) error

	// RegisterMemory maps and registers regions so that transfers may use
	// them and peers may reach them.
	RegisterMemory(ctx context.Context, regions []Region) ([]Registration, error)
	// DeregisterMemory undoes RegisterMemory. A region a live dlist or
	// handle uses is refused with CodeBusy and stays registered.
	DeregisterMemory(ctx context.Context, ids []RegionID) ([]error, error)

	// LocalMetadata returns the blob a peer passes to LoadPeers to reach
	// this agent's registered regions. It is versioned and at most
	// Limits.MaxMetadataBytes long; call it again after registering memory.
	// A blob that would be longer is CodeBackend (register fewer regions).
	LocalMetadata(ctx context.Context) ([]byte, error)
	// LoadPeers loads peers from their metadata. An empty name, garbage
	// metadata, or a name other than the metadata's agent is
	// CodeInvalidArgument and loads nothing; a peer that is gone is
	// CodeRemoteDisconnect.
	LoadPeers(ctx context.Context, peers []PeerSpec) ([]PeerResult, error)
	// UnloadPeers releases loaded peers. A peer a live dlist or handle
	// references is refused with CodeBusy and stays loaded.
	UnloadPeers(ctx context.Context, ids []PeerID) ([]error, error)

	// PrepareDescriptors prepares local (Peer == 0) or remote dlists.
	PrepareDescriptors(ctx context.Context, lists []DlistSpec) ([]DlistResult, error)
	// ReleaseDescriptors releases dlists. A dlist a live handle uses is
	// refused with CodeBusy and stays valid.
	ReleaseDescriptors(ctx context.Context, ids []DlistID) ([]error, error)

	// Post starts transfers and returns their handles at once; it never
	// waits for bytes to move.
	Post(ctx context.Context, posts []PostSpec) ([]PostResult, error)
	// Poll reports the state of handles. An item error (CodeNotFound, ...)
	// means the state is unknown, never that the handle is terminal.
	Poll(ctx context.Context, ids []HandleID) ([]HandleStatus, error)
	// Cancel asks the backend to stop transfers. It frees nothing: a
	// canceled handle must still be polled until terminal and released.
	// Canceling a terminal handle is OK and changes nothing; an unknown or
	// released one is CodeNotFound.
	Cancel(ctx context.Context, ids []HandleID) ([]error, error)
	// Release frees terminal handles. A handle that is not terminal is
	// refused with CodeBusy and stays valid; an unknown or already released
	// one is CodeNotFound.
	Release(ctx context.Context, ids []HandleID) ([]error, error)

	// SendNotifications sends small messages to loaded peers.
	SendNotifications(ctx context.Context, msgs []OutboundNotification) ([]error, error)
	// Notifications drains up to max received messages (all when max <= 0),
	// each delivered exactly once, in order per sender. It never waits.
	Notifications(ctx context.Context, max int) ([]Notification, error)

	// Resources counts the native resources the agent holds now, so a
	// caller can prove that nothing leaked.
	Resources(ctx context.Context) (Resources, error)
}

// EventSource is implemented by transports that report state changes, so
// that a host need not poll every live handle each round. Its fallback, when
// a transport lacks it, is to Poll every live handle.
type EventSource interface {
	// Events drains up to max state changes (all when max <= 0) since the
	// last call, in the order they happened. It never waits. Every handle's
	// turn to a terminal state appears exactly once; IN_PROGRESS changes may
	// be left out. A handle's events may come before Post's reply reaches
	// the caller.
	Events(ctx context.Context, max int) ([]Event, error)
}

// Waker is implemented by transports that can tell their caller when work
// may be ready, so that a host sleeps until then instead of polling on a
// timer. Its fallback, when a transport lacks it, is to poll while anything
// is in flight or awaited.
type Waker interface {
	// Wake returns a channel that receives a value (sent without blocking;
	// capacity 1, so wake-ups coalesce) whenever, since the last receive, a
	// handle may have changed state, an event may be ready or a
	// notification may have arrived. A wake-up may be spurious; a change is
	// never left without one. The channel is the same for the transport's
	// life and is never closed.
	Wake() <-chan struct{}
}

// WakeReasoner is implemented by a Waker that can say what its wake-ups
// were for, so that a consumer asks the transport only for what may have
// changed: its events after a completion, its notifications after a
// notification, rather than both at every wake-up. Its fallback, when a
// Waker lacks it, is to take every wake-up as both.
type WakeReasoner interface {
	Waker
	// WakeReasons reports what may have changed since its previous call:
	// states (a handle may have changed state, an event may be ready, the
	// agent may have ended) and notifications (a notification may have
	// arrived or been lost). Call it after a receive from Wake; a change
	// it does not report is followed by another wake-up. Both may be true,
	// or neither (a spurious wake-up). It has one consumer: a second
	// caller takes reasons the first would have seen.
	WakeReasons() (states, notifications bool)
}

// OpenRequest starts an agent.
type OpenRequest struct {
	// Agent names this agent among its peers; non-empty. Peers load this
	// agent under this name (PeerSpec.Name), and its notifications reach
	// them with it as Notification.From.
	Agent string
	// Params are transport-specific settings (k=v), for example a fake's
	// faults or UCX's tls. An unknown key is CodeInvalidArgument.
	Params map[string]string
}

// Region is memory to register: Length bytes from Offset of the file at Path.
type Region struct {
	Path   string
	Offset uint64
	Length uint64
	Kind   MemoryKind
}

// Registration is one result of RegisterMemory.
type Registration struct {
	ID  RegionID
	Err error
}

// PeerSpec is a peer to load: its agent name (non-empty, the name the peer
// gave its own Open, which its metadata names) and metadata blob.
type PeerSpec struct {
	Name     string
	Metadata []byte
}

// PeerResult is one result of LoadPeers.
type PeerResult struct {
	ID  PeerID
	Err error
}

// Descriptor is one contiguous range of a region. In a local dlist Region is
// a RegionID of this agent; in a remote dlist it is the peer's RegionID, as
// the peer's RegisterMemory returned it. Length is non-zero, and the range
// lies inside the region: otherwise CodeInvalidArgument.
type Descriptor struct {
	Region RegionID
	Offset uint64
	Length uint64
}

// DlistSpec is a descriptor list to prepare. Peer is zero for a local list.
// It has at least one descriptor and at most Limits.MaxDescriptorsPerList.
type DlistSpec struct {
	Peer        PeerID
	Descriptors []Descriptor
}

// DlistResult is one result of PrepareDescriptors.
type DlistResult struct {
	ID  DlistID
	Err error
}

// PostSpec is one transfer: LocalIndices[i] of the local dlist moves to or
// from RemoteIndices[i] of the remote dlist, whose lengths must match. The
// index lists are non-empty and of equal length, each index inside its
// dlist, and paired descriptors of equal length; otherwise the item is
// CodeInvalidArgument. When
// Notification is non-empty it is delivered to the peer once the transfer is
// DONE, and never if it is not.
type PostSpec struct {
	Op            Op
	Local         DlistID
	LocalIndices  []uint32
	Remote        DlistID
	RemoteIndices []uint32
	Notification  []byte
}

// PostResult is one result of Post.
type PostResult struct {
	ID  HandleID
	Err error
}

// HandleStatus is one result of Poll. When Err is non-nil the poll of this
// item failed and State is zero: the state is unknown, not terminal.
// Otherwise State is set, and Reason says why a FAILED or CANCELED handle
// ended (its code is CodeRemoteDisconnect, CodeBackend, CodeCanceled, ...).
type HandleStatus struct {
	State  State
	Reason error
	Err    error
}

// Event is one state change reported by an EventSource.
type Event struct {
	Handle HandleID
	State  State
	Reason error
}

// OutboundNotification is a message to a loaded peer.
type OutboundNotification struct {
	Peer    PeerID
	Message []byte
}

// Notification is a message received from the agent named From.
type Notification struct {
	// From is the sender's agent name as it gave it to its own Open.
	From    string
	Message []byte
}

// Resources counts an agent's native resources. A new or closed agent
// holds nothing.
type Resources struct {
	Regions uint64 // registered regions
	Peers   uint64 // loaded peers (with native state still closing)
	Dlists  uint64 // live (unreleased) dlists
	Handles uint64 // live (unreleased) handles, terminal or not
	// InFlight counts the posted transfers whose bytes may still move:
	// each from its Post until no byte of it moves any more. A transport
	// that keeps the contract turns a handle terminal only then, so for it
	// InFlight is the number of live handles not yet terminal. A transfer
	// whose bytes still move after its handle turned terminal or was
	// released (a contract violation) still counts. Nothing else does:
	// not a terminal handle (it is in Handles only), not a notification
	// send, not a connection still closing.
	InFlight uint64
}

// Zero reports whether the agent holds nothing.
func (r Resources) Zero() bool { return r == Resources{} }
