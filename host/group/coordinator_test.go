package group

import (
	"context"
	"errors"
	"net"
	"os"
	"runtime/debug"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/core"
)

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// TestCoordinatorUnreachableAtStartup: Open against an etcd that is not
// there fails within its dial bound, says so, and leaves nothing running
// (goleak checks the last part at the end of the package's tests).
func TestCoordinatorUnreachableAtStartup(t *testing.T) {
	cfg := Config{Engine: "e1", Rank: 1, Size: 2,
		Coordinator: CoordinatorConfig{Endpoints: []string{deadAddr(t)}},
		Timeouts:    Timeouts{Dial: 300 * time.Millisecond}}
	g, err := Open(context.Background(), cfg, nil)
	require.Nil(t, g)
	require.ErrorIs(t, err, ErrCoordinator)
	assert.Contains(t, err.Error(), "granting rank 1's membership lease")
	assert.Contains(t, err.Error(), cfg.Coordinator.Endpoints[0])
}

// TestCoordinatorLostMidRun: when etcd stops answering, every call that
// needs it returns within its bound with ErrCoordinator; a terminal state accepted meanwhile
// is not lost: it is published once etcd is back.
func TestCoordinatorLostMidRun(t *testing.T) {
	c := newCluster(t, 2)
	c.mustJoin()
	g1 := c.ranks[1]
	g1.cfg.Timeouts.Op = 300 * time.Millisecond
	// Rank 0 runs etcd: stopping it stops the coordinator.
	require.NoError(t, c.ranks[0].Close())

	err := g1.Report(context.Background(), []Terminal{{Request: "kept", State: Failed, Reason: "r"}})
	require.ErrorIs(t, err, ErrCoordinator)
	// Resolve reads only the watched view: it answers, and the request
	// stays pending (nothing lets a block go early); Outcome, which first
	// syncs with etcd, says etcd is gone.
	out, err := g1.Resolve(context.Background(), []core.RequestID{"kept"})
	require.NoError(t, err)
	assert.False(t, out[0].Resolved, "resolved without etcd: %+v", out[0])
	_, err = g1.Outcome(context.Background(), "kept")
	require.ErrorIs(t, err, ErrCoordinator)
	require.ErrorIs(t, g1.Poison(context.Background(), "kv", "r"), ErrCoordinator)
	_, ok := g1.IsPoisoned("kv")
	assert.True(t, ok, "a poison etcd did not take still holds locally")
	_, err = g1.Lookup(context.Background(), "p")
	require.ErrorIs(t, err, ErrCoordinator)

	// etcd comes back from its data directory on the same address; rank
	// 1's lease survived (its TTL restarts), so its retained state lands.
	// The client reconnects on its own backoff, which grew while etcd was
	// gone: a Report can fail until then, and the state must still be
	// held, not re-reported, when one gets through.
	c.ranks[0] = c.open(0, c.addr)
	g1.cfg.Timeouts.Op = 5 * time.Second
	require.Eventually(t, func() bool {
		err := g1.Report(ctxT(t), nil)
		require.True(t, err == nil || errors.Is(err, ErrCoordinator), "Report after etcd came back: %v", err)
		return err == nil
	}, bound, 10*time.Millisecond, "no Report got through after etcd came back")
	st, ok := c.published(1)["kept"]
	require.True(t, ok, "the report accepted while etcd was down was lost")
	assert.Equal(t, Failed, st)
}

// TestSoloGroup: a group of size 1 needs no coordinator and passes every
// call through locally.
func TestSoloGroup(t *testing.T) {
	g, err := Open(ctxT(t), Config{Engine: "e1", Rank: 0, Size: 1}, nil)
	require.NoError(t, err)
	defer g.Close()
	require.NoError(t, g.Join(ctxT(t), testMode()))
	require.NoError(t, g.Report(ctxT(t), []Terminal{{Request: "a", State: Succeeded}, {Request: "b", State: TimedOut, Reason: "cap"}}))
	out, err := g.Resolve(ctxT(t), []core.RequestID{"a", "b"})
	require.NoError(t, err)
	assert.True(t, out[0].Resolved)
	assert.Equal(t, Succeeded, out[0].State)
	assert.Equal(t, TimedOut, out[1].State)
	assert.Equal(t, "cap", out[1].Reason)
	require.NoError(t, g.Poison(ctxT(t), "kv", "q"))
	assert.Equal(t, []string{"kv"}, pools(g.Poisoned()))
	require.NoError(t, g.Publish(ctxT(t), PeerAddress{Name: "me", MetadataAddr: "127.0.0.1:1", Compat: compat}))
	_, err = g.Lookup(ctxT(t), "other")
	require.ErrorIs(t, err, ErrPeerNotFound)
	assert.Zero(t, g.Stats().WriteTxns+g.Stats().ReadTxns)
	assert.Empty(t, g.CoordinatorAddr())
}

