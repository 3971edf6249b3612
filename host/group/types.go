package group

import (
	"github.com/custody-dev/custody/host/group/ledger"
	"github.com/custody-dev/custody/sdk"
)

// The group's vocabulary is the ledger's (package ledger documents each
// name); these aliases keep it the group's API.
type (
	// State is a rank's local terminal state of a request, and the union
	// of them across ranks.
	State = ledger.State
	// Terminal is one request's local terminal state on this rank.
	Terminal = ledger.Terminal
	// Outcome is a request's union outcome across ranks (rule 10).
	Outcome = ledger.Outcome
	// LostRank is a rank whose membership key went away (rule 10).
	LostRank = ledger.LostRank
	// PoisonRecord is a pool poisoned on every rank (rule 11).
	PoisonRecord = ledger.PoisonRecord
	// Mode is a rank's effective mode (rule 9).
	Mode = ledger.Mode
	// Capabilities mirrors sdk.Capabilities with a stable encoding.
	Capabilities = ledger.Capabilities
	// PoolMode is one pool's geometry.
	PoolMode = ledger.PoolMode
	// Difference is one field on which two ranks' modes differ.
	Difference = ledger.Difference
	// ModeMismatchError is a rank whose effective mode differs from rank 0's.
	ModeMismatchError = ledger.ModeMismatchError
)

// The terminal states.
const (
	Succeeded = ledger.Succeeded
	Failed    = ledger.Failed
	TimedOut  = ledger.TimedOut
)

// Bounds on what a rank writes and reads.
const (
	// MaxRequestIDLen bounds a request id, in bytes.
	MaxRequestIDLen = ledger.MaxRequestIDLen
	// MaxReasonLen bounds a failure reason; longer reasons are cut.
	MaxReasonLen = ledger.MaxReasonLen
)

// CapabilitiesOf converts a transport's claims.
func CapabilitiesOf(c sdk.Capabilities) Capabilities { return ledger.CapabilitiesOf(c) }

// Diff lists the fields on which got differs from want, in a fixed order.
func Diff(want, got Mode) []Difference { return ledger.Diff(want, got) }
