package group

import (
	"errors"

	"github.com/custody-dev/custody/host/group/ledger"
)

// Sentinel errors, checked with errors.Is. Each is wrapped with the rank,
// request, pool or key concerned and what to do. Those the group's
// decisions return are the ledger's own (package ledger documents them).
var (
	ErrModeMismatch    = ledger.ErrModeMismatch
	ErrMixedContract   = ledger.ErrMixedContract
	ErrDuplicateRank   = ledger.ErrDuplicateRank
	ErrSessionLost     = ledger.ErrSessionLost
	ErrCoordinator     = ledger.ErrCoordinator
	ErrUnknownRequest  = ledger.ErrUnknownRequest
	ErrBadRequestID    = ledger.ErrBadRequestID
	ErrAlreadyReported = ledger.ErrAlreadyReported
	ErrMalformed       = ledger.ErrMalformed
	ErrBadArgument     = ledger.ErrBadArgument

	// ErrRankMissing: a rank did not join within the join timeout.
	ErrRankMissing = errors.New("rank never joined")
	// ErrNotJoined: the call needs a successful Join first.
	ErrNotJoined = errors.New("group not joined")
	// ErrPeerNotFound: no peer of that name is published.
	ErrPeerNotFound = errors.New("peer not found in the directory")
	// ErrPeerNameTaken: another live host published that name.
	ErrPeerNameTaken = errors.New("peer name published by another host")
	// ErrClosed: the group was closed.
	ErrClosed = errors.New("group closed")
)