// TestConfigValidate: every bad field is named.
func TestConfigValidate(t *testing.T) {
	ok := rankConfig("e1", 1, 2, "", "127.0.0.1:2379")
	require.NoError(t, ok.Validate())
	for _, tc := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"engine", func(c *Config) { c.Engine = "a/b" }, "group.engine"},
		{"size", func(c *Config) { c.Size = 0 }, "group.size"},
		{"rank", func(c *Config) { c.Rank = 2 }, "group.rank"},
		{"no coordinator", func(c *Config) { c.Coordinator = CoordinatorConfig{} }, "group.coordinator.endpoints: required"},
		{"both", func(c *Config) { c.Coordinator.Endpoints = []string{"h:1"} }, "group.coordinator.embedded: set either"},
		{"endpoint", func(c *Config) { c.Coordinator = CoordinatorConfig{Endpoints: []string{"nohost"}} }, "group.coordinator.endpoints[0]"},
		{"tls pair", func(c *Config) {
			c.Coordinator = CoordinatorConfig{Endpoints: []string{"https://h:1"}, TLS: TLSConfig{CertFile: "c"}}
		}, "group.coordinator.tls.cert_file"},
		{"tls embedded", func(c *Config) { c.Coordinator.TLS.CAFile = "ca" }, "group.coordinator.tls: not supported"},
		{"listen", func(c *Config) { c.Coordinator.Embedded.Listen = "2379" }, "group.coordinator.embedded.listen"},
		{"port 0 off rank 0", func(c *Config) { c.Coordinator.Embedded.Listen = "127.0.0.1:0" }, "give rank 0's real port"},
		{"dir on rank 0", func(c *Config) { c.Rank = 0 }, "group.coordinator.embedded.dir"},
		{"ttl", func(c *Config) { c.Timeouts.LeaseTTL = 1500 * time.Millisecond }, "group.timeouts.lease_ttl"},
		{"negative", func(c *Config) { c.Timeouts.Op = -1 }, "group.timeouts.op"},
		{"max txn ops", func(c *Config) { c.Coordinator.MaxTxnOps = 2 }, "group.coordinator.max_txn_ops"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := rankConfig("e1", 1, 2, "", "127.0.0.1:2379")
			tc.change(&c)
			require.ErrorContains(t, c.Validate(), tc.want)
		})
	}
	solo := Config{Engine: "e1", Size: 1}
	require.NoError(t, solo.Validate(), "a group of one needs no coordinator")
}

// TestEmbeddedEtcdRaisesGCPercent: the process that runs the embedded etcd
// collects garbage at embeddedGCPercent unless GOGC says otherwise; a rank
// that only connects leaves the process's setting alone.
func TestEmbeddedEtcdRaisesGCPercent(t *testing.T) {
	if os.Getenv("GOGC") != "" {
		t.Skip("GOGC is set: the embedded etcd keeps the operator's choice")
	}
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	dir := t.TempDir()
	g0, err := Open(ctxT(t), rankConfig("gc", 0, 2, dir, "127.0.0.1:0"), nil)
	require.NoError(t, err)
	defer g0.Close()
	assert.Equal(t, embeddedGCPercent, debug.SetGCPercent(100), "after the embedded etcd started")
	g1, err := Open(ctxT(t), rankConfig("gc", 1, 2, dir, g0.CoordinatorAddr()), nil)
	require.NoError(t, err)
	defer g1.Close()
	assert.Equal(t, 100, debug.SetGCPercent(100), "after a rank connected to it")
}
