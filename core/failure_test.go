package core

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/sdk"
)

// A Failure carries its own request's entries of InvalidBlocks and
// Quarantined, so a runtime can hand each request its blocks without
// tracking them itself, and says whether a bound ran out (TimedOut) rather
// than a transfer or a call failing.
func TestFailureCarriesItsBlocks(t *testing.T) {
	t.Run("two failed reads, each with its own invalid blocks", func(t *testing.T) {
		s := newSrig(t, Config{}, nil)
		s.connect(peerSpec("p", 2))
		a := s.read("a", "p", 2)
		b := s.read("b", "p", 1)
		for _, h := range s.d.live() {
			s.d.set(h, sdk.StateFailed, sdk.Errorf(sdk.CodeBackend, "double: failed"))
		}
		rd := s.poll()
		require.Len(t, rd.Failed, 2)
		byID := map[RequestID]Failure{}
		for _, f := range rd.Failed {
			byID[f.Request] = f
			assert.False(t, f.TimedOut, "%s failed by its transfer", f.Request)
			assert.Empty(t, f.Quarantined)
		}
		assert.ElementsMatch(t, a, byID["a"].Invalid)
		assert.ElementsMatch(t, b, byID["b"].Invalid)
		assert.ElementsMatch(t, append(append([]BlockRef{}, a...), b...), rd.InvalidBlocks)
	})
	t.Run("held past the cap and quarantined: timed out, with its blocks", func(t *testing.T) {
		s := newSrig(t, Config{HoldCap: time.Second, Escalation: EscalateQuarantine}, nil)
		s.connect(peerSpec("p", 1))
		r := s.read("r", "p", 1)
		s.now = s.now.Add(2 * time.Second)
		var rd Ready
		for range 3 {
			rd = mergeReady(rd, s.poll())
		}
		require.Len(t, rd.Failed, 1)
		f := rd.Failed[0]
		assert.ErrorIs(t, f.Reason, ErrHoldCap)
		assert.True(t, f.TimedOut)
		assert.ElementsMatch(t, r, f.Quarantined)
		assert.Empty(t, f.Invalid, "a quarantined block is listed as quarantined only")
		assert.ElementsMatch(t, r, rd.Quarantined)
	})
	t.Run("a push receive's lease ran out: timed out, its blocks invalid", func(t *testing.T) {
		s := newSrig(t, Config{}, nil)
		s.connect(peerSpec("p", 1))
		b := mustAlloc(t, s, 2)
		require.NoError(t, s.c.ExpectReceive(s.now, RecvSpec{Request: "v", Token: tok("v"), Peer: "p", Pool: s.pool, Blocks: b, Producers: 1, Lease: time.Second}))
		s.settle()
		s.now = s.now.Add(2 * time.Second)
		rd := s.poll()
		// The producer may still write: reported once its epoch is fenced.
		require.Equal(t, []Epoch{1}, rd.Fence)
		require.Empty(t, rd.Failed)
		s.kill(1)
		rd = s.poll()
		require.Len(t, rd.Failed, 1)
		f := rd.Failed[0]
		assert.ErrorIs(t, f.Reason, ErrLeaseExpired)
		assert.True(t, f.TimedOut)
		want := []BlockRef{{s.pool, b[0]}, {s.pool, b[1]}}
		assert.ElementsMatch(t, want, append(append([]BlockRef{}, f.Invalid...), f.Quarantined...))
	})
}
