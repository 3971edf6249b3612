package host

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/custody-dev/custody/client"
	"github.com/custody-dev/custody/host/group"
)

// pullRanks runs one logical pull request on the given decode ranks: the
// prefill host pins n blocks of random bytes per rank, each rank reads its
// own n. consumers is how many ranks will ever read (the send's count).
func pullRanks(t *testing.T, prefill *testHost, ranks []*testHost, consumers int, id string, n int) (src [][][]byte, dst [][]uint32, pb []uint32) {
	t.Helper()
	pb, err := prefill.c.Alloc(prefill.ctx(), prefill.poolID, n*consumers)
	require.NoError(t, err)
	all := prefill.fill(pb)
	require.NoError(t, prefill.c.ExpectSend(prefill.ctx(), id, tok(id), "", prefill.poolID, pb, consumers, 30*time.Second))
	for r := range consumers {
		src = append(src, all[r*n:(r+1)*n])
	}
	for r, d := range ranks {
		if d == nil {
			dst = append(dst, nil)
			continue
		}
		dst = append(dst, readRank(t, d, id, pb[r*n:(r+1)*n]))
	}
	return src, dst, pb
}

// readRank issues rank d's part of a pull of the prefill blocks remote.
func readRank(t *testing.T, d *testHost, id string, remote []uint32) []uint32 {
	t.Helper()
	b, err := d.c.Alloc(d.ctx(), d.poolID, len(remote))
	require.NoError(t, err)
	require.NoError(t, d.c.Read(d.ctx(), id, tok(id), "prefill", true, client.Part{Pool: d.poolID, Local: b, Remote: remote}))
	return b
}

// TestRule9RanksAgreeBeforeAnyTransport: a rank started with another block
// size fails startup on every rank, with a message naming the rank and
// the field, and no rank ever starts its transport (rule 9).
func TestRule9RanksAgreeBeforeAnyTransport(t *testing.T) {
	rg := newRankGroup(t, "dec")
	hosts, errs := rg.start(rankSpec{blocks: 8}, rankSpec{blocks: 8, blockSize: 2 * testBlockSize})
	for r, err := range errs {
		require.Error(t, err, "rank %d started although rank 1's block size differs", r)
		assert.Nil(t, hosts[r])
		assert.ErrorIs(t, err, group.ErrModeMismatch, "rank %d", r)
		assert.Contains(t, err.Error(), `pools["kv"].block_size: rank 0 has 65536, rank 1 has 131072`, "rank %d", r)
		// The transport of a host is recorded when it starts: never here.
		pid := filepath.Join(filepath.Dir(rg.dir), "state", "hosts", "dec-"+string(rune('0'+r)), "transport.pid")
		assert.NoFileExists(t, pid, "rank %d started a transport before the ranks agreed", r)
	}

	// The same ranks in agreement start.
	rg2 := newRankGroup(t, "dec2")
	rg2.mustStart(rankSpec{blocks: 8}, rankSpec{blocks: 8})
}

