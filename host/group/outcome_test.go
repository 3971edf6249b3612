package group

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/host/group/ledger"
)

func report(t *testing.T, g *Group, id string, s State, reason string) {
	t.Helper()
	require.NoError(t, g.Report(ctxT(t), []Terminal{{Request: core.RequestID(id), State: s, Reason: reason}}))
}

func resolve(t *testing.T, g *Group, id string) Outcome {
	t.Helper()
	o, err := g.Outcome(ctxT(t), core.RequestID(id))
	require.NoError(t, err)
	return o
}

// TestRule10FailureUnion: one rank's failure or timeout fails the request
// on every rank, a timeout wins over a (late) success, and no rank
// resolves a request before every rank is terminal (rule 10).
func TestRule10FailureUnion(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	S, F, T := Succeeded, Failed, TimedOut
	for i, tc := range []struct {
		name   string
		states [2]State
		// first is the rank that reports first; the other reports after
		// the first has resolved (and seen the request pending).
		first int
		want  State
		rank  int
	}{
		{"both succeed", [2]State{S, S}, 0, S, -1},
		{"rank 1 fails", [2]State{S, F}, 0, F, 1},
		{"rank 0 fails", [2]State{F, S}, 1, F, 0},
		{"rank 1 times out", [2]State{S, T}, 0, T, 1},
		{"timeout wins over a late success", [2]State{T, S}, 0, T, 0},
		{"timeout wins over a failure", [2]State{F, T}, 0, T, 1},
		{"both fail: the lowest rank's reason", [2]State{F, F}, 1, F, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := rid(i)
			first, second := tc.first, 1-tc.first
			report(t, c.ranks[first], id, tc.states[first], "reason of rank "+string(rune('0'+first)))
			o := resolve(t, c.ranks[first], id)
			require.False(t, o.Resolved, "resolved before rank %d reported: %+v", second, o)
			assert.Equal(t, []int{second}, o.Pending)
			report(t, c.ranks[second], id, tc.states[second], "reason of rank "+string(rune('0'+second)))
			for r, g := range c.ranks {
				o := resolve(t, g, id)
				require.True(t, o.Resolved, "rank %d", r)
				assert.Equal(t, tc.want, o.State, "rank %d", r)
				assert.Equal(t, tc.rank, o.Rank, "rank %d", r)
				assert.Equal(t, tc.states[:], o.Ranks, "rank %d", r)
				if tc.rank >= 0 {
					assert.Equal(t, "reason of rank "+string(rune('0'+tc.rank)), o.Reason, "rank %d", r)
				}
			}
		})
	}
}

// TestRule10ResolvedIsFinalAndCollected: a resolved outcome never changes,
// and once every rank has resolved a request its keys are deleted.
func TestRule10ResolvedIsFinalAndCollected(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	report(t, c.ranks[0], "a", Succeeded, "")
	report(t, c.ranks[1], "a", Succeeded, "")
	for _, g := range c.ranks {
		require.Equal(t, Succeeded, resolve(t, g, "a").State)
	}
	// A terminal state stays terminal: rank 1 cannot turn it into a failure.
	err := c.ranks[1].Report(ctxT(t), []Terminal{{Request: "a", State: Failed}})
	require.ErrorIs(t, err, ErrAlreadyReported)
	// Rounds: each rank deletes its record with its next Report, once
	// every rank's state is in; each forgets the request once the other
	// rank's record is gone.
	for round := 0; round < 3; round++ {
		for _, g := range c.ranks {
			require.NoError(t, g.Report(ctxT(t), nil))
			if g.Stats().InFlight > 0 {
				require.NoError(t, g.Sync(ctxT(t)))
				_, err := g.Resolve(ctxT(t), nil)
				require.NoError(t, err)
			}
		}
	}
	assert.Empty(t, c.keysLeft(), "resolved requests' records are garbage-collected")
	for r, g := range c.ranks {
		assert.Zero(t, g.Stats().InFlight, "rank %d forgot the request", r)
		_, err := g.Outcome(ctxT(t), "a")
		require.ErrorIs(t, err, ErrUnknownRequest)
	}
}

