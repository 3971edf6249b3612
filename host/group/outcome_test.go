package group

import (
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

// TestRule10RankRestartedMidRequest: a rank that restarts while a request
// is in flight is lost for that request, even though the rank number is
// back: the new process never saw the request, and its records for it are
// not taken for the old one's.
func TestRule10RankRestartedMidRequest(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	report(t, c.ranks[0], "old", Succeeded, "")
	report(t, c.ranks[0], "older", Succeeded, "")
	old := c.ranks[1].Member()
	g1 := c.reopen(1)
	require.NoError(t, g1.Join(ctxT(t), testMode()))
	g0 := c.ranks[0]
	waitFor(t, g0, "rank 1's restart seen", func() bool {
		m := g0.members()
		return m[1] != "" && m[1] != old
	})
	// The new process reports an id rank 0 reported before the restart:
	// its record is not taken for the old process's.
	report(t, g1, "older", Succeeded, "")

	// The rank number is back, but the process that had the request is not.
	o := resolve(t, g0, "old")
	require.True(t, o.Resolved, "a restarted rank is not lost for the requests of its predecessor: %+v", o)
	assert.Equal(t, Failed, o.State)
	assert.Equal(t, 1, o.Rank)
	assert.Contains(t, o.Reason, "rank 1 was lost")

	o = resolve(t, g0, "older")
	require.True(t, o.Resolved)
	assert.Equal(t, Failed, o.State)
	assert.Contains(t, o.Reason, "not by member \""+old+"\"")
	require.Len(t, g0.LostRanks(), 1)
	assert.Equal(t, old, g0.LostRanks()[0].Member)
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
