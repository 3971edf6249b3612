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
	"github.com/custody-dev/custody/sdk"
	"github.com/custody-dev/custody/sdk/plugin"
)

// Round intervals of the owner loop: busy while requests are open, idle
// otherwise (notifications and leases still need rounds).
const (
	busyInterval = 1 * time.Millisecond
	idleInterval = 20 * time.Millisecond
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
	tp        *plugin.Plugin
	epoch     core.Epoch
	desc      sdk.Description
	pools     []poolEntry // PoolID-1 indexes
	links     map[string]*link
	reqs      map[core.RequestID]reqInfo
	rep       Finished
	restartAt time.Time
	lastStats time.Time
	fences    uint64
	restarts  uint64
	metaAddr  string // set by Serve before its ready callback
	metrAddr  string // likewise, when metrics are served

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
}

type command struct {
	fn    func(ctx context.Context) error
	reply chan error
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
		reqs:       map[core.RequestID]reqInfo{},
		cmds:       make(chan command),
		handshakes: make(chan handshake),
		done:       make(chan struct{}),
	}
	h.bgCtx, h.bgCancel = context.WithCancel(context.Background())
	if h.state, err = openState(cfg, log); err != nil {
		h.bgCancel()
		return nil, err
	}
	if err := h.start(ctx); err != nil {
		h.bgCancel()
		h.state.close()
		return nil, err
	}
	for _, p := range cfg.Pools {
		if _, err := h.registerPool(ctx, p.Name, core.PoolSpec{Path: p.Path, BlockSize: p.BlockSize, Blocks: uint32(p.Blocks)}); err != nil {
			_ = h.tp.Kill()
			h.bgCancel()
			h.state.close()
			return nil, fmt.Errorf("config: pools: %w", err)
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

// Run is the owner loop. It returns when ctx ends, after tearing down in
// rule 12's order: sessions, then pools, then the transport.
func (h *Host) Run(ctx context.Context) error {
	defer close(h.done)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return h.shutdown()
		case c := <-h.cmds:
			cctx, cancel := h.callCtx()
			c.reply <- c.fn(cctx)
			cancel()
		case hs := <-h.handshakes:
			h.settle(hs)
		case <-h.exited():
			h.fence("transport process exited")
		case <-t.C:
			h.round()
			t.Reset(h.interval())
		}
	}
}

// do runs fn on the owner goroutine and returns its error. It gives up when
// ctx ends or the host stops before the owner takes the command; once taken,
// the command runs to its end (bounded by the call timeout) and do waits for
// it, so the caller never hears "failed" of something that took effect (a
// report taken, a request recorded).
func (h *Host) do(ctx context.Context, fn func(ctx context.Context) error) error {
	c := command{fn: fn, reply: make(chan error, 1)}
	select {
	case h.cmds <- c:
	case <-h.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-c.reply
}

func (h *Host) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), h.cfg.Transport.CallTimeout)
}

func (h *Host) interval() time.Duration {
	if len(h.reqs) > 0 {
		return busyInterval
	}
	return idleInterval
}

func (h *Host) exited() <-chan struct{} {
	if h.tp == nil {
		return nil
	}
	return h.tp.Exited()
}

// round runs one core round and absorbs what it reports.
func (h *Host) round() {
	if h.tp == nil {
		h.restart()
	}
	ctx, cancel := h.callCtx()
	rd := h.core.Poll(ctx, time.Now())
	cancel()
	h.absorb(rd)
	if now := time.Now(); now.Sub(h.lastStats) > 100*time.Millisecond {
		h.lastStats = now
		h.metrics.observe(h.core.Stats())
	}
}

// absorb logs a round's alerts, acts on its fence requests and adds its
// finished report to the one the engine will fetch.
func (h *Host) absorb(rd core.Ready) {
	for _, a := range rd.Alerts {
		h.alert(a)
	}
	for _, e := range rd.Fence {
		if e == h.epoch && h.tp != nil {
			h.fence("core asked for a fence: a transfer was held past the cap or a call's outcome is unknown")
		} else {
			h.core.Fenced(e) // that process is already dead
		}
	}
	h.rep.add(rd)
	done := func(id core.RequestID, outcome string) {
		ri := h.reqs[id]
		delete(h.reqs, id)
		h.metrics.Requests.WithLabelValues(outcome).Inc()
		if outcome == "ok" && ri.op != "" {
			h.metrics.Bytes.WithLabelValues(ri.op).Add(float64(ri.bytes))
		}
	}
	for _, id := range rd.FinishedSending {
		done(id, "ok")
	}
	for _, id := range rd.FinishedReceiving {
		done(id, "ok")
	}
	for _, f := range rd.Failed {
		peer := h.reqs[f.Request].peer
		done(f.Request, "failed")
		h.metrics.Failures.WithLabelValues("request_failed").Inc()
		if errors.Is(f.Reason, sdk.ErrRemoteDisconnect) && peer != "" {
			h.dropStalePeer(peer)
		}
	}
}