// TestRule10RankLostMidRequest: a rank whose lease goes while a request is
// in flight fails that request on every other rank; what it reported
// before it went still counts; and nothing it writes after lands.
func TestRule10RankLostMidRequest(t *testing.T) {
	c := newCluster(t, 3)
	c.mustJoin()
	for _, g := range c.ranks {
		report(t, g, "done-before", Succeeded, "")
	}
	report(t, c.ranks[0], "in-flight", Succeeded, "")
	report(t, c.ranks[1], "in-flight", Succeeded, "")
	require.False(t, resolve(t, c.ranks[0], "in-flight").Resolved)

	// Rank 2 dies: its lease is revoked, as etcd does when it expires.
	victim := c.ranks[2]
	_, err := c.client().Revoke(ctxT(t), victim.lease)
	require.NoError(t, err)
	for _, g := range c.ranks[:2] {
		waitFor(t, g, "rank 2 reported lost", func() bool { return len(g.LostRanks()) == 1 })
		assert.Equal(t, 2, g.LostRanks()[0].Rank)
		assert.Equal(t, victim.Member(), g.LostRanks()[0].Member)
	}
	for r, g := range c.ranks[:2] {
		o := resolve(t, g, "in-flight")
		require.True(t, o.Resolved, "rank %d", r)
		assert.Equal(t, Failed, o.State, "rank %d", r)
		assert.Equal(t, 2, o.Rank, "rank %d", r)
		assert.Contains(t, o.Reason, "rank 2 was lost", "rank %d", r)
		assert.Equal(t, Succeeded, resolve(t, g, "done-before").State, "rank %d: a state reported before the loss counts", r)
	}
	// The dead rank is fenced out: its late report does not land.
	waitFor(t, victim, "rank 2 learns it is lost", func() bool { return victim.Err() != nil })
	require.ErrorIs(t, victim.Err(), ErrSessionLost)
	err = victim.Report(ctxT(t), []Terminal{{Request: "in-flight", State: Succeeded}})
	require.ErrorIs(t, err, ErrSessionLost)
	assert.NotContains(t, c.published(2), core.RequestID("in-flight"))
	// The lowest live rank deletes the dead rank's record once no request
	// in it waits there.
	require.Contains(t, c.published(2), core.RequestID("done-before"))
	require.NoError(t, c.ranks[0].Report(ctxT(t), nil))
	assert.Empty(t, c.published(2), "the lost rank's record was left in etcd")
}

// TestRule10FencedWrite: a rank whose lease is gone but that has not yet
// noticed cannot publish: the membership guard refuses its transaction.
func TestRule10FencedWrite(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	// Delete rank 1's member key behind its back, keeping its lease alive.
	_, err := c.client().Delete(ctxT(t), c.ranks[0].keys.Member(1))
	require.NoError(t, err)
	err = c.ranks[1].flushOne(ctxT(t), "late", Succeeded)
	require.ErrorIs(t, err, ErrSessionLost)
	assert.Empty(t, c.published(1), "a lost rank's write landed")
}

// flushOne publishes one state without Report's membership check, as a
// rank that has not yet seen its loss would.
func (g *Group) flushOne(ctx context.Context, id core.RequestID, s State) error {
	g.reqMu.Lock()
	defer g.reqMu.Unlock()
	g.reqs.m[id] = &request{snap: g.members(), mine: Terminal{Request: id, State: s}}
	return g.flush(ctx)
}

