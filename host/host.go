// Package host is custody's runtime: one Host per engine rank owns every
// transfer resource of that rank. It drives core from one owner goroutine,
// runs the transport as a child process and fences it (kills it and starts
// another) when the process dies or core asks, serves the engine API and
// publishes this rank's metadata to its peers.
package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/custody-dev/custody/core"
	"github.com/custody-dev/custody/host/group"
	"github.com/custody-dev/custody/sdk"
)

const (
	// maxPollBackoff caps the wait between rounds while something is in
	// flight and the transport cannot wake the host (sdk.Waker): a round
	// runs at once after a command or a round that made progress, and the
	// wait doubles from minPollBackoff after each round that made none.
	minPollBackoff = 10 * time.Microsecond
	maxPollBackoff = time.Millisecond
	// restartBackoff spaces attempts to start a transport after one failed.
	restartBackoff = time.Second
	// closeGrace bounds how long Run's shutdown waits for running transfers
	// to stop before it fences the transport instead.
	closeGrace = 10 * time.Second
)

// ErrClosed is returned by engine calls once the host has stopped.
var ErrClosed = errors.New("host stopped")

// ErrRestarting is returned by engine calls that need the transport while it
// restarts after a fence; retry them.
var ErrRestarting = errors.New("transport restarting; retry")

// ErrConnecting is returned by engine calls that need a peer connected while
// its handshake runs; retry them.
var ErrConnecting = errors.New("peer handshake in progress; retry")

// Host is one custody host. Create it with New, run it with Run; every engine
// call is handed to Run's owner goroutine, the only one that touches core.
type Host struct {
	cfg     *Config
	log     hclog.Logger
	metrics *Metrics
	state   *hostState // locked for the host's life (orphan.go)
	trust   *peerTrust // this host's TLS identity and CA (trust.go), set by Serve

	// Owner goroutine state: touched only inside Run and the commands it runs.
	core      *core.Core
	tp        process
	epoch     core.Epoch
	desc      sdk.Description
	pools     []poolEntry // PoolID-1 indexes
	links     map[string]*link
	failing   map[string]*link // links whose last handshake attempt failed (handshake_backoff.go)
	reqs      map[core.RequestID]reqInfo
	rep       outbox // safe for concurrent use; the engine API reads it directly
	restartAt time.Time
	lastStats time.Time
	fences    uint64
	restarts  uint64
	metaAddr  string                         // set by Serve before its ready callback
	metrAddr  string                         // likewise, when metrics are served
	engineLn  atomic.Pointer[engineListener] // set by Serve once the engine socket listens

	// Round scheduling (owner goroutine): wake is the transport's wake-up
	// channel when it has one (sdk.Waker); backoff the wait before the
	// next round while something is in flight.
	wake    <-chan struct{}
	backoff time.Duration
	// missed: a round came (a wake-up, a command) while the previous
	// round's queries were still out, so core skipped its queries; the
	// next round runs as soon as they are reported, or the change that
	// wake-up announced would wait for the next deadline.
	missed bool
	// next is core's schedule, from the latest Ready absorbed.
	next core.Next

	exec *executor
	// submitted counts the Work handed to the executor, reported the
	// results of it handed to core (queued: the difference). local holds
	// the results of Work answered on the owner goroutine (local.go),
	// which happens only while nothing is queued; draining is set while
	// absorb hands them to core.
	submitted, reported uint64
	local               []workResult
	draining            bool
	// A round asked for while Work is queued runs once that Work is
	// reported (roundNowOrAfterQueued): woken, and wokeAt, what submitted
	// was when it was asked for.
	woken  bool
	wokeAt uint64

	// The rank group (nil for a host that decides alone) and the mode its
	// ranks agreed on; ranks holds finished requests back until every
	// rank is terminal (ranks.go).
	group *group.Group
	mode  group.Mode
	ranks *rankSync

	cmds       chan command
	handshakes chan handshake
	done       chan struct{}
	info       atomic.Pointer[PeerInfo]

	bgCtx    context.Context
	bgCancel context.CancelFunc
	bg       sync.WaitGroup
}

type poolEntry struct {
	name string
	spec core.PoolSpec
}

// reqInfo is what the host remembers of an open request for its metrics.
type reqInfo struct {
	peer  string
	op    string
	bytes uint64
	// On a ranked host: the request's blocks, and whether it receives
	// into them (ranks_hold.go).
	blocks []core.BlockRef
	recv   bool
}

// New starts the configured transport, attaches it as epoch 1 and registers
// the configured pools. Call Run next; on error nothing is left running.
func New(ctx context.Context, cfg *Config, log hclog.Logger) (*Host, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	c, err := core.New(core.Config{HoldCap: cfg.Escalation.Cap, Escalation: escalation(cfg.Escalation.Policy)})
	if err != nil {
		return nil, err
	}
	h := &Host{
		cfg:        cfg,
		log:        log,
		metrics:    NewMetrics(),
		core:       c,
		links:      map[string]*link{},
		failing:    map[string]*link{},
		reqs:       map[core.RequestID]reqInfo{},
		cmds:       make(chan command),
		handshakes: make(chan handshake),
		done:       make(chan struct{}),
	}
	h.bgCtx, h.bgCancel = context.WithCancel(context.Background())
	h.exec = newExecutor(cfg.Transport.CallTimeout)
	// Every failure below undoes what was built, in rule 12's order: the
	// transport (and with it every registration) before the rank group,
	// the state directory last.
	fail := func(err error) (*Host, error) {
		if h.tp != nil {
			_ = h.tp.Kill()
			h.tp = nil
		}
		h.bgCancel()
		h.exec.close()
		if h.group != nil {
			_ = h.group.Close()
		}
		h.state.close()
		return nil, err
	}
	if h.state, err = openState(cfg, log); err != nil {
		h.bgCancel()
		h.exec.close()
		return nil, err
	}
	if cfg.Ranked() {
		if h.group, h.mode, err = joinGroup(ctx, cfg, h.state, log); err != nil {
			return fail(err)
		}
		h.ranks = newRankSync(h)
	}
	if err := h.start(ctx); err != nil {
		return fail(err)
	}
	for _, p := range cfg.Pools {
		if _, err := h.registerPool(ctx, p.Name, core.PoolSpec{Path: p.Path, BlockSize: p.BlockSize, Blocks: uint32(p.Blocks)}); err != nil {
			return fail(fmt.Errorf("config: pools: %w", err))
		}
	}
	return h, nil
}

func escalation(policy string) core.EscalationPolicy {
	if policy == PolicyReleaseAndReuse {
		return core.EscalateReleaseAndReuse
	}
	return core.EscalateFence
}

// MetadataAddr is the peer metadata endpoint's address once Serve listens.
func (h *Host) MetadataAddr() string { return h.metaAddr }

// MetricsAddr is the metrics endpoint's address once Serve listens, or "".
func (h *Host) MetricsAddr() string { return h.metrAddr }

// Metrics are this host's Prometheus series.
func (h *Host) Metrics() *Metrics { return h.metrics }

// Info is what this host publishes to its peers now; ok is false while its
// transport restarts.
func (h *Host) Info() (PeerInfo, bool) {
	p := h.info.Load()
	if p == nil {
		return PeerInfo{}, false
	}
	return *p, true
}
