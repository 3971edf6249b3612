package group

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzDecodeBatch: whatever a states record holds, decodeBatch never
// panics; what it accepts is a valid record of the rank and member its key
// names, with valid ids, known states and bounded reasons, that encodes
// back to a record read the same; what it refuses is refused with
// ErrMalformed or ErrMixedContract, and only entries with valid ids come
// with the error.
func FuzzDecodeBatch(f *testing.F) {
	for _, seed := range []string{
		encodeBatch(1, "m", []Terminal{{Request: "a", State: Succeeded}, {Request: "b", State: Failed, Reason: "r"}}),
		encodeBatch(1, "m", nil),
		encodeBatch(0, "m", []Terminal{{Request: "a", State: TimedOut}}),
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
		entries, err := decodeBatch(raw, 1, "m")
		for _, e := range entries {
			require.NoError(t, checkRequestID(e.id), "an entry with an invalid id came back")
		}
		if err != nil {
			require.True(t, errors.Is(err, ErrMalformed) || errors.Is(err, ErrMixedContract), "unclassified error: %v", err)
			return
		}
		require.LessOrEqual(t, len(entries), maxBatchStates)
		ts := make([]Terminal, len(entries))
		seen := map[string]bool{}
		for i, e := range entries {
			_, known := stateNames[e.state]
			require.True(t, known, "accepted unknown state %v", e.state)
			require.LessOrEqual(t, len(e.reason), MaxReasonLen)
			require.False(t, seen[string(e.id)], "accepted id %q twice", e.id)
			seen[string(e.id)] = true
			ts[i] = Terminal{Request: e.id, State: e.state, Reason: e.reason}
		}
		again, err := decodeBatch([]byte(encodeBatch(1, "m", ts)), 1, "m")
		require.NoError(t, err)
		require.Equal(t, entries, again)
	})
}
