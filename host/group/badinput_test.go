package group

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/host/group/ledger"
)

// TestBadMemberRecordsFailJoin: a rank whose member record is malformed or
// oversized fails Join on the other ranks, naming it; nothing joins.
func TestBadMemberRecordsFailJoin(t *testing.T) {
	for _, tc := range []struct{ name, value, want string }{
		{"malformed", `{"proto":3,"rank":1,`, "rank 1's member record does not decode"},
		{"oversized", `{"proto":3,"pad":"` + strings.Repeat("x", ledger.MaxMemberRecord) + `"}`, "over the 65536 limit"},
		{"names another rank", `{"proto":3,"engine":"e1","rank":0,"size":2,"member":"impostor","mode":{}}`, "rank 1's member record names rank 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 2)
			_, err := c.client().Put(ctxT(t), c.ranks[0].keys.Member(1), tc.value)
			require.NoError(t, err)
			err = c.ranks[0].Join(ctxT(t), testMode())
			require.ErrorIs(t, err, ErrMalformed)
			assert.Contains(t, err.Error(), tc.want)
			_, err = c.ranks[0].Resolve(ctxT(t), nil)
			require.ErrorIs(t, err, ErrNotJoined, "a refused Join joined")
		})
	}
}

// TestForeignRequestKeysChangeNothing: records another rank writes for ids
// this rank never reported, and keys that do not parse, are kept out of
// this rank's requests: its own requests resolve as they would, and it
// never answers for the foreign ids.
func TestForeignRequestKeysChangeNothing(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	cli := c.client()
	g0 := c.ranks[0]
	m1 := c.ranks[1].Member()
	real := states(1, m1, Terminal{Request: "real", State: Succeeded})
	for key, value := range map[string]string{
		g0.keys.Record(1, m1, 1000):           states(1, m1, Terminal{Request: "ghost", State: Succeeded}), // an id rank 0 never reported
		g0.keys.Records() + "7/" + m1 + "/1":  real,                                                        // no rank of the group
		g0.keys.Records() + "01/" + m1 + "/1": real,                                                        // no canonical rank
		g0.keys.Records() + "1/" + m1 + "/01": real,                                                        // no canonical sequence number
		g0.keys.Records() + "1/" + m1 + "/0":  real,
		g0.keys.Records() + "1/" + m1:         real, // no sequence number
		g0.keys.Records() + "1/%zz/1":         real, // no path-escaped member
		g0.keys.Requests() + "%zz/t/1":        real, // no path-escaped id
		g0.keys.Requests() + "no-kind":        real,
		g0.keys.Request("real") + "x/1":       real, // no kind of key
		g0.keys.Request("real") + "s/1":       real, // a state key of group protocol 2
		g0.keys.Request("real") + "t/rank-1":  real, // no rank
	} {
		_, err := cli.Put(ctxT(t), key, value)
		require.NoError(t, err)
	}
	report(t, g0, "real", Succeeded, "")
	require.False(t, resolve(t, g0, "real").Resolved, "a key of no rank stood in for rank 1")
	report(t, c.ranks[1], "real", Failed, "rank 1 failed")
	o := resolve(t, g0, "real")
	require.True(t, o.Resolved)
	assert.Equal(t, Failed, o.State)
	assert.Equal(t, 1, o.Rank)
	_, err := g0.Resolve(ctxT(t), []core.RequestID{"ghost"})
	require.ErrorIs(t, err, ErrUnknownRequest)
	assert.Equal(t, 1, g0.Stats().InFlight, "rank 0 tracks only what it reported")
}

// TestMalformedExpiryFailsSafe: a malformed expiry record still expires the
// request, as a timeout of the rank whose key holds it: it can never make
// a request succeed.
func TestMalformedExpiryFailsSafe(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	report(t, c.ranks[0], "x", Succeeded, "")
	_, err := c.client().Put(ctxT(t), c.ranks[0].keys.Expiry("x", 1), "\x00garbage")
	require.NoError(t, err)
	o := resolve(t, c.ranks[0], "x")
	require.True(t, o.Resolved)
	assert.Equal(t, TimedOut, o.State)
	assert.Equal(t, 1, o.Rank)
	assert.Contains(t, o.Reason, "malformed expiry record")
}

