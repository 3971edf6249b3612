package group

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/host/group/ledger"
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
	g0.mu.Lock()
	seen := g0.l.Rev()
	g0.mu.Unlock()
	report(t, c.ranks[1], "x", Succeeded, "")
	// Rank 0 expires x as of the view in which rank 1 had not reported it.
	g0.callMu.Lock()
	wrote, _, err := g0.expireAt(ctxT(t), "x", []int{1}, seen, time.Second, clientv3.NoLease)
	g0.callMu.Unlock()
	require.NoError(t, err)
	assert.False(t, wrote, "an expiry landed after the pending rank's state")
	for r, g := range c.ranks {
		o := resolve(t, g, "x")
		require.True(t, o.Resolved, "rank %d", r)
		assert.Equal(t, Succeeded, o.State, "rank %d: an expiry raced by the last report", r)
	}
	// z: rank 1 wrote since the view rank 0 had, but not z; Expire looks
	// again and expires it.
	g0.callMu.Lock()
	wrote, _, err = g0.expireAt(ctxT(t), "z", []int{1}, seen, time.Second, clientv3.NoLease)
	g0.callMu.Unlock()
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
// that read the foreign record fails the requests it names, and the member
// deletes it once they are complete.
func TestStatesKeyTakenByAnother(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	g1 := c.ranks[1]
	g1.mu.Lock()
	next := g1.keys.Record(1, g1.Member(), g1.l.LastSeq()+1)
	g1.mu.Unlock()
	_, err := c.client().Put(ctxT(t), next, states(1, g1.Member(), Terminal{Request: "f", State: Succeeded}))
	require.NoError(t, err)
	report(t, c.ranks[0], "f", Succeeded, "")
	err = g1.Report(ctxT(t), []Terminal{{Request: "f", State: Failed, Reason: "rank 1 failed"}})
	require.ErrorIs(t, err, ErrMalformed)
	assert.Contains(t, err.Error(), next)
	assert.Contains(t, err.Error(), `"f"`)
	assert.Equal(t, Failed, c.published(1)["f"], "rank 1's own state was not published")
	g1.mu.Lock()
	seen := g1.l.HoldsRecord(next)
	g1.mu.Unlock()
	assert.True(t, seen, "rank 1's view does not hold the record under its key once Report found it")
	// However rank 1's view comes to hold that key (its watch may bring it
	// only after rank 1 allocated it), it reads the record there as a
	// foreign one: here, after a reload, as when its watch breaks.
	resp, err := c.client().Get(ctxT(t), g1.keys.Base, clientPrefix())
	require.NoError(t, err)
	g1.resync(resp.Kvs, resp.Header.Revision)
	for r, g := range c.ranks {
		o := resolve(t, g, "f")
		require.True(t, o.Resolved, "rank %d", r)
		assert.Equal(t, Failed, o.State, "rank %d", r)
	}
	// Once f is complete, rank 1 deletes the foreign record under its own
	// keys with its own: nothing is left.
	c.settle()
	assert.Empty(t, c.keysLeft())
	for r, g := range c.ranks {
		assert.Zero(t, g.Stats().InFlight, "rank %d still tracks the request", r)
	}
}

// expiryLeaseOf returns the lease the expiry of id by rank is written
// under, and the TTL it was granted.
func (c *cluster) expiryLeaseOf(id string, rank int) (clientv3.LeaseID, int64) {
	c.t.Helper()
	resp, err := c.client().Get(ctxT(c.t), c.ranks[0].keys.Expiry(id, rank))
	require.NoError(c.t, err)
	require.Len(c.t, resp.Kvs, 1, "the expiry of %s by rank %d", id, rank)
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	require.NotEqual(c.t, clientv3.NoLease, lease, "the expiry of %s has no lease", id)
	ttl, err := c.client().TimeToLive(ctxT(c.t), lease)
	require.NoError(c.t, err)
	return lease, ttl.GrantedTTL
}

