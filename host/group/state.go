package group

import (
	"bytes"
	"encoding/json"
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

func parseState(s string) (State, bool) {
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
	// maxStateRecord bounds a state record read from etcd.
	maxStateRecord = 1024
	// maxMemberLen bounds a member id read from etcd.
	maxMemberLen = 256
)

// Terminal is one request's local terminal state on this rank.
type Terminal struct {
	Request core.RequestID
	State   State
	// Reason is the first failure seen on this rank (empty on success).
	Reason string
}

// stateRecord is a Terminal as stored under req/<id>/s/<rank>.
type stateRecord struct {
	V      int    `json:"v"`
	Rank   int    `json:"rank"`
	Member string `json:"member"`
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
}

func encodeState(rank int, member string, t Terminal) string {
	raw, _ := json.Marshal(stateRecord{V: groupProto, Rank: rank, Member: member, State: t.State.String(), Reason: t.Reason})
	return string(raw)
}

// decodeState validates a state record read from rank's key. It never
// returns a usable record for input that is oversized, not strict JSON of
// this version, names another rank, or carries an unknown state.
func decodeState(raw []byte, rank int) (stateRecord, State, error) {
	var rec stateRecord
	if len(raw) > maxStateRecord {
		return rec, 0, fmt.Errorf("rank %d's state record is %d bytes, over the %d limit: %w", rank, len(raw), maxStateRecord, ErrMalformed)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return rec, 0, fmt.Errorf("rank %d's state record does not decode: %v: %w", rank, err, ErrMalformed)
	}
	if dec.More() {
		return rec, 0, fmt.Errorf("rank %d's state record has trailing data: %w", rank, ErrMalformed)
	}
	if rec.V != groupProto {
		return rec, 0, fmt.Errorf("rank %d's state record is version %d, this rank speaks %d: %w", rank, rec.V, groupProto, ErrMixedContract)
	}
	if rec.Rank != rank {
		return rec, 0, fmt.Errorf("the state record under rank %d's key names rank %d: %w", rank, rec.Rank, ErrMalformed)
	}
	if rec.Member == "" || len(rec.Member) > maxMemberLen {
		return rec, 0, fmt.Errorf("rank %d's state record has a member id of %d bytes: %w", rank, len(rec.Member), ErrMalformed)
	}
	st, ok := parseState(rec.State)
	if !ok {
		return rec, 0, fmt.Errorf("rank %d's state record has unknown state %.32q: %w", rank, rec.State, ErrMalformed)
	}
	if len(rec.Reason) > MaxReasonLen {
		return rec, 0, fmt.Errorf("rank %d's state record has a %d-byte reason, over the %d limit: %w", rank, len(rec.Reason), MaxReasonLen, ErrMalformed)
	}
	return rec, st, nil
}

// checkRequestID refuses ids no rank could store.
func checkRequestID(id core.RequestID) error {
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

// truncate cuts a reason to MaxReasonLen bytes on a rune boundary.
func truncate(s string) string {
	if len(s) <= MaxReasonLen {
		return s
	}
	cut := MaxReasonLen - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
