package ledger

import (
	"fmt"
	"unicode/utf8"

	"github.com/custody-dev/custody/core"
)

// State is a rank's local terminal state of a request, and the union of
// them across ranks.
type State uint8

const (
	// Succeeded: every handle of the request ended DONE on that rank.
	Succeeded State = iota + 1
	// Failed: the request failed on that rank (or the rank was lost, or its
	// record is malformed).
	Failed
	// TimedOut: the request was held past its bound on that rank. A timeout
	// wins over any other state in the union, a late success included.
	TimedOut
)

var stateNames = map[State]string{Succeeded: "succeeded", Failed: "failed", TimedOut: "timed_out"}

func (s State) String() string {
	if n, ok := stateNames[s]; ok {
		return n
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Terminal reports whether s is one of the three terminal states.
func (s State) Terminal() bool {
	_, ok := stateNames[s]
	return ok
}

// ParseState reads a state by its name.
func ParseState(s string) (State, bool) {
	for st, n := range stateNames {
		if n == s {
			return st, true
		}
	}
	return 0, false
}

// Bounds on what a rank writes and reads.
const (
	// MaxRequestIDLen bounds a request id, in bytes.
	MaxRequestIDLen = 256
	// MaxReasonLen bounds a failure reason; longer reasons are cut.
	MaxReasonLen = 512
	// MaxRecordStates bounds the states of one states record: a write of
	// more is split into several records.
	MaxRecordStates = 128
	// MaxRecordBytes bounds a states record read from etcd. One of
	// MaxRecordStates states, each id and reason JSON-escaped at worst six
	// bytes a byte, fits; so does a transaction holding one, within the
	// 1.5 MiB etcd takes by default.
	MaxRecordBytes = 1 << 20
	// maxMemberLen bounds a member id read from etcd.
	maxMemberLen = 256
	// MaxNameLen bounds transport, pool and peer names.
	MaxNameLen = 128
)

// Terminal is one request's local terminal state on this rank.
type Terminal struct {
	Request core.RequestID
	State   State
	// Reason is the first failure seen on this rank (empty on success).
	Reason string
}

// CheckRequestID refuses ids no rank could store.
func CheckRequestID(id core.RequestID) error {
	switch {
	case id == "":
		return fmt.Errorf("empty request id: %w", ErrBadRequestID)
	case len(id) > MaxRequestIDLen:
		return fmt.Errorf("request id %.40q... is %d bytes, over the %d limit: %w", string(id), len(id), MaxRequestIDLen, ErrBadRequestID)
	case !utf8.ValidString(string(id)):
		return fmt.Errorf("request id %q is not valid UTF-8: %w", string(id), ErrBadRequestID)
	}
	return nil
}

// Truncate cuts a reason to MaxReasonLen bytes on a rune boundary.
func Truncate(s string) string {
	if len(s) <= MaxReasonLen {
		return s
	}
	cut := MaxReasonLen - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
