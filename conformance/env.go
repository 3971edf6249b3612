package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/custody-dev/custody/sdk"
)

// Bounds of the suite's waits. Every wait is bounded: a transport that
// hangs fails the check that waited, naming what it waited for.
const (
	// callTimeout bounds one transport call.
	callTimeout = 30 * time.Second
	// settleTimeout bounds how long a handle may take to turn terminal
	// (a 64 MiB transfer on a loaded machine included).
	settleTimeout = 60 * time.Second
	// defaultPeerLossBound is used when Describe states no
	// Limits.PeerLossBoundMillis.
	defaultPeerLossBound = 30 * time.Second
)

// env is one check's world: its agents, its region directory and the
// tracker that releases everything the check created.
type env struct {
	t      T
	ctx    context.Context
	cfg    Config
	desc   sdk.Description
	dir    string
	prefix string
	agents []*agent
	files  atomic.Int64 // region files created, to name the next
	// noteWait bounds a notification wait once noteBound measured it.
	noteWait time.Duration
	noteTook time.Duration // how long the latency probe took
	// tearingDown is set once the teardown starts: from then on calls get
	// a fresh context (callCtx).
	tearingDown bool
}

// newEnv makes the environment of one check. Its cleanup tears down every
// agent the check started and removes the region files.
func newEnv(t T, cfg Config, desc sdk.Description) *env {
	t.Helper()
	dir, err := os.MkdirTemp(cfg.Dir, "custody-conformance-")
	if err != nil {
		t.Fatalf("create region directory under %s: %v", cfg.Dir, err)
	}
	var salt [4]byte
	_, _ = rand.Read(salt[:])
	ctx, cancel := context.WithTimeout(t.Context(), cfg.CheckTimeout)
	e := &env{t: authorT{t}, ctx: ctx, cfg: cfg, desc: desc, dir: dir,
		prefix: "conf-" + sanitize(t.Name()) + "-" + hex.EncodeToString(salt[:])}
	t.Cleanup(func() {
		cancel()
		e.teardown()
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("remove region directory %s: %v", dir, err)
		}
	})
	return e
}

// sanitize keeps an agent name short and free of separators.
func sanitize(name string) string {
	name = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, name)
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	return name
}

// callCtx bounds one transport call. During the check it is bounded by the
// check's context too, so Config.CheckTimeout ends a check whose calls keep
// it running; only the teardown, which runs after that context ended, uses
// a fresh one so that it can still free what the check created.
func (e *env) callCtx() (context.Context, context.CancelFunc) {
	parent := e.ctx
	if e.tearingDown {
		parent = context.Background()
	}
	return context.WithTimeout(parent, callTimeout)
}

// pair returns the agents a check moves data between: two agents
// when the transport claims Remote, else one agent and itself (a loopback
// peer) when it claims Local.
func (e *env) pair() (*agent, *agent) {
	a := e.agent()
	if e.desc.Capabilities.Remote {
		return a, e.agent()
	}
	return a, a
}

// lossBound is how long the suite waits for a dead peer to show.
func (e *env) lossBound() time.Duration {
	if ms := e.desc.Limits.PeerLossBoundMillis; ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return defaultPeerLossBound
}
