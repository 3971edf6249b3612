package group

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/host/group/ledger"
	"github.com/custody-dev/custody/sdk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// bound is how long a test waits for an event before it fails. It bounds a
// wait; it never orders anything.
const bound = 20 * time.Second

// testMode is a valid effective mode.
func testMode() Mode {
	return Mode{
		Transport:        "fake",
		ContractMajor:    sdk.ContractMajor,
		Capabilities:     Capabilities{Remote: true, Notifications: true},
		FenceScope:       sdk.FenceInitiatedAndIncoming,
		Pools:            []PoolMode{{Name: "kv", BlockSize: 4096, Blocks: 64}, {Name: "aux", BlockSize: 512, Blocks: 8}},
		EscalationPolicy: "fence",
		EscalationCap:    120 * time.Second,
	}
}

// cluster is a test's rank group: rank 0 runs the embedded etcd.
type cluster struct {
	t      *testing.T
	engine string
	size   int
	dir    string
	addr   string
	ranks  []*Group
}

func rankConfig(engine string, rank, size int, dir, listen string) Config {
	return Config{
		Engine: engine, Rank: rank, Size: size,
		Coordinator: CoordinatorConfig{Embedded: &EmbeddedConfig{Dir: dir, Listen: listen}},
		Timeouts:    Timeouts{Dial: 10 * time.Second, Op: 5 * time.Second, Join: 10 * time.Second, LeaseTTL: 30 * time.Second},
	}
}

// newCluster opens (but does not join) size ranks of one engine.
func newCluster(t *testing.T, size int) *cluster {
	t.Helper()
	c := &cluster{t: t, engine: "e1", size: size, dir: t.TempDir(), ranks: make([]*Group, size)}
	c.ranks[0] = c.open(0, "127.0.0.1:0")
	c.addr = c.ranks[0].CoordinatorAddr()
	for r := 1; r < size; r++ {
		c.ranks[r] = c.open(r, c.addr)
	}
	t.Cleanup(c.close)
	return c
}

func (c *cluster) open(rank int, listen string) *Group {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	g, err := Open(ctx, rankConfig(c.engine, rank, c.size, c.dir, listen), nil)
	require.NoError(c.t, err)
	return g
}

// reopen closes rank and opens a new process for it.
func (c *cluster) reopen(rank int) *Group {
	c.t.Helper()
	require.NoError(c.t, c.ranks[rank].Close())
	listen := c.addr
	c.ranks[rank] = c.open(rank, listen)
	return c.ranks[rank]
}

// close closes rank 0 last, since it runs etcd.
func (c *cluster) close() {
	for r := len(c.ranks) - 1; r >= 0; r-- {
		if c.ranks[r] != nil {
			_ = c.ranks[r].Close()
		}
	}
}

// joinAll joins every rank concurrently with modes[r] (testMode when nil)
// and returns each rank's error.
func (c *cluster) joinAll(modes map[int]Mode) []error {
	errs := make([]error, c.size)
	var wg sync.WaitGroup
	for r, g := range c.ranks {
		m := testMode()
		if mm, ok := modes[r]; ok {
			m = mm
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), bound)
			defer cancel()
			errs[r] = g.Join(ctx, m)
		}()
	}
	wg.Wait()
	return errs
}

func (c *cluster) mustJoin() {
	c.t.Helper()
	for r, err := range c.joinAll(nil) {
		require.NoError(c.t, err, "rank %d", r)
	}
}

// client is a raw etcd client, for writing what a broken rank would.
func (c *cluster) client() *clientv3.Client {
	c.t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.addr}, DialTimeout: 5 * time.Second})
	require.NoError(c.t, err)
	c.t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// waitFor waits, woken by g.Changed, until cond holds.
func waitFor(t *testing.T, g *Group, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(bound)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-g.Changed():
		case <-deadline.C:
			t.Fatalf("rank %d: %s did not happen within %v", g.Rank(), what, bound)
		}
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	return ctx
}

func rid(i int) string { return fmt.Sprintf("req-%03d", i) }

func clientPrefix() clientv3.OpOption { return clientv3.WithPrefix() }

// published reads, straight from etcd, the states rank's records hold,
// each rank's member's own alike.
func (c *cluster) published(rank int) map[core.RequestID]State {
	c.t.Helper()
	g := c.ranks[0]
	resp, err := c.client().Get(ctxT(c.t), g.keys.Records()+strconv.Itoa(rank)+"/", clientv3.WithPrefix())
	require.NoError(c.t, err)
	out := map[core.RequestID]State{}
	for _, kv := range resp.Kvs {
		_, member, _, err := ledger.ParseRecordKey(strings.TrimPrefix(string(kv.Key), g.keys.Records()), c.size)
		require.NoError(c.t, err)
		entries, err := ledger.DecodeStates(kv.Value, rank, member)
		require.NoError(c.t, err)
		for _, e := range entries {
			out[e.ID] = e.State
		}
	}
	return out
}

// settle runs every rank's round (Report, Sync, Resolve) twice: what each
// may delete goes out, and each folds what the others deleted.
func (c *cluster) settle() {
	c.t.Helper()
	for range 2 {
		for _, g := range c.ranks {
			require.NoError(c.t, g.Report(ctxT(c.t), nil))
			require.NoError(c.t, g.Sync(ctxT(c.t)))
			_, err := g.Resolve(ctxT(c.t), nil)
			require.NoError(c.t, err)
		}
	}
}

// keysLeft lists the request and states keys still in etcd.
func (c *cluster) keysLeft() []string {
	c.t.Helper()
	var left []string
	g := c.ranks[0]
	for _, prefix := range []string{g.keys.Requests(), g.keys.Records()} {
		resp, err := c.client().Get(ctxT(c.t), prefix, clientPrefix())
		require.NoError(c.t, err)
		for _, kv := range resp.Kvs {
			left = append(left, string(kv.Key))
		}
	}
	return left
}

// states is a states record's value as rank's member would write it.
func states(rank int, member string, ts ...Terminal) string {
	return ledger.EncodeStates(rank, member, ts)
}
