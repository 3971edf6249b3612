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
	// maxBatchStates bounds the states of one states record: a write of
	// more is split into several records.
	maxBatchStates = 128
	// maxBatchRecord bounds a states record read from etcd. One of
	// maxBatchStates states, each id and reason JSON-escaped at worst six
	// bytes a byte, fits; so does a transaction holding one, within the
	// 1.5 MiB etcd takes by default.
	maxBatchRecord = 1 << 20
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

// batchRecord is what states/<rank>/<member>/<seq> holds: the terminal
// states one write of a rank's member published (group protocol 3; up to
// protocol 2 each state had a key of its own).
type batchRecord struct {
	V      int          `json:"v"`
	Rank   int          `json:"rank"`
	Member string       `json:"member"`
	States []batchState `json:"states"`
}

// batchState is one request's state in a batchRecord.
type batchState struct {
	ID     string `json:"id"`
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
}

// batchEntry is one request's state read from a states record.
type batchEntry struct {
	id     core.RequestID
	state  State
	reason string
}

func encodeBatch(rank int, member string, ts []Terminal) string {
	rec := batchRecord{V: groupProto, Rank: rank, Member: member, States: make([]batchState, len(ts))}
	for i, t := range ts {
		rec.States[i] = batchState{ID: string(t.Request), State: t.State.String(), Reason: t.Reason}
	}
	raw, _ := json.Marshal(rec)
	return string(raw)
}

// decodeBatch validates a states record read from the key of rank's member.
// A record that is oversized or not strict JSON of a states record names no
// request it can be trusted for: it returns no entry, only the error. A
// record that decodes but is not valid (another version, another rank or
// member than its key names, too many states, an unknown state, an
// oversized reason, an id twice) returns its entries with the error: the
// union fails each request it names (it can only fail a request, never make
// it succeed). Entries whose id no rank could have reported are dropped.
func decodeBatch(raw []byte, rank int, member string) ([]batchEntry, error) {
	if len(raw) > maxBatchRecord {
		return nil, fmt.Errorf("rank %d's states record is %d bytes, over the %d limit: %w", rank, len(raw), maxBatchRecord, ErrMalformed)
	}
	var rec batchRecord
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return nil, fmt.Errorf("rank %d's states record does not decode: %v: %w", rank, err, ErrMalformed)
	}
	if dec.More() {
		return nil, fmt.Errorf("rank %d's states record has trailing data: %w", rank, ErrMalformed)
	}
	entries := make([]batchEntry, 0, len(rec.States))
	var bad error
	seen := make(map[string]struct{}, len(rec.States))
	for _, s := range rec.States {
		if checkRequestID(core.RequestID(s.ID)) != nil {
			if bad == nil {
				bad = fmt.Errorf("rank %d's states record holds an invalid request id %.40q: %w", rank, s.ID, ErrMalformed)
			}
			continue
		}
		st, ok := parseState(s.State)
		switch {
		case !ok && bad == nil:
			bad = fmt.Errorf("rank %d's states record has unknown state %.32q for request %q: %w", rank, s.State, s.ID, ErrMalformed)
		case len(s.Reason) > MaxReasonLen && bad == nil:
			bad = fmt.Errorf("rank %d's states record has a %d-byte reason for request %q, over the %d limit: %w", rank, len(s.Reason), s.ID, MaxReasonLen, ErrMalformed)
		}
		if _, dup := seen[s.ID]; dup && bad == nil {
			bad = fmt.Errorf("rank %d's states record holds request %q twice: %w", rank, s.ID, ErrMalformed)
		}
		seen[s.ID] = struct{}{}
		entries = append(entries, batchEntry{id: core.RequestID(s.ID), state: st, reason: s.Reason})
	}
	switch {
	case rec.V != groupProto:
		bad = fmt.Errorf("rank %d's states record is version %d, this rank speaks %d: %w", rank, rec.V, groupProto, ErrMixedContract)
	case rec.Rank != rank:
		bad = fmt.Errorf("the states record under rank %d's key names rank %d: %w", rank, rec.Rank, ErrMalformed)
	case rec.Member != member:
		bad = fmt.Errorf("the states record under rank %d member %.80q's key names member %.80q: %w", rank, member, rec.Member, ErrMalformed)
	case len(rec.States) > maxBatchStates:
		bad = fmt.Errorf("rank %d's states record holds %d states, over the %d limit: %w", rank, len(rec.States), maxBatchStates, ErrMalformed)
	}
	return entries, bad
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
