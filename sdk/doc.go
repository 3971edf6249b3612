// Package sdk is custody's transport contract, version 1: the Go types and
// the Transport interface every backend implements, the error codes and the
// promises of every call. It imports no gRPC: the process boundary (the
// proto, Serve for a plugin's main, Launch for the host) is package
// sdk/plugin. docs/contract.md is the overview, docs/fencing.md what a
// kill of the process stops; package sdk/kit is optional help that keeps
// the bookkeeping below for a transport, and examples/memcopy a whole
// transport built on it.
//
// # Who calls what
//
// The host is the only caller of a transport. It owns every resource: the
// transport holds native state (registrations, peers, descriptor lists,
// transfer handles) only on the host's behalf and frees each one only when
// the host asks. A transport holds no ownership logic and must not need any:
// it answers truthfully, and refuses what would be unsafe.
//
// The host calls, in order: Describe (any time); Open once; RegisterMemory;
// LocalMetadata, which it hands to peers; LoadPeers with each peer's
// metadata; PrepareDescriptors for local and remote lists; then, per
// transfer, Post, Poll (or EventSource.Events) until terminal, and Release.
// Teardown runs in reverse: Release every handle, ReleaseDescriptors,
// UnloadPeers, DeregisterMemory, Close. Every method is safe for concurrent
// use; the host serialises calls that touch one handle.
//
// Every call takes a context with a deadline. A transport never blocks past
// it: Post, Poll, Cancel, Release, Notifications and Events never wait for
// bytes to move at all.
//
// # Live resources
//
// Live means unreleased: a handle is live from Post until Release succeeds,
// whether or not it is terminal; a dlist from PrepareDescriptors until
// ReleaseDescriptors succeeds. A live handle pins its two dlists, a live
// local dlist each region it names, a live remote dlist its peer. Freeing
// what is pinned is BUSY and changes nothing.
//
// # Batches
//
// A batch of more than Limits.MaxItemsPerCall items is an error of the
// whole call (INVALID_ARGUMENT; no item takes effect). An empty batch is
// not an error. Otherwise every item has its own result, and an item that
// fails changes nothing.
//
// # Ids
//
// Ids are uint64, never zero, and never reused within one transport process,
// whatever kind they name. A host keeps every id together with the epoch of
// the process that issued it (a number the host gives each start), so an id
// from a killed process can never be confused with a live one.
//
// # Codes, per call
//
// Each call or batched item ends in one Code (see errors.go). The table says
// what the host may assume after each; any code not listed for a call is a
// contract violation, treated as CodeBackend.
//
//	call                 code                  the host may assume                       next
//	Open                 OK                    agent ready                               register memory
//	                     INVALID_ARGUMENT      empty agent name, unknown or bad          fix the config
//	                                           parameter, or opened before; not opened
//	Close                OK                    agent ended, nothing held (also when      stop the process
//	                                           it was closed already)
//	                     BUSY                  something is still held; nothing changed  release it first
//	                     INVALID_ARGUMENT      never opened                              -
//	RegisterMemory       OK (item)             region registered, reachable by peers     re-publish metadata
//	                     INVALID_ARGUMENT      empty or missing path, zero length,       fix the request
//	                                           range past the file, unsupported kind;
//	                                           not registered
//	DeregisterMemory     OK (item)             region no longer reachable                -
//	                     BUSY                  a live dlist or handle uses it; unchanged retry after release
//	                     NOT_FOUND             unknown or already deregistered           drop the id
//	LocalMetadata        OK                    blob of the regions registered now        hand it to peers
//	                     BACKEND               over MaxMetadataBytes, or the native      register fewer regions
//	                                           address could not be read
//	LoadPeers            OK (item)             peer loaded                               prepare dlists
//	                     INVALID_ARGUMENT      empty name, garbage or oversized          refuse the peer
//	                                           metadata, or a name other than the
//	                                           metadata's agent; nothing loaded
//	                     REMOTE_DISCONNECT     the peer is gone; nothing loaded          fetch its metadata again
//	UnloadPeers          OK (item)             peer released                             -
//	                     BUSY                  a live dlist or handle uses it; unchanged retry later
//	                     NOT_FOUND             unknown or already unloaded               drop the id
//	PrepareDescriptors   OK (item)             dlist ready                               post
//	                     INVALID_ARGUMENT      no descriptors or over                    fix the request
//	                                           MaxDescriptorsPerList, unknown region
//	                                           or peer, zero-length descriptor, range
//	                                           outside its region
//	ReleaseDescriptors   OK (item)             dlist released                            -
//	                     BUSY                  a live handle uses it; unchanged          retry later
//	                     NOT_FOUND             unknown or already released               drop the id
//	Post                 OK (item)             handle exists; bytes may move from now on poll it
//	                     INVALID_ARGUMENT      bad op; unknown dlist or one of the       fix the request
//	                                           wrong side; empty or unequal index
//	                                           lists; index outside its dlist; pair
//	                                           lengths differ; over a limit; nothing
//	                                           posted
//	                     REMOTE_DISCONNECT     peer gone; nothing posted                 fail the request
//	Poll                 OK (item)             State is true now                         release when terminal
//	                     NOT_FOUND, BACKEND    state unknown: NOT terminal               keep holding; poll again
//	Cancel               OK (item)             stop requested; nothing freed (on a       poll until terminal
//	                                           terminal handle: nothing changes, its     (within
//	                                           state and reason stay); terminal within   CancelBoundMillis)
//	                                           Limits.CancelBoundMillis when stated
//	                     NOT_FOUND             unknown or released handle                -
//	Release              OK (item)             handle freed; it moves no byte            hand its blocks back
//	                     BUSY                  not terminal; handle still valid          poll, retry later
//	                     NOT_FOUND             unknown or already released               -
//	SendNotifications    OK (item)             message queued for delivery               -
//	                     INVALID_ARGUMENT      over MaxNotificationBytes or unknown      -
//	                                           peer (an empty message is allowed)
//	                     REMOTE_DISCONNECT     the peer is gone; not sent                -
//	any item but Poll's  BACKEND               the native call failed; that item did     retry next round, or
//	                                           not take effect (a Release that failed    fail the request
//	                                           keeps its handle held)
//	any call             INVALID_ARGUMENT      called before Open or after Close         -
//	                                           (Close: before Open only; Describe and
//	                                           Resources never: a new or closed agent
//	                                           holds nothing), or a batch over
//	                                           MaxItemsPerCall: no item took effect
//	any call             TIMEOUT               unknown whether it took effect            find out (Poll, Resources)
//	any call             PLUGIN_SHUTDOWN       the process is gone: every transfer it    fence: new epoch
//	                                           initiated has stopped (reported by what
//	                                           stands for the process: sdk/plugin's
//	                                           Launch, or an in-process stand-in for a
//	                                           dead one, the fake's crash and Kill;
//	                                           never by a running transport)
//
// A transfer's terminal states are DONE, FAILED and CANCELED; in each, no
// byte of it moves any more. DONE means the bytes are in place at the
// destination, not merely that the source may be reused. A transport that
// cannot tell whether data still moves reports IN_PROGRESS: the host never
// guesses, and a handle whose last known state is IN_PROGRESS, or unknown,
// is never released.
//
// # Describe's promises
//
// Describe states what Cancel achieves (CancelEffect) and how soon
// (Limits.CancelBoundMillis, contract 1.1: after Cancel returns OK the
// handle is terminal within it; zero promises nothing, and the suite then
// allows its settle bound of 60 s), how a dead peer shows (PeerLoss,
// within Limits.PeerLossBoundMillis), which transfers a kill of the process
// stops (FenceScope, see docs/fencing.md) and the Limits the transport
// honours. The conformance suite holds every transport to each promise by
// its effect: a claim without the behaviour fails.
//
// A terminal state never changes: a handle Poll reported DONE, FAILED or
// CANCELED reports the same state, with a reason of the same code, on
// every later Poll until it is released, Cancel of it included.
//
// # Optional interfaces
//
// EventSource: state changes pushed by the transport, so the host touches
// only handles that changed. Fallback: Poll every live handle each round.
//
// Waker: a channel that receives a value whenever something may have
// changed, so the host sleeps instead of polling on a timer. Fallback:
// poll while anything is in flight or awaited.
//
// WakeReasoner: a Waker that says what a wake-up was for (state changes,
// notifications), so a consumer asks only for what may have changed.
// Fallback: take every wake-up as both.
//
// # Evolution
//
// The contract grows by adding optional interfaces and fields, never by
// changing a call. A plugin of another major version is refused at launch.
package sdk
