package ledger

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/custody-dev/custody/core"
)

// Proto is the version of the records a group writes. A rank whose
// records carry another version is refused like a mixed contract.
const Proto = 3

// statesRecord is what states/<rank>/<member>/<seq> holds: the terminal
// states one write of a rank's member published (group protocol 3; up to
// protocol 2 each state had a key of its own).
type statesRecord struct {
	V      int          `json:"v"`
	Rank   int          `json:"rank"`
	Member string       `json:"member"`
	States []stateEntry `json:"states"`
}

// stateEntry is one request's state in a statesRecord.
type stateEntry struct {
	ID     string `json:"id"`
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
}

// Entry is one request's state read from a states record.
type Entry struct {
	ID     core.RequestID
	State  State
	Reason string
}

// EncodeStates is the states record rank's member writes for ts.
func EncodeStates(rank int, member string, ts []Terminal) string {
	rec := statesRecord{V: Proto, Rank: rank, Member: member, States: make([]stateEntry, len(ts))}
	for i, t := range ts {
		rec.States[i] = stateEntry{ID: string(t.Request), State: t.State.String(), Reason: t.Reason}
	}
	raw, _ := json.Marshal(rec)
	return string(raw)
}

// DecodeStates validates a states record read from the key of rank's
// member. A record that is oversized or not strict JSON of a states
// record names no request it can be trusted for: it returns no entry, only
// the error. A record that decodes but is not valid (another version,
// another rank or member than its key names, too many states, an unknown
// state, an oversized reason, an id twice) returns its entries with the
// error: the union fails each request it names (it can only fail a
// request, never make it succeed). Entries whose id no rank could have
// reported are dropped.
func DecodeStates(raw []byte, rank int, member string) ([]Entry, error) {
	if len(raw) > MaxRecordBytes {
		return nil, fmt.Errorf("rank %d's states record is %d bytes, over the %d limit: %w", rank, len(raw), MaxRecordBytes, ErrMalformed)
	}
	var rec statesRecord
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return nil, fmt.Errorf("rank %d's states record does not decode: %v: %w", rank, err, ErrMalformed)
	}
	if dec.More() {
		return nil, fmt.Errorf("rank %d's states record has trailing data: %w", rank, ErrMalformed)
	}
	entries := make([]Entry, 0, len(rec.States))
	var bad error
	seen := make(map[string]struct{}, len(rec.States))
	for _, s := range rec.States {
		if CheckRequestID(core.RequestID(s.ID)) != nil {
			if bad == nil {
				bad = fmt.Errorf("rank %d's states record holds an invalid request id %.40q: %w", rank, s.ID, ErrMalformed)
			}
			continue
		}
		st, ok := ParseState(s.State)
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
		entries = append(entries, Entry{ID: core.RequestID(s.ID), State: st, Reason: s.Reason})
	}
	switch {
	case rec.V != Proto:
		bad = fmt.Errorf("rank %d's states record is version %d, this rank speaks %d: %w", rank, rec.V, Proto, ErrMixedContract)
	case rec.Rank != rank:
		bad = fmt.Errorf("the states record under rank %d's key names rank %d: %w", rank, rec.Rank, ErrMalformed)
	case rec.Member != member:
		bad = fmt.Errorf("the states record under rank %d member %.80q's key names member %.80q: %w", rank, member, rec.Member, ErrMalformed)
	case len(rec.States) > MaxRecordStates:
		bad = fmt.Errorf("rank %d's states record holds %d states, over the %d limit: %w", rank, len(rec.States), MaxRecordStates, ErrMalformed)
	}
	return entries, bad
}