// TestRule10RanksFailTogether: a request is reported on no rank before
// every rank is terminal; one rank's failure fails it on every rank, each
// with its own blocks invalid in the same reply; a live rank that never
// reports it is expired at the hold cap, its late success included; and a
// rank that dies fails what it left pending (rule 10).
func TestRule10RanksFailTogether(t *testing.T) {
	prefill := startHost(t, "prefill", 64, nil)
	rg := newRankGroup(t, "dec")
	cap := func(c *Config) { c.Escalation.Cap = 2 * time.Second; c.Metrics.Listen = "127.0.0.1:0" }
	d := rg.mustStart(rankSpec{blocks: 32, mod: cap}, rankSpec{blocks: 32, mod: cap, params: []string{"fault", "fail,after=0,post=1"}})
	for _, r := range d {
		require.NoError(t, r.c.ConnectPeer(r.ctx(), "prefill", client.RemoteRank{Address: prefill.h.MetadataAddr(), Pool: "kv"}))
	}

	t.Run("one rank fails: it fails on every rank", func(t *testing.T) {
		_, dst, _ := pullRanks(t, prefill, d, 2, "r1", 2)
		for r, h := range d {
			f := h.waitFinished("r1") // checks: invalid blocks in the reply that fails it
			require.Equal(t, []string{"r1"}, failedIDs(f), "rank %d", r)
			assert.ElementsMatch(t, refsOf(h.poolID, dst[r]), f.InvalidBlocks, "rank %d: its own blocks are invalid", r)
		}
		f := d[0].groupStatus()
		assert.Equal(t, uint64(1), f.UnionFailed, "rank 0 succeeded and failed in the union")
		// The engine API's Status shows the group's counters.
		st, err := d[0].c.Status(d[0].ctx())
		require.NoError(t, err)
		assert.Equal(t, uint64(1), st.GetUnionFailed())
		assert.Positive(t, st.GetGroupWrites(), "r1's terminal state was written to etcd")
		assert.Empty(t, st.GetPoisonedPools())
		// The metrics count the outcome the engine was given, the union's,
		// not the one rank 0 saw.
		m := scrape(t, d[0].h.MetricsAddr())
		assert.Contains(t, m, `custody_requests_total{outcome="failed"} 1`+"\n")
		assert.NotContains(t, m, `custody_requests_total{outcome="ok"}`, "rank 0 counted r1 as ok")
		assert.NotContains(t, m, `custody_bytes_moved_total{`, "rank 0 counted the bytes of a request that failed")
	})

	t.Run("held until every rank is terminal", func(t *testing.T) {
		src, dst, pb := pullRanks(t, prefill, []*testHost{d[0], nil}, 2, "r2", 2)
		d[0].waitGroup("r2 held", func(s GroupStatus) bool { return s.Held == 1 })
		f, err := d[0].c.GetFinished(d[0].ctx())
		require.NoError(t, err)
		assert.Empty(t, f.FinishedRecving, "rank 0 reported r2 before rank 1 was terminal")
		assert.Empty(t, f.Failed)
		dst[1] = readRank(t, d[1], "r2", pb[2:])
		for r, h := range d {
			f := h.waitFinished("r2")
			assert.Equal(t, []string{"r2"}, f.FinishedRecving, "rank %d", r)
			assert.Empty(t, f.Failed, "rank %d", r)
			sameBlocks(t, src[r], h.read(dst[r]), "rank "+string(rune('0'+r)))
			m := scrape(t, h.h.MetricsAddr())
			assert.Contains(t, m, `custody_requests_total{outcome="ok"} 1`+"\n", "rank %d", r)
			assert.Contains(t, m, `custody_requests_total{outcome="failed"} 1`+"\n", "rank %d: r1 counted once", r)
		}
		// Held back for the group or not, a request finished here is
		// forgotten by the host: nothing of r1 and r2 stays tracked.
		for r, h := range d {
			assert.Zero(t, h.tracked(), "rank %d still tracks requests it reported, or their blocks", r)
		}
	})

	t.Run("a rank that never reports is expired at the hold cap", func(t *testing.T) {
		_, dst, pb := pullRanks(t, prefill, []*testHost{d[0], nil}, 2, "r3", 2)
		f := d[0].waitFinished("r3")
		require.Equal(t, []string{"r3"}, failedIDs(f))
		assert.Contains(t, f.Failed[0].Reason, "past its hold cap for ranks [1]")
		assert.ElementsMatch(t, refsOf(d[0].poolID, dst[0]), f.InvalidBlocks)
		assert.Equal(t, uint64(1), d[0].groupStatus().Expired)
		st, err := d[0].c.Status(d[0].ctx())
		require.NoError(t, err)
		assert.Equal(t, uint64(1), st.GetGroupExpired())
		// Rank 1 finishes it late, with a success: the timeout wins.
		dst[1] = readRank(t, d[1], "r3", pb[2:])
		f = d[1].waitFinished("r3")
		require.Equal(t, []string{"r3"}, failedIDs(f))
		assert.Contains(t, f.Failed[0].Reason, "timed_out on rank 0")
		assert.ElementsMatch(t, refsOf(d[1].poolID, dst[1]), f.InvalidBlocks)
	})

	t.Run("a rank that dies fails what it left pending", func(t *testing.T) {
		pullRanks(t, prefill, []*testHost{d[0], nil}, 2, "r4", 2)
		d[0].waitGroup("r4 held", func(s GroupStatus) bool { return s.Held == 1 })
		require.NoError(t, d[1].stop())
		f := d[0].waitFinished("r4")
		require.Equal(t, []string{"r4"}, failedIDs(f))
		assert.Contains(t, f.Failed[0].Reason, "rank 1 was lost")
	})
}