// blackHole accepts connections and never answers, as an etcd too slow to
// serve would.
func blackHole(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
	})
	return l.Addr().String()
}

// TestCoordinatorSlowAtStartup: Open against an etcd that accepts and
// never answers fails within its dial bound with ErrCoordinator, naming
// the endpoint, and leaves nothing running (goleak, at the package's end).
func TestCoordinatorSlowAtStartup(t *testing.T) {
	addr := blackHole(t)
	cfg := Config{Engine: "e1", Rank: 1, Size: 2,
		Coordinator: CoordinatorConfig{Endpoints: []string{addr}},
		Timeouts:    Timeouts{Dial: 300 * time.Millisecond}}
	g, err := Open(context.Background(), cfg, nil)
	require.Nil(t, g)
	require.ErrorIs(t, err, ErrCoordinator)
	assert.Contains(t, err.Error(), addr)
}

// gate is a TCP proxy to etcd that can be paused: while paused, nothing
// crosses it either way (an etcd that stopped answering without closing).
type gate struct {
	mu     sync.Mutex
	paused bool
	cond   *sync.Cond
}

func newGate(t *testing.T, backend string) (*gate, string) {
	g := &gate{}
	g.cond = sync.NewCond(&g.mu)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", backend)
			if err != nil {
				_ = in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); g.pipe(out, in) }()
			go func() { defer wg.Done(); g.pipe(in, out) }()
		}
	}()
	t.Cleanup(func() {
		g.resume()
		_ = l.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return g, l.Addr().String()
}

func (g *gate) pipe(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			g.mu.Lock()
			for g.paused {
				g.cond.Wait()
			}
			g.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (g *gate) pause() { g.mu.Lock(); g.paused = true; g.mu.Unlock() }
func (g *gate) resume() {
	g.mu.Lock()
	g.paused = false
	g.cond.Broadcast()
	g.mu.Unlock()
}

// TestCoordinatorSlowMidRun: while etcd stops answering one rank (without
// closing its connection), that rank's Report returns within its bound
// with ErrCoordinator and keeps the state; no rank resolves the request
// meanwhile; once etcd answers again the state lands and every rank
// resolves it the same.
func TestCoordinatorSlowMidRun(t *testing.T) {
	c := newCluster(t, 2)
	gt, addr := newGate(t, c.addr)
	// Rank 1 reaches etcd through the gate.
	require.NoError(t, c.ranks[1].Close())
	cfg := rankConfig(c.engine, 1, 2, "", "")
	cfg.Coordinator = CoordinatorConfig{Endpoints: []string{addr}}
	g1, err := Open(ctxT(t), cfg, nil)
	require.NoError(t, err)
	c.ranks[1] = g1
	c.mustJoin()

	report(t, c.ranks[0], "x", Succeeded, "")
	gt.pause()
	g1.cfg.Timeouts.Op = 300 * time.Millisecond
	err = g1.Report(context.Background(), []Terminal{{Request: "x", State: Succeeded}})
	require.ErrorIs(t, err, ErrCoordinator)
	out, err := g1.Resolve(context.Background(), []core.RequestID{"x"})
	require.NoError(t, err)
	assert.False(t, out[0].Resolved, "rank 1 resolved while etcd did not answer it: %+v", out[0])
	assert.False(t, resolve(t, c.ranks[0], "x").Resolved, "rank 0 resolved without rank 1's state")

	gt.resume()
	g1.cfg.Timeouts.Op = 5 * time.Second
	require.NoError(t, g1.Report(ctxT(t), nil), "the retained state is published")
	for r, g := range c.ranks {
		o := resolve(t, g, "x")
		require.True(t, o.Resolved, "rank %d", r)
		assert.Equal(t, Succeeded, o.State, "rank %d", r)
	}
}