func (h *Host) alert(a core.Alert) {
	h.metrics.Failures.WithLabelValues(a.Kind).Inc()
	if a.Kind == "hold_cap_fence" || a.Kind == "transfer_force_released" {
		h.metrics.Escalations.Inc()
	}
	args := []any{"failure_type", a.Kind}
	if a.Peer != "" {
		args = append(args, "peer", a.Peer)
	}
	if a.Request != "" {
		args = append(args, "request", string(a.Request))
	}
	if a.Handle != (core.Ref{}) {
		args = append(args, "handle", a.Handle.String())
	}
	if a.Err != nil {
		args = append(args, "error", a.Err.Error())
	}
	if a.Level == core.AlertError {
		h.log.Error("transfer failure", args...)
	} else {
		h.log.Warn("transfer failure", args...)
	}
}

// fence kills the transport process, so every transfer it initiated stops,
// tells core the epoch is fenced and starts a new transport.
func (h *Host) fence(why string) {
	e := h.epoch
	h.log.Error("fencing transport", "failure_type", "transport_fenced", "epoch", uint64(e), "reason", why)
	h.info.Store(nil)
	if h.tp != nil {
		if err := h.tp.Kill(); err != nil {
			// Not proven dead: its registrations may live on. Keep it; the
			// next round asks again, and its exit fences it.
			h.log.Error("kill transport", "failure_type", "transport_kill_failed", "epoch", uint64(e), "error", err.Error())
			return
		}
		h.tp = nil
	}
	h.core.Fenced(e)
	h.fences++
	h.metrics.Fences.Inc()
	// Peers are loaded again on demand: core dropped them with the epoch,
	// and a handshake still running lands in the new one.
	h.restart()
	if h.tp != nil {
		h.restarts++
		h.metrics.Restarts.Inc()
	}
}

// restart starts a transport as the next epoch; on failure it retries after
// restartBackoff, and engine calls fail meanwhile.
func (h *Host) restart() {
	if time.Now().Before(h.restartAt) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), plugin.DefaultStartTimeout)
	defer cancel()
	if err := h.start(ctx); err != nil {
		h.restartAt = time.Now().Add(restartBackoff)
		h.log.Error("start transport", "failure_type", "transport_start_failed", "error", err.Error())
	}
}

// start launches the transport as epoch h.epoch+1 and attaches it.
func (h *Host) start(ctx context.Context) error {
	next := h.epoch + 1
	h.epoch = next
	pl, err := startTransport(ctx, h.state.transportConfig(h.cfg.Transport), fmt.Sprintf("%s.%d", h.cfg.Name, next), h.log.Named("transport"))
	if err != nil {
		return err
	}
	if err := h.state.recordTransport(pl.Pid()); err != nil {
		_ = pl.Kill()
		return err
	}
	if err := h.core.Attach(ctx, pl, next); err != nil {
		_ = pl.Kill()
		h.core.Fenced(next)
		return err
	}
	h.tp, h.desc = pl, pl.Description()
	if d, err := pl.Describe(ctx); err == nil {
		h.desc = d
	}
	if err := h.publish(ctx); err != nil {
		// Peers could never reach this epoch: end it, so restart retries.
		_ = pl.Kill()
		h.core.Fenced(next)
		h.tp = nil
		return err
	}
	return nil
}

// publish refreshes the PeerInfo peers fetch: the transport's metadata and
// every pool's region in this epoch.
func (h *Host) publish(ctx context.Context) error {
	md, err := h.tp.LocalMetadata(ctx)
	if err != nil {
		return fmt.Errorf("publish metadata: %w", err)
	}
	pools := make([]PoolLayout, len(h.pools))
	for i, p := range h.pools {
		region, _, err := h.core.PoolRegion(core.PoolID(i + 1))
		if err != nil {
			return fmt.Errorf("publish metadata: pool %q: %w", p.name, err)
		}
		pools[i] = PoolLayout{Name: p.name, BlockSize: p.spec.BlockSize, Blocks: uint64(p.spec.Blocks), Region: uint64(region)}
	}
	h.info.Store(&PeerInfo{
		Name:          h.cfg.Name,
		Agent:         fmt.Sprintf("%s.%d", h.cfg.Name, h.epoch),
		Transport:     h.desc.Name,
		ContractMajor: h.desc.ContractMajor,
		Epoch:         uint64(h.epoch),
		Metadata:      md,
		Pools:         pools,
		Compat:        CompatHash(h.desc.Name, h.desc.ContractMajor, pools),
	})
	return nil
}

// shutdown closes core until nothing is held (bounded by closeGrace, after
// which the transport is fenced instead), then ends the transport process.
func (h *Host) shutdown() error {
	h.bgCancel()
	defer h.bg.Wait()
	defer h.state.close()
	deadline := time.Now().Add(closeGrace)
	var err error
	for {
		ctx, cancel := h.callCtx()
		err = h.core.Close(ctx, time.Now())
		cancel()
		if err == nil || !errors.Is(err, core.ErrHeld) || time.Now().After(deadline) {
			break
		}
		h.round()
		time.Sleep(busyInterval) // pacing between rounds, as Run's timer does
	}
	h.info.Store(nil)
	if h.tp == nil {
		return err
	}
	if err != nil {
		h.log.Error("close with transfers still held: fencing", "failure_type", "close_fenced", "error", err.Error())
		if kerr := h.tp.Kill(); kerr != nil {
			return fmt.Errorf("shutdown: transfers still held and the transport could not be killed: %w", kerr)
		}
		h.core.Fenced(h.epoch)
		return nil
	}
	h.tp.Stop()
	return nil
}