// TestRule11PoisonIsTopologyWide: a block quarantined on one rank poisons
// its pool on every rank: new requests and allocations there are refused
// with FailedPrecondition naming the pool, and Status and metrics show it
// (rule 11).
func TestRule11PoisonIsTopologyWide(t *testing.T) {
	prefill := startHost(t, "prefill", 16, nil)
	rg := newRankGroup(t, "dec")
	spec := rankSpec{blocks: 16, params: []string{"fence", "initiated"}, mod: func(c *Config) { c.Escalation.Cap = time.Second }}
	d := rg.mustStart(spec, spec)
	for _, r := range d {
		require.NoError(t, r.c.ConnectPeer(r.ctx(), "prefill", client.RemoteRank{Address: prefill.h.MetadataAddr(), Pool: "kv"}))
	}
	// A push receive on rank 0 whose producer never writes: its lease ends,
	// and with an initiated-only fence nothing proves the producer stopped.
	b, err := d[0].c.Alloc(d[0].ctx(), d[0].poolID, 2)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		err = d[0].c.ExpectReceive(d[0].ctx(), "w1", tok("w1"), "prefill", d[0].poolID, b, 1, 100*time.Millisecond)
		return status.Code(err) != codes.Unavailable // the handshake runs
	}, 10*time.Second, time.Millisecond)
	require.NoError(t, err)

	for r, h := range d {
		h.waitGroup("kv poisoned", func(s GroupStatus) bool { return slices.Contains(s.Poisoned, "kv") })
		_, err := h.c.Alloc(h.ctx(), h.poolID, 1)
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "rank %d: %v", r, err)
		assert.Contains(t, err.Error(), `pool "kv"`)
		err = h.c.ExpectSend(h.ctx(), "s1", tok("s1"), "", h.poolID, []uint32{15}, 1, time.Second)
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "rank %d: %v", r, err)
		assert.Contains(t, err.Error(), `pool "kv"`)
		st, err := h.c.Status(h.ctx())
		require.NoError(t, err)
		assert.Equal(t, []string{"kv"}, st.PoisonedPools, "rank %d", r)
	}
	// Rank 0's request fails once the hold cap expires rank 1's silence,
	// with its blocks quarantined in the same reply.
	f := d[0].waitFinished("w1")
	require.Equal(t, []string{"w1"}, failedIDs(f))
	assert.ElementsMatch(t, refsOf(d[0].poolID, b), f.Quarantined)

	// An operator clears the record: the running ranks keep refusing the
	// pool until they restart (poison is sticky).
	op, err := group.Dial("dec", group.CoordinatorConfig{Endpoints: []string{rg.etcd}}, 0)
	require.NoError(t, err)
	defer op.Close()
	_, err = op.ClearPoison(d[1].ctx(), "kv")
	require.NoError(t, err)
	for r, h := range d {
		require.Eventually(t, func() bool { _, ok := h.h.group.IsPoisoned("kv"); return !ok }, 20*time.Second, time.Millisecond,
			"rank %d's watch never saw the record cleared", r)
		_, err := h.c.Alloc(h.ctx(), h.poolID, 1)
		require.Equal(t, codes.FailedPrecondition, status.Code(err), "rank %d refused the pool no more once the record was cleared: %v", r, err)
	}
}

