package host

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/client"
	"github.com/custody-dev/custody/host/group"
)

// rankSpec is one rank of a test engine.
type rankSpec struct {
	blocks int
	// blockSize overrides testBlockSize (a rank that disagrees).
	blockSize uint64
	params    []string
	mod       func(*Config)
}

// rankGroup is a test's engine of several ranks, each a host served in
// this process with its own fake transport process, agreeing through a
// real etcd embedded in rank 0's host.
type rankGroup struct {
	t      *testing.T
	engine string
	etcd   string // rank 0's etcd client address
	dir    string
	// external: the etcd is another group's (rank 0 runs none).
	external bool
}

func newRankGroup(t *testing.T, engine string) *rankGroup {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return &rankGroup{t: t, engine: engine, etcd: addr, dir: t.TempDir()}
}

// newRankGroupOn is a second engine agreeing through the etcd of another
// group's rank 0 (started first, stopped last).
func newRankGroupOn(t *testing.T, engine string, other *rankGroup) *rankGroup {
	return &rankGroup{t: t, engine: engine, etcd: other.etcd, dir: t.TempDir(), external: true}
}

// start serves every rank at once (Join waits for all of them) and
// returns each rank's host, or the error its Serve returned.
func (rg *rankGroup) start(specs ...rankSpec) ([]*testHost, []error) {
	t := rg.t
	t.Helper()
	hosts := make([]*testHost, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for r, s := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hosts[r], errs[r] = rg.serve(r, len(specs), s)
		}()
	}
	wg.Wait()
	// Rank 0 runs the etcd: it stops last (cleanups run last in, first out).
	for r, th := range hosts {
		if th != nil {
			t.Cleanup(func() { require.NoError(t, th.stop(), "rank %d stopped with an error", r) })
		}
	}
	return hosts, errs
}

// mustStart is start, every rank required to come up.
func (rg *rankGroup) mustStart(specs ...rankSpec) []*testHost {
	rg.t.Helper()
	hosts, errs := rg.start(specs...)
	for r, err := range errs {
		require.NoError(rg.t, err, "rank %d", r)
	}
	return hosts
}

func (rg *rankGroup) serve(rank, size int, s rankSpec) (*testHost, error) {
	t := rg.t
	name := rg.engine + "-" + string(rune('0'+rank))
	dir := filepath.Join(rg.dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	bs := s.blockSize
	if bs == 0 {
		bs = testBlockSize
	}
	pool := filepath.Join(dir, "kv.region")
	if err := os.WriteFile(pool, make([]byte, s.blocks*int(bs)), 0o600); err != nil {
		return nil, err
	}
	p := map[string]string{"dir": dir, "peer_dirs": filepath.Dir(filepath.Dir(dir))}
	for i := 0; i+1 < len(s.params); i += 2 {
		p[s.params[i]] = s.params[i+1]
	}
	gc := &group.Config{
		Engine: rg.engine, Rank: rank, Size: size,
		Coordinator: group.CoordinatorConfig{Embedded: &group.EmbeddedConfig{Dir: filepath.Join(rg.dir, "etcd"), Listen: rg.etcd}},
		Timeouts:    group.Timeouts{Dial: 10 * time.Second, Join: 20 * time.Second, LeaseTTL: 30 * time.Second},
	}
	if rank != 0 {
		gc.Coordinator.Embedded.Dir = ""
	}
	if rg.external {
		gc.Coordinator = group.CoordinatorConfig{Endpoints: []string{rg.etcd}}
	}
	cfg := &Config{
		Name:      name,
		Transport: TransportConfig{Path: fakePlugin, Params: p, CallTimeout: 5 * time.Second},
		Pools:     []PoolConfig{{Name: "kv", Path: pool, BlockSize: bs, Blocks: uint64(s.blocks)}},
		Metadata:  MetadataConfig{Listen: "127.0.0.1:0"},
		Engine:    EngineConfig{Socket: filepath.Join(dir, "engine.sock")},
		LogLevel:  "warn",
		StateDir:  filepath.Join(filepath.Dir(rg.dir), "state"), // as startHost's: one CA per test
		Group:     gc,
	}
	cfg.defaults()
	if s.mod != nil {
		s.mod(cfg)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan *Host, 1)
	served := make(chan error, 1)
	log := hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Warn, Output: testWriter{t}})
	go func() { served <- Serve(ctx, cfg, log, func(h *Host) { ready <- h }) }()
	var h *Host
	select {
	case h = <-ready:
	case err := <-served:
		cancel()
		return nil, err
	case <-time.After(60 * time.Second):
		cancel()
		t.Errorf("rank %d did not start within 60s", rank)
		return nil, context.DeadlineExceeded
	}
	c, err := client.Dial(cfg.Engine.Socket)
	if err != nil {
		cancel()
		<-served
		return nil, err
	}
	th := &testHost{t: t, h: h, c: c, cfg: cfg, pool: pool, poolID: 1, bs: bs}
	stopped := false
	th.stop = func() error {
		if stopped {
			return nil
		}
		stopped = true
		c.Close()
		cancel()
		select {
		case err := <-served:
			return err
		case <-time.After(30 * time.Second):
			t.Errorf("rank %d did not stop within 30s", rank)
			return nil
		}
	}
	return th, nil
}

// groupStatus is a ranked host's view of its group, read on its owner.
func (th *testHost) groupStatus() GroupStatus {
	th.t.Helper()
	st, err := th.h.Status(th.ctx())
	require.NoError(th.t, err)
	require.NotNil(th.t, st.Group)
	return *st.Group
}

// waitGroup waits, polling the host's status, until cond holds of it.
func (th *testHost) waitGroup(what string, cond func(GroupStatus) bool) {
	th.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond(th.groupStatus()) {
		if time.Now().After(deadline) {
			th.t.Fatalf("%s: %s did not happen within 20s: %+v", th.cfg.Name, what, th.groupStatus())
		}
		time.Sleep(time.Millisecond) // pacing between status reads
	}
}

// tracked is how many requests the host tracks, with their blocks (read on
// its owner goroutine).
func (th *testHost) tracked() (reqs int) {
	th.t.Helper()
	require.NoError(th.t, th.h.do(th.ctx(), func(context.Context) error {
		reqs = len(th.h.reqs)
		return nil
	}))
	return reqs
}
