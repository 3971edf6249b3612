package core

import "errors"

// Failure reasons core itself assigns; match with errors.Is.
var (
	// ErrPeerRemoved: the request's peer was removed (or the Core closed)
	// before the request finished.
	ErrPeerRemoved = errors.New("peer removed before the request finished")
	// ErrHoldCap: a handle of the request stayed non-terminal, or unreleased,
	// past Config.HoldCap and was escalated.
	ErrHoldCap = errors.New("transfer held past the hold cap")
	// ErrFenced: the request's transport epoch was fenced (its process
	// killed) before the request finished.
	ErrFenced = errors.New("transport epoch fenced")
	// ErrUnknownOutcome: a transport call timed out or the transport died
	// mid-call, so whether the request's transfers were posted is unknown;
	// its blocks stay pinned until the epoch is fenced.
	ErrUnknownOutcome = errors.New("outcome of a transport call unknown")
	// ErrNotAttached: no transport is attached (before Attach, or after the
	// attached epoch was fenced).
	ErrNotAttached = errors.New("no transport attached")
	// ErrLeaseExpired: a push receive's lease expired before every producer
	// reported its writes.
	ErrLeaseExpired = errors.New("lease expired before the producers reported their writes")
	// ErrDuplicate: a Read, Write, ExpectSend or ExpectReceive repeats a
	// request the Core took (same id, token and kind), in flight or
	// reported lately (Config.MaxRecentRequests): the retry of a call whose
	// reply was lost. Nothing new is taken; the request's one report comes,
	// or came, as for the first call.
	ErrDuplicate = errors.New("request already taken (a retry)")
	// ErrHeld: Close found resources still held; keep calling Poll (the hold
	// cap bounds the wait) and call Close again.
	ErrHeld = errors.New("resources still held")
)
