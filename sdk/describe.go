package sdk

// ContractMajor and ContractMinor are the version of the transport contract
// this package implements. A host refuses a transport of another major
// version; minor versions only add optional calls and fields.
const (
	ContractMajor = 1
	ContractMinor = 1
)

// MemoryKind is the kind of memory a region lives in.
type MemoryKind string

const (
	// MemoryHost is ordinary host memory: a file the engine, host and
	// transport all map (under /dev/shm, or a memfd).
	MemoryHost MemoryKind = "host"
)

// CancelEffect states what Cancel achieves on a transport. The conformance
// suite holds a transport to what it claims.
type CancelEffect string

const (
	// CancelNone: Cancel is accepted but changes nothing; a handle runs to
	// DONE or FAILED as if Cancel had not been asked. (UCX cannot cancel a
	// posted put or get.)
	CancelNone CancelEffect = "none"
	// CancelStops: a canceled handle stops moving bytes and then reports
	// CANCELED (or DONE, if it finished first), within
	// Limits.CancelBoundMillis when the transport states it (without it,
	// the conformance suite allows its 60 s settle bound).
	CancelStops CancelEffect = "stops"
	// CancelClosesPeer: Cancel force-closes the connection to the handle's
	// peer; every handle to that peer then ends CANCELED or FAILED once the
	// backend completes its requests.
	CancelClosesPeer CancelEffect = "closes-peer"
)

// PeerLoss states how the death of a peer shows on a transport.
type PeerLoss string

const (
	// PeerLossReported: handles to a dead peer end FAILED with
	// CodeRemoteDisconnect within Limits.PeerLossBound.
	PeerLossReported PeerLoss = "reported"
	// PeerLossProcessExits: the transport cannot report a dead peer; its
	// process exits instead, which the host treats as a fence.
	PeerLossProcessExits PeerLoss = "process-exits"
)

// FenceScope states which transfers stop when the transport process is
// killed; docs/fencing.md says what a kill stops on which hardware, and
// what the host does with each scope.
type FenceScope string

const (
	// FenceInitiated: transfers this process posted stop. A peer that maps
	// our memory directly may still write into it.
	FenceInitiated FenceScope = "initiated"
	// FenceInitiatedAndIncoming: transfers this process posted stop, and so
	// do transfers peers posted into or out of our memory, because our
	// registration is what grants their access.
	FenceInitiatedAndIncoming FenceScope = "initiated-and-incoming"
)

// Capabilities are the optional behaviours a transport claims.
type Capabilities struct {
	// Remote: transfers between agents in different processes.
	Remote bool
	// Local: transfers between two regions of the same agent (a loopback
	// peer loaded from the agent's own metadata).
	Local bool
	// Notifications: SendNotifications and Notifications, and the
	// notification carried by a post.
	Notifications bool
	// Cancel: Cancel does more than CancelNone.
	Cancel bool
	// Events: the transport implements EventSource.
	Events bool
}

// Limits are the bounds a transport honours. Zero means no stated limit.
// Going over a limit is INVALID_ARGUMENT (for MaxMetadataBytes in
// LocalMetadata, BACKEND).
type Limits struct {
	// MaxDescriptorsPerList bounds one dlist (PrepareDescriptors item).
	MaxDescriptorsPerList uint32
	// MaxDescriptorsPerPost bounds the index pairs of one PostSpec.
	MaxDescriptorsPerPost uint32
	// MaxItemsPerCall bounds every batch: a longer one is an error of the
	// whole call, and no item takes effect.
	MaxItemsPerCall uint32
	// MaxNotificationBytes bounds a notification, sent or posted.
	MaxNotificationBytes uint32
	// MaxMetadataBytes bounds LocalMetadata's blob and LoadPeers' input.
	MaxMetadataBytes uint32
	// MaxTransferBytes bounds the bytes of one PostSpec.
	MaxTransferBytes uint64
	// PeerLossBoundMillis bounds how long after a peer's death its handles
	// turn terminal (PeerLossReported) or the process exits.
	PeerLossBoundMillis uint32
	// CancelBoundMillis bounds how long after Cancel returns OK a handle
	// of this transport turns terminal (CANCELED, or DONE or FAILED if it
	// ended first). Zero makes no promise (the host's bounded hold then
	// escalates a handle that never ends). Added in contract minor 1: a
	// transport of minor 0 states none.
	CancelBoundMillis uint32
}

// Description is what Describe returns: who the transport is and what it
// promises. It does not change while the process lives.
type Description struct {
	Name          string
	Version       string
	ContractMajor uint32
	ContractMinor uint32
	MemoryKinds   []MemoryKind
	Capabilities  Capabilities
	CancelEffect  CancelEffect
	PeerLoss      PeerLoss
	FenceScope    FenceScope
	Limits        Limits
}
