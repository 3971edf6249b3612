package ledger

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeStates: whatever a states record holds, DecodeStates never
// panics; what it accepts is a valid record of the rank and member its key
// names, with valid ids, known states and bounded reasons, that encodes
// back to a record read the same; what it refuses is refused with
// ErrMalformed or ErrMixedContract, and only entries with valid ids come
// with the error.
func FuzzDecodeStates(f *testing.F) {
	for _, seed := range []string{
		EncodeStates(1, "m", []Terminal{{Request: "a", State: Succeeded}, {Request: "b", State: Failed, Reason: "r"}}),
		EncodeStates(1, "m", nil),
		EncodeStates(0, "m", []Terminal{{Request: "a", State: TimedOut}}),
		`{"v":3,"rank":1,"member":"m","states":[{"id":"a","state":"great"}]}`,
		`{"v":3,"rank":1,"member":"m","states":[{"id":"a","state":"succeeded"},{"id":"a","state":"failed"}]}`,
		`{"v":2,"rank":1,"member":"m","states":[]}`,
		`{"v":3,"rank":1,"member":"m","states":[{"id":"","state":"succeeded"}]}`,
		`{"v":3,"rank":1,"member":"m","states":null,"x":1}`,
		"\x00garbage",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		entries, err := DecodeStates(raw, 1, "m")
		for _, e := range entries {
			require.NoError(t, CheckRequestID(e.ID), "an entry with an invalid id came back")
		}
		if err != nil {
			require.True(t, errors.Is(err, ErrMalformed) || errors.Is(err, ErrMixedContract), "unclassified error: %v", err)
			return
		}
		require.LessOrEqual(t, len(entries), MaxRecordStates)
		ts := make([]Terminal, len(entries))
		seen := map[string]bool{}
		for i, e := range entries {
			require.True(t, e.State.Terminal(), "accepted unknown state %v", e.State)
			require.LessOrEqual(t, len(e.Reason), MaxReasonLen)
			require.False(t, seen[string(e.ID)], "accepted id %q twice", e.ID)
			seen[string(e.ID)] = true
			ts[i] = Terminal{Request: e.ID, State: e.State, Reason: e.Reason}
		}
		again, err := DecodeStates([]byte(EncodeStates(1, "m", ts)), 1, "m")
		require.NoError(t, err)
		require.Equal(t, entries, again)
	})
}
