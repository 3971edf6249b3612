package host

import (
	"bytes"
	"context"
	"crypto/rand"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/custody-dev/custody/client"
)

// testHost is a host served in this process (its transport a real fake
// plugin process), an engine client for it, and its pool file.
type testHost struct {
	t      *testing.T
	h      *Host
	c      *client.Client
	cfg    *Config
	pool   string // region file
	poolID uint32
	bs     uint64
	// stop ends a ranked test host before the test's end (ranks_harness_test.go).
	stop func() error
	// logs holds what the host logged.
	logs *lockedBuffer
}

// count is how many lines of the log contain s.
func (l *lockedBuffer) count(s string) int {
	n := 0
	for _, line := range strings.Split(l.String(), "\n") {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

const testBlockSize = 64 << 10

// startHost serves a host named name with one pool "kv" of blocks blocks,
// transport params as given, and stops it at the end of the test.
func startHost(t *testing.T, name string, blocks int, mod func(*Config), params ...string) *testHost {
	t.Helper()
	dir := t.TempDir()
	pool := filepath.Join(dir, "kv.region")
	require.NoError(t, os.WriteFile(pool, make([]byte, blocks*testBlockSize), 0o600))
	p := map[string]string{"dir": dir, "peer_dirs": filepath.Dir(dir)} // the test's hosts share a parent
	for i := 0; i+1 < len(params); i += 2 {
		p[params[i]] = params[i+1]
	}
	cfg := &Config{
		Name:      name,
		Transport: TransportConfig{Path: fakePlugin, Params: p, CallTimeout: 5 * time.Second},
		Metadata:  MetadataConfig{Listen: "127.0.0.1:0"},
		Engine:    EngineConfig{Socket: filepath.Join(dir, "engine.sock")},
		LogLevel:  "warn",
		StateDir:  filepath.Join(filepath.Dir(dir), "state"), // one per test, shared by its hosts
	}
	cfg.defaults()
	if mod != nil {
		mod(cfg)
	}
	require.NoError(t, cfg.Validate())

	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan *Host, 1)
	served := make(chan error, 1)
	logs := &lockedBuffer{}
	log := hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.LevelFromString(cfg.LogLevel), Output: io.MultiWriter(testWriter{t}, logs)})
	go func() { served <- Serve(ctx, cfg, log, func(h *Host) { ready <- h }) }()
	var h *Host
	select {
	case h = <-ready:
	case err := <-served:
		cancel()
		t.Fatalf("host %s did not start: %v", name, err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("host %s did not start within 30s", name)
	}
	c, err := client.Dial(cfg.Engine.Socket)
	require.NoError(t, err)
	th := &testHost{t: t, h: h, c: c, cfg: cfg, pool: pool, bs: testBlockSize, logs: logs}
	t.Cleanup(func() {
		c.Close()
		cancel()
		select {
		case err := <-served:
			require.NoError(t, err, "host %s stopped with an error", name)
		case <-time.After(30 * time.Second):
			t.Errorf("host %s did not stop within 30s", name)
		}
	})
	th.poolID, err = c.RegisterPool(th.ctx(), "kv", pool, 0, testBlockSize, uint32(blocks))
	require.NoError(t, err)
	return th
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

func (th *testHost) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	th.t.Cleanup(cancel)
	return ctx
}

// fill writes random bytes into blocks and returns them.
func (th *testHost) fill(blocks []uint32) [][]byte {
	th.t.Helper()
	f, err := os.OpenFile(th.pool, os.O_RDWR, 0)
	require.NoError(th.t, err)
	defer f.Close()
	out := make([][]byte, len(blocks))
	for i, b := range blocks {
		out[i] = make([]byte, th.bs)
		_, _ = rand.Read(out[i])
		_, err := f.WriteAt(out[i], int64(b)*int64(th.bs))
		require.NoError(th.t, err)
	}
	return out
}

// read returns the bytes of blocks.
func (th *testHost) read(blocks []uint32) [][]byte {
	th.t.Helper()
	f, err := os.Open(th.pool)
	require.NoError(th.t, err)
	defer f.Close()
	out := make([][]byte, len(blocks))
	for i, b := range blocks {
		out[i] = make([]byte, th.bs)
		_, err := f.ReadAt(out[i], int64(b)*int64(th.bs))
		require.NoError(th.t, err)
	}
	return out
}

// connect tells th how to reach peer's pool kv.
func (th *testHost) connect(name string, peer *testHost) {
	th.t.Helper()
	require.NoError(th.t, th.c.ConnectPeer(th.ctx(), name, client.RemoteRank{Address: peer.h.MetadataAddr(), Pool: "kv"}))
}

// waitFinished collects GetFinished reports until every id in want appears
// (as finished or failed), failing the test after a deadline. It returns the
// merged report.
func (th *testHost) waitFinished(want ...string) client.Finished {
	th.t.Helper()
	var all client.Finished
	seen := map[string]int{}
	deadline := time.Now().Add(20 * time.Second)
	for {
		f, err := th.c.GetFinished(th.ctx())
		require.NoError(th.t, err)
		// A failed receive's blocks are invalid in the very reply that
		// fails it: never earlier (reused while still written), never later.
		failedRecv := 0
		for _, x := range f.Failed {
			if !x.Sending {
				failedRecv++
			}
		}
		require.Equal(th.t, failedRecv > 0, len(f.InvalidBlocks)+len(f.Quarantined) > 0,
			"a reply lists failed receives %v with invalid blocks %v and quarantined %v", f.Failed, f.InvalidBlocks, f.Quarantined)
		all.FinishedSending = append(all.FinishedSending, f.FinishedSending...)
		all.FinishedRecving = append(all.FinishedRecving, f.FinishedRecving...)
		all.Failed = append(all.Failed, f.Failed...)
		all.InvalidBlocks = append(all.InvalidBlocks, f.InvalidBlocks...)
		all.Quarantined = append(all.Quarantined, f.Quarantined...)
		for _, id := range append(append([]string{}, f.FinishedSending...), f.FinishedRecving...) {
			seen[id]++
		}
		for _, x := range f.Failed {
			if x.Sending {
				seen[x.Request]++ // a failed receive is in FinishedRecving already
			}
		}
		missing := 0
		for _, id := range want {
			if seen[id] == 0 {
				missing++
			}
		}
		if missing == 0 {
			for id, n := range seen {
				require.Equal(th.t, 1, n, "request %s reported %d times", id, n)
			}
			return all
		}
		if time.Now().After(deadline) {
			th.t.Fatalf("%d of %v not reported within 20s; got %+v", missing, want, all)
		}
		time.Sleep(2 * time.Millisecond) // pacing between polls of the report, as an engine step does
	}
}

func failedIDs(f client.Finished) []string {
	var out []string
	for _, x := range f.Failed {
		out = append(out, x.Request)
	}
	return out
}

// sameBlocks asserts that got holds want, block by block, naming the blocks
// that differ instead of dumping them.
func sameBlocks(t *testing.T, want, got [][]byte, msg string) bool {
	t.Helper()
	var bad []int
	for i := range want {
		if i >= len(got) || !bytes.Equal(want[i], got[i]) {
			bad = append(bad, i)
		}
	}
	return assert.Empty(t, bad, "%s: blocks at these positions differ", msg)
}

// tok is the notification token a test's engine gives request id on every
// host: drawn from the id, so both sides of a request agree without passing
// it around.
func tok(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64() | 1
}
