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

// TestRule10ExpiryRacedByAReport: an expiry is written only if no rank it
// saw pending wrote states since the view it saw them pending in. A rank
// whose view is older than the pending rank's report cannot expire the
// request once that report landed (another rank may have resolved it a
// success already); Expire then looks again at a newer view, and still
// expires a request the rank's later writes do not hold.
func TestRule10ExpiryRacedByAReport(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	g0 := c.ranks[0]
	report(t, g0, "x", Succeeded, "")
	report(t, g0, "z", Succeeded, "")
	require.Equal(t, []int{1}, resolve(t, g0, "x").Pending)
	g0.rv.mu.Lock()
	seen := g0.rv.rev
	g0.rv.mu.Unlock()
	report(t, c.ranks[1], "x", Succeeded, "")
	// Rank 0 expires x as of the view in which rank 1 had not reported it.
	g0.reqMu.Lock()
	wrote, _, err := g0.expireAt(ctxT(t), "x", []int{1}, seen, time.Second)
	g0.reqMu.Unlock()
	require.NoError(t, err)
	assert.False(t, wrote, "an expiry landed after the pending rank's state")
	for r, g := range c.ranks {
		o := resolve(t, g, "x")
		require.True(t, o.Resolved, "rank %d", r)
		assert.Equal(t, Succeeded, o.State, "rank %d: an expiry raced by the last report", r)
	}
	// z: rank 1 wrote since the view rank 0 had, but not z; Expire looks
	// again and expires it.
	g0.reqMu.Lock()
	wrote, _, err = g0.expireAt(ctxT(t), "z", []int{1}, seen, time.Second)
	g0.reqMu.Unlock()
	require.NoError(t, err)
	require.False(t, wrote)
	require.NoError(t, g0.Expire(ctxT(t), []core.RequestID{"z"}, time.Second))
	o := resolve(t, g0, "z")
	require.True(t, o.Resolved)
	assert.Equal(t, TimedOut, o.State)
}

// TestStatesKeyTakenByAnother: a record already under the key this member
// was about to write is not taken for its own: Report says so, naming the
// key, and publishes the states under a new key, none lost; every rank
// that read the foreign record fails the requests it names.
func TestStatesKeyTakenByAnother(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	g1 := c.ranks[1]
	next := g1.keys.batch(1, g1.Member(), g1.ownSeq.Load()+1)
	_, err := c.client().Put(ctxT(t), next, states(1, g1.Member(), Terminal{Request: "f", State: Succeeded}))
	require.NoError(t, err)
	report(t, c.ranks[0], "f", Succeeded, "")
	err = g1.Report(ctxT(t), []Terminal{{Request: "f", State: Failed, Reason: "rank 1 failed"}})
	require.ErrorIs(t, err, ErrMalformed)
	assert.Contains(t, err.Error(), next)
	assert.Contains(t, err.Error(), `"f"`)
	assert.Equal(t, Failed, c.published(1)["f"], "rank 1's own state was not published")
	for r, g := range c.ranks {
		o := resolve(t, g, "f")
		require.True(t, o.Resolved, "rank %d", r)
		assert.Equal(t, Failed, o.State, "rank %d", r)
	}
}

// TestRule10RecordsKeptUntilEveryRankReported: a request resolved past an
// expiry keeps its states record and expiry in etcd while a live rank has
// not reported it: however often the rank that expired it writes, the
// late rank still finds them and resolves it the same.
func TestRule10RecordsKeptUntilEveryRankReported(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	g0, g1 := c.ranks[0], c.ranks[1]
	report(t, g0, "x", Succeeded, "")
	require.Equal(t, []int{1}, resolve(t, g0, "x").Pending)
	require.NoError(t, g0.Expire(ctxT(t), []core.RequestID{"x"}, time.Second))
	require.Equal(t, TimedOut, resolve(t, g0, "x").State)
	for range 2 {
		require.NoError(t, g0.Report(ctxT(t), nil))
		require.NoError(t, g0.Sync(ctxT(t)))
		_, err := g0.Resolve(ctxT(t), nil)
		require.NoError(t, err)
	}
	assert.Contains(t, c.published(0), core.RequestID("x"), "rank 0 deleted its record before rank 1 reported")
	require.NoError(t, g1.Sync(ctxT(t)))
	_, err := g1.Resolve(ctxT(t), nil) // rank 1 folds what its view holds
	require.NoError(t, err)
	report(t, g1, "x", Succeeded, "")
	o := resolve(t, g1, "x")
	require.True(t, o.Resolved, "rank 1 found the records gone: %+v", o)
	assert.Equal(t, TimedOut, o.State)
	// Once rank 1's state is in, the records and the expiry go, and both
	// ranks forget the request.
	for range 2 {
		for _, g := range c.ranks {
			require.NoError(t, g.Report(ctxT(t), nil))
			require.NoError(t, g.Sync(ctxT(t)))
			_, err := g.Resolve(ctxT(t), nil)
			require.NoError(t, err)
		}
	}
	for _, prefix := range []string{g0.keys.requests(), g0.keys.batches()} {
		resp, err := c.client().Get(ctxT(t), prefix, clientPrefix())
		require.NoError(t, err)
		assert.Empty(t, resp.Kvs, "left in etcd under %s", prefix)
	}
	for r, g := range c.ranks {
		assert.Zero(t, g.Stats().InFlight, "rank %d still tracks the request", r)
	}
}