// TestRule10MalformedPayloads: whatever another rank's states record holds,
// a request never counts as succeeded unless that rank's valid record says
// so. A record that decodes but is not valid fails every request it names,
// on every rank, the rank it claims to be included; one that names no
// request it can be trusted for (not strict JSON of a record, oversized)
// changes nothing.
func TestRule10MalformedPayloads(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	cli := c.client()
	m1 := c.ranks[1].Member()
	rec := func(v, rank int, member, body string) string {
		return fmt.Sprintf(`{"v":%d,"rank":%d,"member":%q,"states":[%s]}`, v, rank, member, body)
	}
	seq := uint64(1000)
	put := func(t *testing.T, member, value string) {
		seq++
		_, err := cli.Put(ctxT(t), c.ranks[0].keys.Record(1, member, seq), value)
		require.NoError(t, err)
	}
	for i, tc := range []struct {
		name, member, value, want string
	}{
		{"unknown state", m1, rec(3, 1, m1, `{"id":"%s","state":"great"}`), "unknown state"},
		{"names another rank", m1, rec(3, 0, m1, `{"id":"%s","state":"succeeded"}`), "names rank 0"},
		{"names another member than its key", m1, rec(3, 1, "impostor", `{"id":"%s","state":"succeeded"}`), "names member \"impostor\""},
		{"other version", m1, rec(9, 1, m1, `{"id":"%s","state":"succeeded"}`), "version 9"},
		{"oversized reason", m1, rec(3, 1, m1, `{"id":"%s","state":"succeeded","reason":"`+strings.Repeat("x", MaxReasonLen+1)+`"}`), "over the 512 limit"},
		{"an id twice", m1, rec(3, 1, m1, `{"id":"%s","state":"succeeded"},{"id":"%s","state":"succeeded"}`), "twice"},
		{"too many states", m1, rec(3, 1, m1, `{"id":"%s","state":"succeeded"}`+strings.Repeat(`,{"id":"x","state":"succeeded"}`, ledger.MaxRecordStates)), "over the 128 limit"},
		{"another member", "impostor", states(1, "impostor", Terminal{Request: "%s", State: Succeeded}), "written by member impostor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := rid(i)
			report(t, c.ranks[0], id, Succeeded, "")
			put(t, tc.member, strings.ReplaceAll(tc.value, "%s", id))
			o := resolve(t, c.ranks[0], id)
			require.True(t, o.Resolved)
			assert.Equal(t, Failed, o.State)
			assert.Equal(t, 1, o.Rank)
			assert.Contains(t, o.Reason, tc.want)
			// Rank 1's own valid report cannot make it succeed there
			// either: the record under its number fails it.
			report(t, c.ranks[1], id, Succeeded, "")
			o = resolve(t, c.ranks[1], id)
			require.True(t, o.Resolved)
			assert.Equal(t, Failed, o.State, "rank 1 succeeded past a bad record under its number")
			assert.Equal(t, 1, o.Rank)
		})
	}
	for i, tc := range []struct{ name, value string }{
		{"not json", "\x00\x01garbage"},
		{"oversized", rec(3, 1, m1, `{"id":"%s","state":"succeeded","reason":"`+strings.Repeat("x", ledger.MaxRecordBytes)+`"}`)},
		{"unknown field", `{"v":3,"rank":1,"member":"` + m1 + `","states":[{"id":"%s","state":"succeeded"}],"extra":1}`},
		{"trailing data", states(1, m1, Terminal{Request: "%s", State: Succeeded}) + `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := rid(100 + i)
			report(t, c.ranks[0], id, Succeeded, "")
			put(t, m1, strings.ReplaceAll(tc.value, "%s", id))
			o := resolve(t, c.ranks[0], id)
			require.False(t, o.Resolved, "a record that names nothing it can be trusted for counted: %+v", o)
			report(t, c.ranks[1], id, Succeeded, "")
			for r, g := range c.ranks {
				o := resolve(t, g, id)
				require.True(t, o.Resolved, "rank %d", r)
				assert.Equal(t, Succeeded, o.State, "rank %d: a record naming nothing changed the outcome", r)
			}
		})
	}
}

// TestReportAndResolveRefuseBadInput: bad ids and states are refused whole,
// naming the id, and change nothing.
func TestReportAndResolveRefuseBadInput(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	g := c.ranks[0]
	long := core.RequestID(strings.Repeat("r", MaxRequestIDLen+1))
	for _, tc := range []struct {
		name string
		ts   []Terminal
		want error
	}{
		{"empty id", []Terminal{{Request: "ok", State: Succeeded}, {Request: "", State: Succeeded}}, ErrBadRequestID},
		{"id over the limit", []Terminal{{Request: "ok", State: Succeeded}, {Request: long, State: Failed}}, ErrBadRequestID},
		{"not utf-8", []Terminal{{Request: "\xff", State: Failed}}, ErrBadRequestID},
		{"not terminal", []Terminal{{Request: "ok", State: 0}}, ErrBadArgument},
		{"two states in one call", []Terminal{{Request: "ok", State: Succeeded}, {Request: "ok", State: TimedOut}}, ErrAlreadyReported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := g.Stats()
			err := g.Report(ctxT(t), tc.ts)
			require.ErrorIs(t, err, tc.want)
			assert.Equal(t, before, g.Stats(), "a refused report changed something")
		})
	}
	_, err := g.Resolve(ctxT(t), []core.RequestID{long})
	require.ErrorIs(t, err, ErrBadRequestID)
	assert.Contains(t, err.Error(), "over the 256 limit")
	report(t, g, "known", Failed, "")
	_, err = g.Resolve(ctxT(t), []core.RequestID{"known", "never-reported"})
	require.ErrorIs(t, err, ErrUnknownRequest)
	assert.Contains(t, err.Error(), `"never-reported"`)
	// Reporting the same state again is harmless.
	report(t, g, "known", Failed, "")
	// Long reasons are cut, not refused.
	report(t, g, "long-reason", Failed, strings.Repeat("é", MaxReasonLen))
	report(t, c.ranks[1], "long-reason", Succeeded, "")
	o := resolve(t, c.ranks[1], "long-reason")
	assert.Equal(t, Failed, o.State)
	assert.LessOrEqual(t, len(o.Reason), MaxReasonLen)
}

// TestNotJoined: the union needs a joined group.
func TestNotJoined(t *testing.T) {
	c := newCluster(t, 2)
	require.ErrorIs(t, c.ranks[0].Report(ctxT(t), nil), ErrNotJoined)
	_, err := c.ranks[0].Resolve(ctxT(t), nil)
	require.ErrorIs(t, err, ErrNotJoined)
}

// TestRule10OwnStateCountsOncePublished: a rank does not resolve a request
// on the strength of its own state until that state is in etcd; otherwise
// it could resolve, die, and disagree with the ranks that count it lost.
func TestRule10OwnStateCountsOncePublished(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	g := c.ranks[0]
	report(t, c.ranks[1], "x", Succeeded, "")
	// Rank 0 accepted its state, but the write has not landed (as after
	// a Report that etcd did not answer).
	g.reqMu.Lock()
	g.reqs.m["x"] = &request{snap: g.members(), mine: Terminal{Request: "x", State: Succeeded}}
	g.reqMu.Unlock()
	o := resolve(t, g, "x")
	require.False(t, o.Resolved, "resolved on an unpublished state: %+v", o)
	assert.Equal(t, []int{0}, o.Pending)
	require.NoError(t, g.Report(ctxT(t), nil))
	o = resolve(t, g, "x")
	require.True(t, o.Resolved)
	assert.Equal(t, Succeeded, o.State)
}

// TestOneWritePerRound: a round's states, acks and deletions go out in one
// etcd transaction per rank while they fit the limit, and in as many as
// needed, none lost, when they do not.
func TestOneWritePerRound(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	round := func(g *Group, ts []Terminal) uint64 {
		before := g.Stats().WriteTxns
		require.NoError(t, g.Report(ctxT(t), ts))
		return g.Stats().WriteTxns - before
	}
	var ids []core.RequestID
	var ts []Terminal
	for i := 0; i < 64; i++ {
		ids = append(ids, core.RequestID(rid(i)))
		ts = append(ts, Terminal{Request: core.RequestID(rid(i)), State: Succeeded})
	}
	for r, g := range c.ranks {
		assert.EqualValues(t, 1, round(g, ts), "rank %d: 64 states", r)
	}
	for _, g := range c.ranks {
		require.NoError(t, g.Sync(ctxT(t)))
		out, err := g.Resolve(ctxT(t), ids)
		require.NoError(t, err)
		require.True(t, out[63].Resolved)
	}
	// Each rank deletes its one record of the 64 states in one write.
	for r, g := range c.ranks {
		assert.EqualValues(t, 1, round(g, nil), "rank %d: the deletion of its record", r)
	}
	// Past the states a record holds: several records, one write each,
	// every state published.
	var more []Terminal
	for i := 1000; i < 1000+2*ledger.MaxRecordStates+10; i++ {
		more = append(more, Terminal{Request: core.RequestID(rid(i)), State: Failed})
	}
	assert.EqualValues(t, 3, round(c.ranks[0], more))
	round(c.ranks[1], more)
	o := resolve(t, c.ranks[1], string(more[len(more)-1].Request))
	require.True(t, o.Resolved)
	assert.Equal(t, Failed, o.State)
	assert.Len(t, c.published(0), len(more))
	// Past etcd's operations per transaction: the deletions take several.
	for _, g := range c.ranks {
		require.NoError(t, g.Sync(ctxT(t)))
		ids := make([]core.RequestID, len(more))
		for i, t := range more {
			ids[i] = t.Request
		}
		_, err := g.Resolve(ctxT(t), ids)
		require.NoError(t, err)
	}
	c.ranks[0].cfg.Coordinator.MaxTxnOps = 4
	c.ranks[0].reqMu.Lock()
	c.ranks[0].reqs.orphans["x1"], c.ranks[0].reqs.orphans["x2"], c.ranks[0].reqs.orphans["x3"] = struct{}{}, struct{}{}, struct{}{}
	c.ranks[0].reqMu.Unlock()
	assert.EqualValues(t, 2, round(c.ranks[0], nil), "3 record deletions and 3 more, 4 a transaction")
	assert.Empty(t, c.published(0))
}

// TestRule10RankRestartedMidRequest: a rank that restarts while a request
// is in flight is lost for that request, even though the rank number is
// back: the new process never saw the request, and its records for it are
// not taken for the old one's.
func TestRule10RankRestartedMidRequest(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	report(t, c.ranks[0], "old", Succeeded, "")
	old := c.ranks[1].Member()
	g1 := c.reopen(1)
	require.NoError(t, g1.Join(ctxT(t), testMode()))
	g0 := c.ranks[0]
	waitFor(t, g0, "rank 1's restart seen", func() bool {
		m := g0.members()
		return m[1] != "" && m[1] != old
	})
	// The rank number is back, but the process that had the request is not.
	o := resolve(t, g0, "old")
	require.True(t, o.Resolved, "a restarted rank is not lost for the requests of its predecessor: %+v", o)
	assert.Equal(t, Failed, o.State)
	assert.Equal(t, 1, o.Rank)
	assert.Contains(t, o.Reason, "rank 1 was lost")

	// The new process reports an id rank 0 reported before the restart:
	// its record is not taken for the old process's.
	report(t, c.ranks[0], "older", Succeeded, "")
	c.ranks[0].reqMu.Lock()
	c.ranks[0].reqs.m["older"].snap[1] = old
	c.ranks[0].reqMu.Unlock()
	report(t, g1, "older", Succeeded, "")
	o = resolve(t, g0, "older")
	require.True(t, o.Resolved)
	assert.Equal(t, Failed, o.State)
	assert.Contains(t, o.Reason, "not by member \""+old+"\"")
	require.Len(t, g0.LostRanks(), 1)
	assert.Equal(t, old, g0.LostRanks()[0].Member)
}

// TestRule10CollectedBeforeFolded: a rank deletes its states record as
// soon as every rank's state of its requests is in; a rank whose view
// applied the deletion before it resolved the request still resolves it
// from the record it saw, the same as every other rank, and then forgets
// it.
func TestRule10CollectedBeforeFolded(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	report(t, c.ranks[0], "r", Failed, "rank 0 failed")
	report(t, c.ranks[1], "r", Succeeded, "")
	o := resolve(t, c.ranks[0], "r")
	require.True(t, o.Resolved)
	require.NoError(t, c.ranks[0].Report(ctxT(t), nil)) // rank 0 deletes its record
	require.Empty(t, c.published(0), "rank 0 deleted its record")
	// Rank 1 has not resolved yet; its view has applied the deletion.
	g1 := c.ranks[1]
	require.NoError(t, g1.Sync(ctxT(t)))
	out, err := g1.Resolve(ctxT(t), []core.RequestID{"r"})
	require.NoError(t, err)
	require.True(t, out[0].Resolved, "the record went before rank 1 folded it: %+v", out[0])
	assert.Equal(t, o.State, out[0].State)
	assert.Equal(t, 0, out[0].Rank)
	// Returned once, it is forgotten, and so are the keys its view kept.
	_, err = g1.Resolve(ctxT(t), []core.RequestID{"r"})
	require.ErrorIs(t, err, ErrUnknownRequest)
	g1.rv.mu.Lock()
	assert.Empty(t, g1.rv.reqs, "rank 1's view still holds the deleted record")
	g1.rv.mu.Unlock()
}

// TestOwnStateWakesNoOne: a rank's own terminal state coming back through
// its watch does not signal Changed on that rank (nothing it resolves
// changes with it, and a host would resolve for nothing once per write),
// while the other rank, whose union it changes, is signalled.
func TestOwnStateWakesNoOne(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	for _, g := range c.ranks {
		require.NoError(t, g.Sync(ctxT(t)))
		drain(g)
	}
	report(t, c.ranks[0], "own", Succeeded, "")
	for _, g := range c.ranks {
		require.NoError(t, g.Sync(ctxT(t))) // both views hold the state now
	}
	select {
	case <-c.ranks[0].Changed():
		t.Fatal("rank 0 was signalled for its own state")
	default:
	}
	select {
	case <-c.ranks[1].Changed():
	default:
		t.Fatal("rank 1 was not signalled for rank 0's state")
	}
	o := resolve(t, c.ranks[0], "own")
	assert.Equal(t, []int{1}, o.Pending)
}

// drain takes a pending Changed signal, if any.
func drain(g *Group) {
	select {
	case <-g.Changed():
	default:
	}
}

// TestResolveSameIDTwice: an id named twice in one Resolve gets the same
// outcome twice, also when the call resolves it and forgets it at once (no
// other rank's record names it: the other rank was lost before it
// reported).
func TestResolveSameIDTwice(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	g0 := c.ranks[0]
	_, err := c.client().Revoke(ctxT(t), c.ranks[1].lease)
	require.NoError(t, err)
	waitFor(t, g0, "rank 1 reported lost", func() bool { return len(g0.LostRanks()) == 1 })
	report(t, g0, "x", Succeeded, "")
	require.NoError(t, g0.Sync(ctxT(t)))
	out, err := g0.Resolve(ctxT(t), []core.RequestID{"x", "x"})
	require.NoError(t, err)
	for i, o := range out {
		require.True(t, o.Resolved, "outcome %d", i)
		assert.Equal(t, Failed, o.State, "outcome %d", i)
		assert.Contains(t, o.Reason, "rank 1 was lost", "outcome %d", i)
	}
	_, err = g0.Resolve(ctxT(t), []core.RequestID{"x"})
	require.ErrorIs(t, err, ErrUnknownRequest, "a request resolved and named by no record is forgotten once returned")
}
