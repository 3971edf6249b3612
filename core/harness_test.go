package core

import (
	"hash/fnv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// t0 is the time every test starts at: core reads no clock, so a test's
// time is only what it passes as now.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// testingT is what a srig needs of a test's T.
type testingT interface {
	require.TestingT
	Helper()
}

func repeat[T any](v T, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func failedIDs(rd Ready) []RequestID {
	var out []RequestID
	for _, f := range rd.Failed {
		out = append(out, f.Request)
	}
	return out
}

func hasAlert(rd Ready, kind string) bool {
	for _, a := range rd.Alerts {
		if a.Kind == kind {
			return true
		}
	}
	return false
}

// tok is the notification token tests give request id: fixed per id, so
// both sides of a test agree on it without passing it around, and never
// zero.
func tok(id RequestID) Token {
	h := fnv.New64a()
	h.Write([]byte(id))
	return Token(h.Sum64() | 1)
}
