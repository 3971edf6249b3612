package group

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/core"
)

// TestRule10HoldCapExpiresARankThatNeverReports: a live rank that never
// reports a request no longer keeps it pending for ever: once a rank has
// waited past its hold cap, Expire makes the request TimedOut on every
// rank, the late success of the silent rank included; an Expire that
// comes after every rank reported changes nothing.
func TestRule10HoldCapExpiresARankThatNeverReports(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	id := rid(1)
	report(t, c.ranks[0], id, Succeeded, "")
	o := resolve(t, c.ranks[0], id)
	require.False(t, o.Resolved)
	require.Equal(t, []int{1}, o.Pending)
	require.NoError(t, c.ranks[0].Expire(ctxT(t), []core.RequestID{core.RequestID(id)}, 3*time.Second))
	o = resolve(t, c.ranks[0], id)
	require.True(t, o.Resolved, "an expired request is resolved: %+v", o)
	assert.Equal(t, TimedOut, o.State)
	assert.Equal(t, 0, o.Rank)
	assert.Contains(t, o.Reason, "waited 3s past its hold cap for ranks [1]")
	// The silent rank finishes late, with a success: the timeout wins.
	report(t, c.ranks[1], id, Succeeded, "")
	o1 := resolve(t, c.ranks[1], id)
	require.True(t, o1.Resolved)
	assert.Equal(t, TimedOut, o1.State, "a late success after the expiry")
	assert.Equal(t, o.Reason, o1.Reason)

	// Both ranks reported before the expiry: it is not written.
	id2 := rid(2)
	report(t, c.ranks[0], id2, Succeeded, "")
	require.False(t, resolve(t, c.ranks[0], id2).Resolved)
	report(t, c.ranks[1], id2, Succeeded, "")
	require.NoError(t, c.ranks[0].Expire(ctxT(t), []core.RequestID{core.RequestID(id2)}, time.Second))
	for r, g := range c.ranks {
		o := resolve(t, g, id2)
		require.True(t, o.Resolved, "rank %d", r)
		assert.Equal(t, Succeeded, o.State, "rank %d: an expiry raced by the last report is refused", r)
	}

	// Expire refuses an id this rank never reported.
	err := c.ranks[0].Expire(ctxT(t), []core.RequestID{"never"}, time.Second)
	require.ErrorIs(t, err, ErrUnknownRequest)
}
