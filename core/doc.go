// Package core is custody's ownership engine: it owns every block, peer,
// descriptor list and transfer handle of one engine rank and decides when
// each may be let go, so that no block is reused, no handle released and no
// peer removed while a transfer may still touch it: rules 1–8 and 12–16 of
// docs/guarantees.md, which is where the rules the comments and tests cite
// by number are stated.
//
// Rule 15: when the first notification handed out to a remote rank fails (an
// item error other than INVALID_ARGUMENT, or the call as a whole), core
// loads the rank again from the metadata it connected with before the next
// notification to it, and notifies the new peer id from then on (resend.go).
// Only the first notification triggers it, once per connection, so each rank
// holds at most one extra native peer handle. The old id stays loaded while
// the rank's dlist names it; both are released with the peer's other natives
// once it is removed and no handle uses them. A notification lost silently
// (the transport reported success) is still noticed only by the lease of the
// request waiting for it.
//
// core is a pure state machine in the manner of etcd's raft. It has no
// goroutines, reads no clock and does no I/O: it never calls a transport.
// Commands (Read, Write, ConnectPeer, ...) and rounds (Poll) record what
// they decide and hand out what must be done as Work in a Ready: batched
// transport calls (posts, polls, events, releases, cancels, notifications,
// registrations, peer loads and unloads, descriptor lists, Close), each
// with an id and the epoch of the transport it is for. The caller makes
// each call and reports its outcome with Done; core acts on it at once and
// the Work that follows (a release after a DONE) is in the next Ready. It
// learns the time only from the now its caller passes. It imports sdk and
// the standard library only.
//
// # The caller's obligations
//
//  1. Make a Core with New, open a transport, Describe it and Attach it with
//     an epoch (a number that grows with every transport process started).
//     Register pools (RegisterPool; PoolReady says when its Work is done)
//     and hand blocks to the engine (Alloc).
//  2. Call every method from one goroutine, the owner. Other goroutines
//     never touch the Core; what they observe (a background handshake done or
//     failed, a fence finished) they hand to the owner, which queues it in
//     Inbox() for the next Poll to apply first. The Work itself may run
//     anywhere.
//  3. After every command and every Done, take Ready and run its Work
//     against the transport of its epoch, each call with a deadline (rule
//     13), then report each with Done, exactly once, in any order; Work of
//     an epoch fenced meanwhile may fail at once but must still be
//     reported. A transport whose last Config.WedgedAfter calls timed out is
//     fenced (Ready.Fence). Pass now values that never go backwards.
//  4. Call Poll(now) when the latest Ready's Next asks for it: once the
//     round's queries are reported (WaitResults); when the transport wakes
//     the caller (sdk.Waker), or after a short backoff where it cannot
//     (WaitTransport); after a short backoff (WaitRetry); and at Next.At
//     in every case. A round after a command that posted makes its
//     progress seen sooner. Hand the finished report in each Ready to the
//     engine (FinishedSending, FinishedReceiving, Failed, InvalidBlocks,
//     Quarantined: the engine owns those blocks again, except the
//     quarantined ones, which it must never use again), and log its Alerts.
//  5. When a Ready lists an epoch in Fence, fence it: kill that transport
//     process (the process is the fence, docs/fencing.md), then report it with
//     Fenced (or Inbox().Fenced) and Attach a new transport with a new epoch.
//     Until then the escalated handles and their blocks stay held.
//  6. Connect peers (ConnectPeer, or Inbox().HandshakeDone with the metadata
//     a background fetch handed the owner) and remove them (RemovePeer); issue Read,
//     Write, ExpectSend and ExpectReceive for requests.
//  7. To stop, call Close until it returns nil (it returns an error wrapping
//     ErrHeld while transfers still run, its own Work is under way or a
//     request is not reported yet; run the Work and Poll in between), then
//     take Ready once more for the last reports: once Close returned nil,
//     every request it took was reported. From the first Close on, no
//     request is taken. Close stops the transport last (rule 12).
//
// # Ownership
//
// A block is held by exactly one Owner. Alloc moves free blocks to the
// engine; Read, Write, ExpectSend and ExpectReceive move the engine's blocks
// to a request (OwnerTransfer); a request whose session closes while a handle of it runs
// holds them as OwnerRetained; and a request hands them back to the engine
// only in the Ready that reports it, once every handle of it is terminal and
// released. Blocks of a handle force-released by escalation without a fence
// are OwnerQuarantined for good, and so are the blocks of a failed push
// receive that a producer may still write into where no fence stops it.
//
// Every native acquisition of a handshake is journaled as soon as Done
// reports it and leaves the journal only when published or released. A loaded
// peer's dlists and native handles are released only once no handle uses
// them. Every handle is released only once terminal, and stays tracked with
// its blocks while its Release fails.
//
// # Notifications
//
// A consumer tells its producer that it holds a request's bytes with the
// message ConsumedMessage(id, token) ("custody/2 consumed " + 16 hex digits
// of the token + " " + id). A Read with NotifyProducer sends it to each rank
// read from once every part is DONE and released, never after a failure.
// The message of a one-part read rides with its transfer instead
// (sdk.PostSpec.Notification: the transport delivers it once the read is
// DONE, never if it fails), saving a call per read, once a notification to
// that rank went through on its own: the first to a rank never rides, since
// rule 15 watches its outcome. A producer counts them against its sends.
// So a producer may hear that a one-part read consumed its blocks and the
// consumer then report the read failed: its only transfer was DONE, and
// the failure is of what came after (the peer removed, a Release refused
// past the hold cap, a fence before core saw the DONE). The producer's
// reuse is safe, since nothing reads its blocks any more; the consumer's
// blocks are invalid, as for any failed read. A read of several parts
// never rides: the transport would deliver one rank's message at that
// part's DONE, whatever its siblings do.
//
// The token (Token) tells registrations of one id apart. The engine draws
// one per request and passes it with the request id to both sides (in
// vLLM's terms, with the request's kv_transfer_params, where the remote
// block ids travel): SendSpec.Token and ReadSpec.Token in pull mode,
// RecvSpec.Token and WriteSpec.Token in push mode. A notification counts
// only for the registration of its id with its token; one with another
// token, a late notification of an earlier request under the same id, is
// dropped with a "stale_notification_dropped" Alert. So an id may be
// reused at once, as long as each request under it gets a fresh token (64
// random bits make a repeat negligible).
//
// A request counts each sending agent (sdk.Notification.From) once, and a
// request tied to a peer counts only the agents of its ranks
// (RankSpec.Agent). Notifications of a request not registered yet are kept,
// with their tokens, for Config.EarlyNotificationAge at most, bounded in
// number by Config.MaxEarlyNotifications, and count when the request is
// registered with their token; those of a send or receive reported lately
// (the last MaxEarlyNotifications of them) are late or duplicated and are
// dropped.
//
// Push mode (vLLM's push connector): the producer's Write sends
// WrittenMessage(id, token) ("custody/2 written " + token + " " + id) to
// each rank it wrote to once every part is DONE and released, never after a
// failure. The
// consumer's ExpectReceive pins its blocks until that many written
// notifications arrived, then reports the request finished receiving and
// sends the consumed notification back itself; the producer finishes
// sending on it. A receive that fails first keeps its blocks until the
// producer is proven stopped (a fence covering incoming transfers) or
// quarantines them (ExpectReceive). NotifyConsumed remains for consumers
// that track pushes themselves.
package core