// TestRule10LateRankFindsTheExpiry: once a request expired, no rank keeps
// its states record for it, but the expiry stays, under a lease of at
// least ledger.ExpiryTTL: the silent rank that reports late finds it and
// resolves the request the same; once its state is in, the expiry goes
// and both ranks forget the request.
func TestRule10LateRankFindsTheExpiry(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	g0, g1 := c.ranks[0], c.ranks[1]
	report(t, g0, "x", Succeeded, "")
	require.Equal(t, []int{1}, resolve(t, g0, "x").Pending)
	require.NoError(t, g0.Expire(ctxT(t), []core.RequestID{"x"}, time.Second))
	require.Equal(t, TimedOut, resolve(t, g0, "x").State)
	c.settle()
	assert.NotContains(t, c.published(0), core.RequestID("x"), "rank 0 kept its record of an expired request")
	_, ttl := c.expiryLeaseOf("x", 0)
	assert.Equal(t, int64(ledger.ExpiryTTL/time.Second), ttl)
	report(t, g1, "x", Succeeded, "")
	o := resolve(t, g1, "x")
	require.True(t, o.Resolved, "rank 1 found the expiry gone: %+v", o)
	assert.Equal(t, TimedOut, o.State)
	assert.Equal(t, resolve(t, g0, "x").Reason, o.Reason)
	// Once rank 1's state is in, its record and the expiry go, and both
	// ranks forget the request.
	c.settle()
	assert.Empty(t, c.keysLeft())
	for r, g := range c.ranks {
		assert.Zero(t, g.Stats().InFlight, "rank %d still tracks the request", r)
	}
}

// TestRule10SilentRankLeavesNothingBehind: a request a live rank never
// reports, once expired, keeps no states record in etcd, not even the
// records it shares with requests every rank reported; its expiry ends
// with its lease, and then no rank tracks it any more.
func TestRule10SilentRankLeavesNothingBehind(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	g0, g1 := c.ranks[0], c.ranks[1]
	// One record of rank 0 holds x, which rank 1 never reports, and y.
	require.NoError(t, g0.Report(ctxT(t), []Terminal{{Request: "x", State: Succeeded}, {Request: "y", State: Succeeded}}))
	report(t, g1, "y", Succeeded, "")
	require.Equal(t, Succeeded, resolve(t, g0, "y").State)
	require.Equal(t, Succeeded, resolve(t, g1, "y").State)
	require.Equal(t, []int{1}, resolve(t, g0, "x").Pending)
	require.NoError(t, g0.Expire(ctxT(t), []core.RequestID{"x"}, 10*time.Minute))
	require.Equal(t, TimedOut, resolve(t, g0, "x").State)
	c.settle()
	assert.Equal(t, []string{g0.keys.Expiry("x", 0)}, c.keysLeft(), "all but the expiry goes")
	lease, ttl := c.expiryLeaseOf("x", 0)
	assert.Equal(t, int64(100*60), ttl, "ten times the wait, past ledger.ExpiryTTL")
	// The lease ends (as its TTL would): nothing is left, on any rank.
	_, err := c.client().Revoke(ctxT(t), lease)
	require.NoError(t, err)
	c.settle()
	assert.Empty(t, c.keysLeft())
	for r, g := range c.ranks {
		assert.Zero(t, g.Stats().InFlight, "rank %d still tracks a request", r)
	}
	// Rank 1 reports x later still: it finds no key of x, waits out its
	// own hold cap and expires x in turn, TimedOut as on rank 0; then its
	// record goes, and its expiry with its lease.
	report(t, g1, "x", Succeeded, "")
	require.Equal(t, []int{0}, resolve(t, g1, "x").Pending)
	require.NoError(t, g1.Expire(ctxT(t), []core.RequestID{"x"}, time.Second))
	assert.Equal(t, TimedOut, resolve(t, g1, "x").State)
	c.settle()
	assert.Equal(t, []string{g1.keys.Expiry("x", 1)}, c.keysLeft())
	lease, _ = c.expiryLeaseOf("x", 1)
	_, err = c.client().Revoke(ctxT(t), lease)
	require.NoError(t, err)
	c.settle()
	assert.Empty(t, c.keysLeft())
	assert.Zero(t, g1.Stats().InFlight)
}