// TestRule12TeardownOnConstructorFailure: a rank whose host fails after its
// transport started (a pool that cannot be registered) kills the
// transport before it leaves the group, and leaves nothing running; the
// other rank sees it lost (rule 12).
func TestRule12TeardownOnConstructorFailure(t *testing.T) {
	rg := newRankGroup(t, "dec")
	missing := func(c *Config) {
		c.Pools = append(c.Pools, PoolConfig{Name: "aux", Path: filepath.Join(rg.dir, "no-such-file"), BlockSize: 4096, Blocks: 4})
	}
	hosts, errs := rg.start(rankSpec{blocks: 8, mod: missing}, rankSpec{blocks: 8, mod: missing})
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		assert.Nil(t, hosts[r])
		assert.Contains(t, err.Error(), "config: pools")
		raw, rerr := os.ReadFile(filepath.Join(filepath.Dir(rg.dir), "state", "hosts", "dec-"+string(rune('0'+r)), "transport.pid"))
		require.NoError(t, rerr, "rank %d: its transport started before the pool failed", r)
		var pid, start int
		_, serr := fmt.Sscan(string(raw), &pid, &start)
		require.NoError(t, serr)
		// Kill reaped it: signal 0 finds no such process.
		assert.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "rank %d: transport pid %d still runs after New failed", r, pid)
	}
}

// TestPeersByNameAcrossEngines: a decode engine of two ranks connects to a
// prefill engine of two ranks by the engine's name alone, through the
// group directory; each decode rank pulls from both prefill ranks
// (heterogeneous TP); every byte arrives and every rank of both engines
// reports the request once every rank is terminal.
func TestPeersByNameAcrossEngines(t *testing.T) {
	pre := newRankGroup(t, "pre")
	p := pre.mustStart(rankSpec{blocks: 8}, rankSpec{blocks: 8})
	dec := newRankGroupOn(t, "dec", pre)
	d := dec.mustStart(rankSpec{blocks: 8}, rankSpec{blocks: 8})
	for _, r := range d {
		require.NoError(t, r.c.ConnectPeer(r.ctx(), "prefill", client.RemoteRank{Address: "engine:pre", Pool: "kv"}))
	}
	// Each prefill rank pins one block per decode rank.
	var src [2][][]byte
	var pb [2][]uint32
	for r, h := range p {
		b, err := h.c.Alloc(h.ctx(), h.poolID, 2)
		require.NoError(t, err)
		pb[r], src[r] = b, h.fill(b)
		require.NoError(t, h.c.ExpectSend(h.ctx(), "h1", tok("h1"), "", h.poolID, b, 2, 30*time.Second))
	}
	var dst [2][]uint32
	for q, h := range d {
		b, err := h.c.Alloc(h.ctx(), h.poolID, 2)
		require.NoError(t, err)
		dst[q] = b
		require.NoError(t, h.c.Read(h.ctx(), "h1", tok("h1"), "prefill", true,
			client.Part{Pool: h.poolID, Local: b[:1], Rank: 0, Remote: pb[0][q : q+1]},
			client.Part{Pool: h.poolID, Local: b[1:], Rank: 1, Remote: pb[1][q : q+1]}))
	}
	for q, h := range d {
		f := h.waitFinished("h1")
		assert.Equal(t, []string{"h1"}, f.FinishedRecving, "decode rank %d", q)
		assert.Empty(t, f.Failed, "decode rank %d", q)
		sameBlocks(t, [][]byte{src[0][q], src[1][q]}, h.read(dst[q]), "decode rank "+string(rune('0'+q)))
	}
	for r, h := range p {
		f := h.waitFinished("h1")
		assert.Equal(t, []string{"h1"}, f.FinishedSending, "prefill rank %d", r)
		assert.Empty(t, f.Failed, "prefill rank %d", r)
	}
	// A host is found by its own name as well, with the name its
	// certificate must carry; an unknown one is a clear error.
	got, wants, err := d[0].h.resolveRanks(d[0].ctx(), "x", []RemoteRank{{Address: "etcd:pre-1", Pool: "kv"}})
	require.NoError(t, err)
	assert.Equal(t, []RemoteRank{{Address: p[1].h.MetadataAddr(), Pool: "kv"}}, got)
	assert.Equal(t, []string{"pre-1"}, wants)
	_, _, err = d[0].h.resolveRanks(d[0].ctx(), "x", []RemoteRank{{Address: "etcd:nobody", Pool: "kv"}})
	assert.ErrorIs(t, err, group.ErrPeerNotFound)
}
