package ledger

import "errors"

// Sentinel errors of the ledger's decisions, checked with errors.Is. Each
// is wrapped with the rank, request, pool or key concerned and what to do.
// Package group re-exports every one under the same name.
var (
	// ErrModeMismatch: a rank's effective mode differs from rank 0's (rule 9).
	ErrModeMismatch = errors.New("ranks disagree on the effective mode")
	// ErrMixedContract: ranks speak different transport contract majors or
	// group protocol versions.
	ErrMixedContract = errors.New("ranks run mixed contract versions")
	// ErrDuplicateRank: another member already holds this rank's number.
	ErrDuplicateRank = errors.New("rank number already held by another member")
	// ErrSessionLost: this rank's lease is gone (etcd unreachable past the
	// TTL, or revoked); the other ranks count it lost and fail its pending
	// requests. The host must fail its own and restart.
	ErrSessionLost = errors.New("this rank's group membership was lost")
	// ErrCoordinator: etcd did not answer in time or refused the call.
	ErrCoordinator = errors.New("coordinator (etcd) unavailable")
	// ErrUnknownRequest: a request id this rank never reported.
	ErrUnknownRequest = errors.New("unknown request id")
	// ErrBadRequestID: an empty or oversized request id.
	ErrBadRequestID = errors.New("invalid request id")
	// ErrAlreadyReported: a request reported again with another state.
	ErrAlreadyReported = errors.New("request already reported with another state")
	// ErrMalformed: a record in etcd that fails validation (bad encoding,
	// oversized, wrong rank or member). A request with one never succeeds.
	ErrMalformed = errors.New("malformed record in the coordinator")
	// ErrBadArgument: a bad pool name, reason or peer address.
	ErrBadArgument = errors.New("invalid argument")
)
